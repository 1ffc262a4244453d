"""Bad input, collected in one place: every case ends in ONE line naming the problem (exit 1 for
the CLI, an error box for the app, an UploadError for an upload), no traceback, within a generous
call timeout (a hang fails the test; nothing is timed), and nothing written outside the home.

The CLI runs in-process (`cli.main`) in a thread with a timeout; the home-folder cases run the
worker as a subprocess, as a user who cannot write when the tests run as root (root writes
anywhere). Endpoints are local servers (tests/httpserver.py) that are down, drip, flood, answer
HTML or are not SGLang. The second pass (the access gate, escaping, bounds, deadlines, CLI edges)
is tests/test_bad_inputs_hardening.py: `pytest tests/test_bad_inputs*.py` runs the whole suite.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import sqlite3
import stat
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from eagle3dash import jobs as jobq
from eagle3dash import store as db
from eagle3dash.demo import FIXTURES
from eagle3dash.servebench import PromptFileError, load_prompts
from eagle3dash.uploads import UploadError, UploadLimits, register_upload
from tests.appkit import app, no_exception, texts
from tests.badinputkit import CALL_S, SPEC, cli_error
from tests.httpserver import Reply, closed_port_url, serve
from tests.jobkit import run_worker_once, start_worker, wait_until
from tests.specs import ROOT
from tests.uploadkit import Upload, tar_of, zip_of

# --- the CLI, in-process -----------------------------------------------------------------------


def files_under(path: Path) -> set[Path]:
    return {p for p in path.rglob("*")}


@contextmanager
def nothing_written(where: Path) -> Iterator[None]:
    before = files_under(where)
    yield
    new = {p for p in files_under(where) - before if not p.is_relative_to(where / "home")}
    assert not new, sorted(map(str, new))


def broken_draft(draft: Path, where: Path, config=None, header: bytes | None = None) -> Path:
    """A copy of the good draft with its config changed (a dict merged in, or raw text) or its
    safetensors file replaced by raw bytes."""
    out = where / "broken"
    shutil.copytree(draft, out)
    if isinstance(config, dict):
        data = json.loads((out / "config.json").read_text())
        (out / "config.json").write_text(json.dumps(_merge(data, config)))
    elif config is not None:
        (out / "config.json").write_text(config)
    if header is not None:
        (out / "model.safetensors").write_bytes(header)
    return out


def _merge(data: dict, more: dict) -> dict:
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            _merge(data[key], value)
        else:
            data[key] = value
    return data


def _st(header: object, n: int | None = None) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text) if n is None else n) + text


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


DEEP = "[" * 100_000 + "]" * 100_000
INSPECT_CASES: dict[str, tuple[dict, str]] = {
    # name: (how the draft is broken, what the line must say)
    "config-not-json": ({"config": "{not json"}, "config.json"),
    "config-a-list": ({"config": "[1, 2]"}, "config.json"),
    "config-deeply-nested": ({"config": DEEP}, "config.json"),
    "hidden-size-zero": ({"config": {"hidden_size": 0}}, "hidden_size"),
    "heads-zero": ({"config": {"num_attention_heads": 0}}, "num_attention_heads"),
    "head-dim-a-string": ({"config": {"head_dim": "16"}}, "head_dim"),
    "layers-a-billion": ({"config": {"num_hidden_layers": 10**9}}, "num_hidden_layers"),
    "vocab-negative": ({"config": {"vocab_size": -5}}, "vocab_size"),
    "rope-theta-a-string": ({"config": {"rope_theta": "big"}}, "rope_theta"),
    "aux-ids-not-a-list": (
        {"config": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": 3}}},
        "eagle_aux_hidden_state_layer_ids",
    ),
    "aux-ids-mixed": (
        {"config": {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, "x", 3]}}},
        "eagle_aux_hidden_state_layer_ids",
    ),
    "a-dflash-draft": ({"config": {"architectures": ["DFlashDraftModel"]}}, "a DFlash draft"),
    "a-peagle-draft": (
        {"config": {"architectures": ["PEagleDraftModel"]}},
        "in parallel in one forward pass",
    ),
    "safetensors-empty": ({"header": b""}, "model.safetensors"),
    "safetensors-truncated": ({"header": struct.pack("<Q", 1000) + b"{}"}, "model.safetensors"),
    "safetensors-garbage-header": (
        {"header": struct.pack("<Q", 8) + b"notjson!"},
        "model.safetensors",
    ),
    "safetensors-huge-header-length": (
        {"header": struct.pack("<Q", 1 << 40) + b"{}"},
        "model.safetensors",
    ),
    "safetensors-header-a-list": ({"header": _st([1, 2])}, "model.safetensors"),
    "safetensors-deep-header": (
        {
            "header": _st(None)[:8].replace(_st(None)[:8], struct.pack("<Q", len(DEEP)))
            + DEEP.encode()
        },
        "model.safetensors",
    ),
    "safetensors-offsets-past-end": (
        {
            "header": _st(
                {"fc.weight": {"dtype": "F32", "shape": [32, 96], "data_offsets": [0, 12288]}}
            )
        },
        "model.safetensors",
    ),
}


@pytest.mark.parametrize("case", list(INSPECT_CASES))
def test_inspect_a_broken_draft(case, draft, place, capsys) -> None:
    how, says = INSPECT_CASES[case]
    path = broken_draft(draft, place, how.get("config"), how.get("header"))
    with nothing_written(place):
        line = cli_error(["inspect", str(path)], capsys)
    assert says in line


def test_inspect_paths(place, capsys) -> None:
    (place / "empty").mkdir()
    (place / "notes.txt").write_text("hello")
    with nothing_written(place):
        assert "does not exist" in cli_error(["inspect", str(place / "nope")], capsys)
        assert "config.json" in cli_error(["inspect", str(place / "empty")], capsys)
        assert "no config.json" in cli_error(["inspect", str(place / "notes.txt")], capsys)


def _index(draft: Path, where: Path, weight_map: dict) -> Path:
    out = broken_draft(draft, where)
    (out / "model.safetensors").rename(out / "model-00001.safetensors")
    index = {"metadata": {}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index))
    return out


@pytest.mark.parametrize(
    "shard, says",
    [
        ("../" * 24 + "etc/passwd", "not a file name in"),
        ("/etc/passwd", "not a file name in"),
        (7, "weight_map"),
    ],
)
def test_an_index_naming_shards_outside_the_folder(draft, place, capsys, shard, says) -> None:
    path = _index(draft, place, {"fc.weight": shard})
    with nothing_written(place):
        assert says in cli_error(["inspect", str(path)], capsys)


def test_a_pickle_payload_never_runs(draft, place, capsys) -> None:
    out = broken_draft(draft, place)
    (out / "model.safetensors").unlink()
    (out / "pytorch_model.bin").write_bytes(pickle.dumps({"fc.weight": _Evil()}))
    with nothing_written(place):
        line = cli_error(["inspect", str(out)], capsys)
    assert "pytorch_model.bin" in line and not (place / "pwned").exists()


def test_a_run_folder_whose_training_state_would_run_code(place, capsys) -> None:
    """SpecForge 0.2's training_state.pt is read with weights_only=True: a payload that needs
    a pickle global is refused in one line and runs nothing."""
    import torch

    step = place / "run-step10"
    step.mkdir()
    torch.save({"global_step": 10, "evil": _Evil()}, step / "training_state.pt")
    (place / "run-latest").symlink_to(step)
    with nothing_written(place):
        line = cli_error(["inspect", str(place)], capsys)
    assert "training_state.pt: refused" in line and not (place / "pwned").exists()


def test_a_specforge_step_folder_without_a_model_config(place, capsys) -> None:
    import torch

    step = place / "run-step10"
    step.mkdir()
    torch.save({"global_step": 10, "draft_state_dict": {}}, step / "training_state.pt")
    with nothing_written(place):
        line = cli_error(["inspect", str(step)], capsys)
    assert "specforge export --to sglang --checkpoint " + str(step) in line


# --- layout, eval, detect ----------------------------------------------------------------------

FLAG_CASES = {
    "layout-target-layers-zero": (["layout", "--target-layers", "0"], "--target-layers"),
    "layout-target-layers-negative": (["layout", "--target-layers", "-3"], "--target-layers"),
    "eval-target-layers-zero": (
        ["eval", "--capture", "CAPTURE", "--layout", "1,2,3", "--target-layers", "0"],
        "--target-layers",
    ),
    "layout-bad-training-layout": (
        ["layout", "--target-layers", "4", "--training-layout", "1,x"],
        "not a tap: 'x'",
    ),
    "layout-unknown-trainer": (["layout", "--target-layers", "4", "--trainer", "nope"], "nope"),
    "eval-missing-capture": (["eval", "--capture", "NOPE", "--layout", "1,2,3"], "NOPE"),
    "eval-bad-layout": (["eval", "--capture", "CAPTURE", "--layout", "a,b"], "not a tap: 'a'"),
    "eval-garbage-capture": (["eval", "--capture", "GARBAGE", "--layout", "1,2,3"], "GARBAGE"),
    "eval-empty-capture": (
        ["eval", "--capture", "CAPTURE", "--layout", "1,2,3"],
        "neither an eagle3dash capture",
    ),
    "detect-nothing-to-detect-from": (["detect"], "--capture"),
    "detect-target-not-a-folder": (["detect", "--target", "GARBAGE"], "GARBAGE"),
}


@pytest.mark.parametrize("case", list(FLAG_CASES))
def test_a_bad_flag(case, draft, place, capsys) -> None:
    argv, says = FLAG_CASES[case]
    (place / "capture").mkdir()
    (place / "garbage.bin").write_bytes(b"\x00garbage" * 100)
    names = {"NOPE": place / "nope", "CAPTURE": place / "capture", "GARBAGE": place / "garbage.bin"}
    argv = [str(names.get(a, a)) for a in argv]
    says = str(names.get(says, says))
    with nothing_written(place):
        assert says in cli_error([*argv[:1], "--draft", str(draft), *argv[1:]], capsys)


def test_capture_token_ids_outside_the_vocabulary(draft, place, capsys) -> None:
    import torch

    from eagle3dash.capture import Capture, save_capture
    from eagle3dash.capture.format import Sequence
    from eagle3dash.layout import Tap

    width, length = SPEC.target_hidden_size, 6
    ids = torch.tensor([1, 2, SPEC.vocab_size + 7, 3, 4, 5])  # one id past the vocabulary
    states = {Tap(d): torch.zeros(length, width) for d in (1, 2, 3)}
    capture = Capture(
        taps=(Tap(1), Tap(2), Tap(3)),
        sequences=[Sequence(input_ids=ids, states=states)],
        hidden_size=width,
        source="a capture",
        meta={},
        embed_weight=torch.zeros(SPEC.vocab_size, width),  # the target's, for this draft
    )
    saved = save_capture(capture, place / "capture")
    with nothing_written(place):
        line = cli_error(
            ["eval", "--draft", str(draft), "--capture", str(saved), "--layout", "1,2,3"], capsys
        )
    assert f"token ids [{SPEC.vocab_size + 7}] outside the vocabulary of" in line


@pytest.mark.parametrize(
    "tensors, says",
    [
        ("fp8-without-scales", "float8_e4m3fn but the file has no hidden_states_scales"),
        ("scales-beside-float32", "but hidden_states are torch.float32, not float8"),
        ("a-scale-per-layer", "one scale per token (5) was expected"),
    ],
)
def test_an_inconsistent_fp8_dump(tensors, says, draft, place, capsys) -> None:
    import torch
    from safetensors.torch import save_file

    plain = torch.randn(5, 4, SPEC.target_hidden_size)
    made = {
        "fp8-without-scales": {"hidden_states": plain.to(torch.float8_e4m3fn)},
        "scales-beside-float32": {
            "hidden_states": plain,
            "hidden_states_scales": torch.ones(5, 1, 1),
        },
        "a-scale-per-layer": {
            "hidden_states": plain.to(torch.float8_e4m3fn),
            "hidden_states_scales": torch.ones(1, 4, 1),
        },
    }[tensors]
    (place / "dump").mkdir()
    save_file({**made, "token_ids": torch.arange(5)}, str(place / "dump" / "hs_0.safetensors"))
    argv = ["eval", "--draft", str(draft), "--capture", str(place / "dump"), "--layout", "1,2,3"]
    with nothing_written(place):
        line = cli_error([*argv, "--target-layers", "4"], capsys)
    assert "hs_0.safetensors: " in line and says in line


def test_a_missing_draft_for_every_command(place, capsys) -> None:
    nope = str(place / "nope")
    with nothing_written(place):
        for argv in (
            ["layout", "--draft", nope, "--target-layers", "4"],
            ["eval", "--draft", nope, "--capture", nope, "--layout", "1,2,3"],
            ["detect", "--draft", nope, "--capture", nope],
        ):
            assert "nope" in cli_error(argv, capsys)


# --- probe and diagnose against endpoints that misbehave -----------------------------------------

SERVERS: dict[str, tuple[Callable | None, str]] = {
    # name: (the server's app, None for no server; what the line must say)
    "down": (None, "connect"),
    "html": (lambda r: Reply(200, "<html><script>alert(1)</script></html>", "text/html"), "not"),
    "not-sglang-json": (lambda r: Reply(200, {"hello": "world"}), "not"),
    "server-error": (lambda r: Reply(500, "boom"), "500"),
    "not-found": (lambda r: Reply(404, "nope"), "404"),
    "slow-drip": (lambda r: Reply(200, {"version": "0.5.23"}, drip=1.0), "2"),
    "hangs": (lambda r: Reply(200, {"version": "0.5.23"}, delay=30), "2"),
    "huge-body": (lambda r: Reply(200, b"x" * (65 << 20)), "64 MiB"),
    "not-http": (lambda r: Reply(raw=b"SSH-2.0-OpenSSH_9.6\r\n"), "without answering"),
    "bad-json": (lambda r: Reply(200, '{"version": ', "application/json"), "not"),
}


@contextmanager
def endpoint(name: str) -> Iterator[str]:
    app_, _ = SERVERS[name]
    if app_ is None:
        yield closed_port_url()
        return
    with serve(app_) as served:
        yield served.url


@pytest.mark.parametrize("name", list(SERVERS))
def test_probe_a_bad_endpoint(name, place, capsys) -> None:
    with endpoint(name) as url, nothing_written(place):
        line = cli_error(["probe", url, "--timeout", "2"], capsys)
    assert SERVERS[name][1] in line
    assert "<script>" not in line and "boom" not in line and "hello" not in line  # never echoed


@pytest.mark.parametrize("name", ["down", "html"])
def test_diagnose_against_a_bad_endpoint(name, draft, place, capsys) -> None:
    with endpoint(name) as url, nothing_written(place):
        line = cli_error(["diagnose", "--draft", str(draft), "--endpoint", url], capsys)
    assert SERVERS[name][1] in line and "<script>" not in line


@pytest.mark.parametrize("url", ["file:///etc/passwd", "not a url", "ftp://gpubox:30000", ""])
def test_probe_a_url_that_is_no_endpoint(url, place, capsys) -> None:
    with nothing_written(place):
        line = cli_error(["probe", url], capsys)
    assert "passwd" not in line or "root:" not in line


DIAGNOSE_FLAGS = {
    "num-prompts-zero": (["--num-prompts", "0"], "--num-prompts"),
    "concurrency-huge": (["--concurrency", "100000"], "--concurrency"),
    "max-new-tokens-negative": (["--max-new-tokens", "-1"], "--max-new-tokens"),
    "prompts-missing": (["--prompts", "NOPE"], "--prompts"),
    "device-tpu": (["--device", "tpu"], "--device"),
}


@pytest.mark.parametrize("case", list(DIAGNOSE_FLAGS))
def test_diagnose_with_a_bad_flag(case, draft, place, capsys) -> None:
    flags, says = DIAGNOSE_FLAGS[case]
    names = {"NOPE": place / "nope.jsonl"}
    flags = [str(names.get(f, f)) for f in flags]
    with serve(lambda r: Reply(404)) as served, nothing_written(place):
        argv = ["diagnose", "--draft", str(draft), "--endpoint", served.url, *flags]
        assert says in cli_error(argv, capsys)


@pytest.mark.parametrize(
    "text, says",
    [
        ('{"prompt": "hi"}\n{"prompt": \n', "line 2"),
        ('{"prompt": ' + DEEP + "}\n", "line 1"),
        ("[1, 2]\n", "line 1"),
        ("", "no prompts"),
    ],
)
def test_a_bad_prompt_file(text, says, place) -> None:
    # Read the same way by diagnose's --prompts, the worker and New run's prompt file box.
    (place / "p.jsonl").write_text(text)
    with nothing_written(place), pytest.raises(PromptFileError) as err:
        load_prompts(str(place / "p.jsonl"))
    assert says in str(err.value) and "\n" not in str(err.value)


INT64_MAX = 9223372036854775807  # 2^63 - 1: SGLang and vLLM hold input ids as int64
TOKEN_IDS = {
    # name: (the second line's ids, the target's vocab_size (None: no --target), what follows
    # "<file>, line 2: ")
    "10^29": (
        [5, 10**29],
        None,
        '"input_ids" holds 100000000000000000000000000000, past int64 (at most '
        f"{INT64_MAX}): no tokenizer makes such an id; give the target's token ids",
    ),
    "2^63": (
        [2**63],
        None,
        f'"input_ids" holds 9223372036854775808, past int64 (at most {INT64_MAX}): no '
        "tokenizer makes such an id; give the target's token ids",
    ),
    "the-vocabulary-size": (
        [7, 256, 3],
        256,
        '"input_ids" holds 256, outside the target\'s vocabulary of 256 tokens (ids 0..255, '
        "vocab_size in TARGET): give the target's token ids",
    ),
}


@pytest.mark.parametrize("case", list(TOKEN_IDS))
def test_a_prompt_id_past_the_vocabulary_or_int64_is_refused_before_any_request(
    case, draft, place, capsys
) -> None:
    ids, vocab, says = TOKEN_IDS[case]
    prompts = place / "p.jsonl"
    prompts.write_text(json.dumps({"input_ids": [1, 2, 3]}) + "\n" + json.dumps({"input_ids": ids}))
    (place / "target").mkdir()
    config = place / "target" / "config.json"
    config.write_text(json.dumps({"vocab_size": vocab, "num_hidden_layers": 4}))
    target = ["--target", str(place / "target")] if vocab else []
    with serve(lambda r: Reply(404)) as served, nothing_written(place):
        argv = ["diagnose", "--draft", str(draft), "--endpoint", served.url, *target]
        line = cli_error([*argv, "--prompts", str(prompts)], capsys)
    assert line == f"error: {prompts}, line 2: {says.replace('TARGET', str(config))}"
    assert served.requests == []


def test_token_ids_up_to_the_last_of_the_vocabulary_and_of_int64_are_taken(place) -> None:
    from eagle3dash.target import Vocabulary

    (place / "p.jsonl").write_text(json.dumps({"input_ids": [0, 255]}))
    assert load_prompts(place / "p.jsonl", Vocabulary(256, "x"))[0].input_ids == (0, 255)
    (place / "p.jsonl").write_text(json.dumps({"input_ids": [INT64_MAX]}))
    assert load_prompts(place / "p.jsonl")[0].input_ids == (INT64_MAX,)


# --- uploads -----------------------------------------------------------------------------------


def _special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


UPLOADS: dict[str, tuple[Callable[[dict[str, bytes]], tuple[str, bytes]], str]] = {
    "zip-bomb": (lambda c: ("b.zip", zip_of({**c, "pad.txt": bytes(40 << 20)})), "100x"),
    "tar-gz-bomb": (lambda c: ("b.tgz", tar_of({**c, "pad.txt": bytes(40 << 20)})), "100x"),
    "padding-past-the-header": (
        lambda c: ("p.tar", tar_of({**c, "pad.txt": bytes(17 << 20)}, "w")),
        "headers declare",
    ),
    "zip-dotdot": (lambda c: ("e.zip", zip_of({**c, "../evil": b"x"})), "'..'"),
    "zip-absolute": (lambda c: ("e.zip", zip_of({**c, "/srv/evil-member": b"x"})), "absolute"),
    "tar-dotdot": (lambda c: ("e.tar", tar_of({**c, "a/../../evil": b"x"}, "w")), "'..'"),
    "tar-symlink": (
        lambda c: ("l.tar", tar_of(c, "w", [_special("x", tarfile.SYMTYPE, "/etc/passwd")])),
        "symbolic link",
    ),
    "tar-hardlink": (
        lambda c: ("l.tar", tar_of(c, "w", [_special("x", tarfile.LNKTYPE, "/etc/passwd")])),
        "hard link",
    ),
    "tar-device": (
        lambda c: ("d.tar", tar_of(c, "w", [_special("x", tarfile.CHRTYPE)])),
        "regular",
    ),
    "tar-fifo": (lambda c: ("d.tar", tar_of(c, "w", [_special("x", tarfile.FIFOTYPE)])), "regular"),
    "truncated-tgz": (lambda c: ("t.tgz", tar_of(c)[:-200]), "cut short"),
    "junk-zip": (lambda c: ("j.zip", b"PK\x03\x04 not really a zip"), "archive"),
    "members-10001": (
        lambda c: ("m.zip", zip_of({**c, **{f"f{i}": b"" for i in range(10_001)}})),
        "more than 10000",
    ),
    "no-config": (
        lambda c: ("n.zip", zip_of({"model.safetensors": c["model.safetensors"]})),
        "config.json",
    ),
    "index-escape": (
        lambda c: (
            "i.zip",
            zip_of(
                {
                    "config.json": c["config.json"],
                    "model-1.safetensors": c["model.safetensors"],
                    "model.safetensors.index.json": json.dumps(
                        {"weight_map": {"fc.weight": "../" * 24 + "etc/passwd"}}
                    ).encode(),
                }
            ),
        ),
        "not a file name in",
    ),
}


@pytest.mark.parametrize("case", list(UPLOADS))
def test_a_bad_upload_is_refused_and_removed(case, draft, place) -> None:
    ckpt = {p.name: p.read_bytes() for p in draft.iterdir()}
    name, blob = UPLOADS[case][0](ckpt)
    store = db.open_store(place / "home")
    try:
        with nothing_written(place), pytest.raises(UploadError) as err:
            register_upload(store, [Upload(name, blob)], limits=UploadLimits())
        assert UPLOADS[case][1] in str(err.value) and "\n" not in str(err.value)
        assert db.list_checkpoints(store, include_removed=True) == []
        assert list(store.path("checkpoints").iterdir()) == []
    finally:
        store.close()


# --- the home folder ---------------------------------------------------------------------------


def _as_someone_else() -> list[str]:
    """The command prefix that drops root (who writes anywhere) to nobody; [] when not root."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot make a folder unwritable")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@contextmanager
def shared_place() -> Iterator[Path]:
    """A folder another user can traverse (pytest's temp folders are root's own)."""
    path = Path(tempfile.mkdtemp(prefix="e3d-home-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for p in [path, *path.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        shutil.rmtree(path)


def _worker(home: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*_as_someone_else(), sys.executable, "-m", "eagle3dash", "worker", "--once"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "EAGLE3DASH_HOME": str(home), "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=CALL_S,
    )


@pytest.mark.parametrize("how", ["a-file", "under-a-file", "read-only", "parent-read-only"])
def test_a_home_that_cannot_hold_the_store(how) -> None:
    with shared_place() as place:
        home = place / "home"
        if how == "a-file":
            home.write_text("x")
        elif how == "under-a-file":
            (place / "blocker").write_text("x")
            home = place / "blocker" / "home"
        elif how == "read-only":
            db.open_store(home).close()
            for p in [home, *home.rglob("*")]:
                p.chmod(0o555 if p.is_dir() else 0o444)
        else:
            (place / "locked").mkdir(mode=0o555)
            home = place / "locked" / "home"
        before = files_under(place)
        out = _worker(home)
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.startswith(f"error: the home {home}") and out.stderr.count("\n") == 1
        assert files_under(place) == before


# --- the app: New run's path boxes, endpoints and the home -------------------------------------


@pytest.fixture
def outside(tmp_path, monkeypatch) -> Path:
    """Data roots that do not hold tmp_path: the home alone (the session's roots are replaced)."""
    monkeypatch.setenv("EAGLE3DASH_DATA_ROOTS", "")
    return tmp_path


def _roots_line(home: db.Store, label: str = "Checkpoint folder") -> str:
    """The refusal of a path outside the roots: every root named (the home and the demo's
    models here), and how to add one."""
    return (
        f"{label}: the app reads only paths under its data roots ({home.home}, {FIXTURES}); to "
        "read another folder, restart the app with it added to EAGLE3DASH_DATA_ROOTS (folders "
        "separated by ':'): `eagle3dash app --data-root FOLDER` or "
        "`EAGLE3DASH_DATA_ROOTS=FOLDER make run`"
    )


def test_the_draft_box_refuses_paths_outside_the_roots_alike(home, draft, outside) -> None:
    link = home.home / "link"
    link.symlink_to(draft)
    at = app("new_run")
    shown = []
    for typed in (str(draft), str(outside / "nope"), str(home.home / ".." / "x"), str(link)):
        at.text_input(key="ckpt_path").set_value(typed).run()
        no_exception(at)
        shown.append(texts(at, "error"))
        assert shown[-1].startswith(_roots_line(home)) and at.success == []
    assert len(set(shown)) == 1  # one answer whether the path exists or not: nothing is told


def test_every_path_box_refuses_as_it_is_typed_naming_each_root(
    home, draft, outside, tmp_path_factory, monkeypatch
) -> None:
    """The local target, the training states and the draft config are refused as they are typed
    (before 'Run the diagnosis'), naming every data root and how to add one; only a box the page
    can replace with an upload offers it."""
    at = app("new_run")
    at.text_input(key="opt_target").set_value(str(draft)).run()
    no_exception(at)
    assert texts(at, "error") == _roots_line(home, "Local target path (for training-side states)")
    at.text_input(key="opt_train_states").set_value(str(outside / "dump")).run()
    at.text_input(key="opt_draft_config").set_value(str(draft / "config.json")).run()
    no_exception(at)
    assert texts(at, "error").split("\n") == [
        _roots_line(home, "Local target path (for training-side states)"),
        _roots_line(home, "Training states folder"),
        _roots_line(home, "Draft config (for a SpecForge step folder)"),
    ]
    at.text_input(key="ckpt_path").set_value(str(draft)).run()
    assert texts(at, "error").split("\n")[0] == (
        _roots_line(home) + "; or upload the checkpoint's files instead ('An upload' above)"
    )
    # the folders EAGLE3DASH_DATA_ROOTS lists are named too, in its order
    first, second = tmp_path_factory.mktemp("root-a"), tmp_path_factory.mktemp("root-b")
    monkeypatch.setenv("EAGLE3DASH_DATA_ROOTS", f"{first}:{second}")
    at = app("new_run")
    at.text_input(key="opt_target").set_value(str(outside / "t")).run()
    assert f"data roots ({home.home}, {first}, {second}, {FIXTURES});" in texts(at, "error")
    assert db.list_runs(home) == []


def test_the_target_and_prompt_boxes_refuse_paths_outside_the_roots(home, draft, outside):
    at = app("new_run")
    at.radio(key="prompt_source").set_value("A file on this machine").run()
    at.text_input(key="prompt_path").set_value("/etc/passwd").run()
    no_exception(at)
    assert "Prompt file: the app reads only paths under its data roots" in texts(at, "error")
    at.text_input(key="opt_target").set_value(str(draft)).run()
    at.button(key="submit").click().run()
    no_exception(at)
    assert "the app reads only paths under its data roots" in texts(at, "error")
    assert db.list_runs(home) == []


@pytest.mark.parametrize("name", ["html", "down", "not-sglang-json"])
def test_the_endpoint_box_with_a_bad_endpoint(home, name) -> None:
    with endpoint(name) as url:
        at = app("new_run")
        at.text_input(key="endpoint").set_value(url).run()
    no_exception(at)
    shown = texts(at, "error", "warning")
    assert shown and "<script>" not in shown and "hello" not in shown


def test_a_home_that_is_a_file_is_one_page(tmp_path, monkeypatch) -> None:
    (tmp_path / "home").write_text("x")
    monkeypatch.setenv("EAGLE3DASH_HOME", str(tmp_path / "home"))
    at = app("runs")
    no_exception(at)
    assert texts(at, "error") == f"the home {tmp_path / 'home'} is a file, not a folder: set " + (
        "EAGLE3DASH_HOME to a folder you can write (default ./.eagle3dash)"
    )


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make a folder read-only for this process: chmod, or a read-only bind mount for root."""
    if os.geteuid() != 0:
        modes = {p: stat.S_IMODE(p.stat().st_mode) for p in [path, *path.rglob("*")]}
        for p in modes:
            p.chmod(0o555 if p.is_dir() else 0o444)
        try:
            yield
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
        return
    mounted = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("root without mount: cannot make a folder read-only")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], check=True)
        yield
    finally:
        # Lazy: the app's cached store may still hold the database open.
        subprocess.run(["umount", "--lazy", str(path)], check=True)


def test_a_read_only_home_still_shows_its_runs(tmp_path, monkeypatch) -> None:
    home = tmp_path / "home"
    from eagle3dash.jobs import queue

    with db.open_store(home) as store:
        run_id = db.create_run(store, None, "http://gpubox:30000", None, {"demo": "x"})
        queue.submit_job(store, "diagnose", {}, run_id=run_id)  # queued: the page offers a cancel
    monkeypatch.setenv("EAGLE3DASH_HOME", str(home))
    with read_only(home):
        runs = app("runs")
        no_exception(runs)
        assert "Runs 1–1 of 1" in texts(runs)
        new = app("new_run")
        no_exception(new)
        assert f"The home {home} is read-only" in texts(new, "warning")
        assert new.get("text_input") == []  # nothing to fill in that could not be saved
        run = app("run", run="1")
        no_exception(run)
        assert "Cancel this run" not in [b.label for b in run.button]
        assert "The home is read-only: this run cannot be cancelled from here." in texts(
            run, "caption"
        )


# --- store faults: a lock held too long, a full disk, a database the app cannot read -----------


@contextmanager
def write_lock(db_path: Path) -> Iterator[None]:
    """Another process holds the database's write lock until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(db_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        yield
    finally:
        holder.communicate("\n", timeout=CALL_S)


_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


@contextmanager
def serving(home: Path, **env: str) -> Iterator[subprocess.Popen]:
    """A worker in its own process over the test kinds; it must still serve when the block ends."""
    worker = start_worker(home, env)
    try:
        yield worker
        assert worker.poll() is None, "the worker died"
    finally:
        worker.kill()
        worker.wait()


def serves_on(store: db.Store) -> None:
    """The worker runs the next job."""
    after = jobq.submit_job(store, "test-echo", {})
    assert jobq.wait_for_job(store, after, timeout=CALL_S)["status"] == "succeeded"


def test_a_write_lock_within_the_wait_is_waited_out(tmp_path) -> None:
    with db.open_store(tmp_path / "home") as store:
        run_id = db.create_run(store, None, None)
        job_id = jobq.submit_job(store, "test-sleepy", {"steps": 100, "dt": 0.02}, run_id=run_id)
        with serving(store.home, EAGLE3DASH_DB_WAIT_S="30"):
            wait_until(lambda: jobq.job_status(store, job_id)["progress"] > 0, CALL_S)
            with write_lock(store.db_path):
                time.sleep(1.0)  # the job and the worker write meanwhile: they wait
            assert jobq.wait_for_job(store, job_id, timeout=CALL_S)["status"] == "succeeded"
            serves_on(store)
        assert db.get_run(store, run_id)["status"] == "succeeded"


def test_a_write_lock_past_the_wait_fails_the_job_in_one_line(tmp_path) -> None:
    with db.open_store(tmp_path / "home") as store:
        line = (
            f"the database {store.db_path} stayed locked for 1 s (another process holds a write "
            "lock): stop that process or wait for it, then run it again"
        )
        run_id = db.create_run(store, None, None)
        job_id = jobq.submit_job(store, "test-sleepy", {"steps": 5000, "dt": 0.02}, run_id=run_id)
        with serving(store.home, EAGLE3DASH_DB_WAIT_S="1"):
            wait_until(lambda: jobq.job_status(store, job_id)["progress"] > 0, CALL_S)
            with write_lock(store.db_path):
                wait_until(lambda: line in jobq.job_log(store, job_id), CALL_S, "the job to stop")
            job = jobq.wait_for_job(store, job_id, timeout=CALL_S)
            serves_on(store)
        assert (job["status"], job["message"]) == ("failed", line)
        assert "Traceback" not in job["error"]
        run = db.get_run(store, run_id)
        assert (run["status"], run["error"]) == ("failed", line)


@contextmanager
def small_disk(path: Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs of `size` at `path`: a disk that really fills (ENOSPC for files, SQLITE_FULL for
    the database and its WAL alike). Mounting needs root; elsewhere the case is skipped."""
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a full disk is a small tmpfs, which only root can mount")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)


def test_a_disk_that_fills_during_a_job_fails_its_run_in_one_line(tmp_path) -> None:
    with small_disk(tmp_path / "disk") as disk, db.open_store(disk / "home") as store:
        fill = store.home / "captures" / "fill.bin"
        line = (
            f"the disk holding {store.home} is full ([Errno 28] No space left on device): free "
            "some space there, then run it again"
        )
        run_id = db.create_run(store, None, None)
        job_id = jobq.submit_job(store, "test-fill", {"path": str(fill)}, run_id=run_id)
        with serving(store.home):
            job = jobq.wait_for_job(store, job_id, timeout=CALL_S)
            assert (job["status"], job["message"], job["error"]) == ("failed", line, line)
            run = db.get_run(store, run_id)
            assert (run["status"], run["error"]) == ("failed", line)
            fill.unlink()  # space again: the worker takes the next job
            serves_on(store)


# The writes of a job's life: the worker's claim and its record of the child (the disk filled by
# another program just before), the job's progress, its recorded result and its settle (the job
# fills the disk, then makes that write).
JOB_WRITES = {"claim": "claim_job", "child-record": "record_child"}


@pytest.mark.parametrize("write", ["claim", "child-record", "progress", "result", "settle"])
def test_a_full_disk_at_any_write_of_a_job_fails_the_job_and_its_run(write, tmp_path) -> None:
    with small_disk(tmp_path / "disk") as disk, db.open_store(disk / "home") as store:
        filler = disk / "filler.bin"
        line = (
            f"the disk holding {store.home} is full (database or disk is full): free some "
            "space there, then run it again"
        )
        run_id = db.create_run(store, None, None)
        if write in JOB_WRITES:
            job_id = jobq.submit_job(store, "test-echo", {}, run_id=run_id)
            out = run_worker_once(store.home, CALL_S, (JOB_WRITES[write], filler))
        else:
            params = {"path": str(filler), "then": write, "run_id": run_id}
            job_id = jobq.submit_job(store, "test-fill-then", params, run_id=run_id)
            out = run_worker_once(store.home, CALL_S)
        assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
        job = jobq.job_status(store, job_id)
        assert (job["status"], job["message"], job["error"]) == ("failed", line, line)
        run = db.get_run(store, run_id)
        assert (run["status"], run["error"], run["diagnosis_json"]) == ("failed", line, None)
        assert db.list_runs(store, status="running") == []
        filler.unlink()  # space again: the next worker takes the next job
        after = jobq.submit_job(store, "test-echo", {})
        assert run_worker_once(store.home, CALL_S).returncode == 0
        assert jobq.job_status(store, after)["status"] == "succeeded"


@pytest.mark.parametrize("how", ["garbage", "garbage-before-first-open", "dropped-table"])
def test_a_database_the_app_cannot_read_is_one_message(home, how) -> None:
    db.create_run(home, None, "http://gpubox:30000")
    if how != "garbage-before-first-open":
        no_exception(app("runs"))  # prepared and cached by the app
    home.close()
    reason = "file is not a database"
    if how == "dropped-table":
        conn = sqlite3.connect(home.db_path)
        conn.execute("DROP TABLE findings")
        conn.close()
        reason = "no such table: findings"
    else:  # a new file in its place, as a restore from a bad copy would leave it
        for suffix in ("-wal", "-shm"):
            Path(f"{home.db_path}{suffix}").unlink(missing_ok=True)
        garbage = home.home / "garbage"
        garbage.write_bytes(b"not a database, " * 512)
        garbage.replace(home.db_path)
    at = app("runs")
    no_exception(at)
    assert texts(at, "error") == (
        f"the database {home.db_path} cannot be read ({reason}): nothing was changed; restore it "
        "from a copy, or set EAGLE3DASH_HOME to another folder"
    )


@pytest.mark.parametrize(
    ("wait", "says"),
    [("abc", "is not a number of seconds"), ("-1", "must be 0 or more"), ("nan", "must be 0")],
)
def test_a_bad_database_wait_is_one_line(wait, says, place, capsys, monkeypatch) -> None:
    monkeypatch.setenv("EAGLE3DASH_DB_WAIT_S", wait)
    line = cli_error(["worker", "--once"], capsys)
    assert line.startswith(f"error: EAGLE3DASH_DB_WAIT_S={wait!r} ") and says in line


def test_the_default_database_wait_outlasts_a_45_s_lock(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("EAGLE3DASH_DB_WAIT_S", raising=False)
    with db.open_store(tmp_path / "home") as store:
        assert store.db.execute("PRAGMA busy_timeout").fetchone()[0] == 120_000
