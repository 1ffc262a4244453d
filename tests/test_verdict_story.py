"""One verdict, one story (issue 36, item 3): a finding that explains the slowdown is the root
cause, and no remedy asks for what the run already has.

The numbers are the issue's format demo: 0.71x the baseline's tok/s, accept length 1.82 on raw
prompts and 3.58 through the chat template, the target given (the training side measured)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from eagle3dash import store as db
from eagle3dash.diagnosis.result import Side
from eagle3dash.engines.seam import ServerReport
from eagle3dash.engines.vllm.words import steps_flags as vllm_steps_flags
from eagle3dash.findings import Evidence, Finding, diagnose
from eagle3dash.identity import DraftIdentity
from eagle3dash.layout import Tap
from eagle3dash.probe import PairCheck
from eagle3dash.profile import FormatRow, Profile, Recommendation, per_position
from eagle3dash.ui.newrun import pair_check_words
from eagle3dash.ui.words import fix_block
from tests.appkit import app, no_exception, plain, texts
from tests.findingskit import Bench, Eval, Server, Spec


@dataclass
class NoisyBench(Bench):
    """A benchmark stand-in with its requests' tok/s (the speedup's noise)."""

    output_tok_s_per_request: list[float] = field(default_factory=list)


STORED = Path(__file__).parent / "fixtures" / "stored" / "schema3.json"
FLAGS_4 = "--speculative-num-steps 4 --speculative-eagle-topk 1 --speculative-num-draft-tokens 5"


def format_demo(tok_s: float = 38.0, **more) -> Evidence:
    """The format demo's evidence: draft C served raw prompts, its training side measured on the
    local target, the profile's two prompt-format rows, and the steps advice keeping the served 4
    steps (1 step predicted +3%, within the noise)."""
    profile = Profile(
        steps=4,
        per_position=per_position(4, None, None, None),
        prompt_format=[
            FormatRow("raw", 8, 1.82, 1.82, accept_length_noise=0.3),
            FormatRow("chat-template", 8, 3.58, 3.58, accept_length_noise=0.4),
        ],
        recommended=Recommendation(4, 1.82, tok_s, 4, tok_s, FLAGS_4, 1, 0.03, -0.1, 0.16, False),
    )
    base = dict(
        server=Server(speculative=Spec(num_steps=4, num_draft_tokens=5)),
        measured=Bench(tok_s, accept_length=1.82),
        baseline=Bench(53.5),
        training_eval=Eval([0.4, 0.2, 0.1, 0.05]),
        serving_eval=Eval([0.4, 0.2, 0.1, 0.05]),
        profile=profile,
    )
    return Evidence(**{**base, **more})


def test_the_format_gap_is_the_root_cause_of_the_slowdown() -> None:
    found = diagnose(format_demo())
    root = found[0]  # the verdict's root cause: the first critical finding
    assert (root.id, root.severity) == ("prompt-format-gap", "critical")
    assert "3.58 on chat-template prompts but 1.82 on raw prompts" in root.title
    slow = next(f for f in found if f.id == "slower-than-baseline")
    assert slow.severity == "critical" and "0.71x" in slow.title
    assert slow.fix.startswith("Fix prompt-format-gap first (it caps the accept length)")
    assert slow.data["explained_by"] == ["prompt-format-gap"]


def test_no_remedy_asks_for_what_the_run_already_has() -> None:
    found = diagnose(format_demo())
    fixes = " ".join(f.fix for f in found)
    assert "measure the training side" not in fixes  # the target was given: it was measured
    assert "local copy of the target" not in fixes
    assert FLAGS_4 not in fixes  # the server runs 4 steps: never "try 4 steps"
    assert "fastest setting" not in fixes


def test_the_format_gap_is_the_root_cause_within_the_speedups_noise_too() -> None:
    # 0.92x, the cost model's answer at accept length 1.65: "may make it slower" (an info note);
    # the gap still holds down what the run measured on raw prompts.
    # Its requests at 40 and 58 tok/s: 2 standard errors are 37% of their mean, so 0.92x ±0.34.
    found = diagnose(format_demo(measured=NoisyBench(49.2, 1.82, 1, [40.0, 58.0])))
    assert found[0].id == "prompt-format-gap" and found[0].severity == "critical"
    assert next(f for f in found if f.id == "slower-than-baseline").severity == "info"


def test_a_warning_that_explains_a_slowdown_becomes_its_root_cause() -> None:
    # Measured 1.2 where the serving layout simulates 2.4: something beyond the layout lowers the
    # accept length, and the endpoint is slower than no speculation; no profile.
    e = format_demo(profile=None, serving_eval=Eval([0.6, 0.4, 0.25, 0.15]))
    e.measured = Bench(38.0, accept_length=1.2)
    found = diagnose(e)
    assert [(f.id, f.severity) for f in found[:2]] == [
        ("measured-below-simulated", "critical"),
        ("slower-than-baseline", "critical"),
    ]
    assert "slower than without speculation (slower-than-baseline)" in found[0].evidence
    assert found[1].fix.startswith("Fix measured-below-simulated first")


def test_an_unexplained_slowdown_asks_for_the_training_side_only_when_it_is_missing() -> None:
    measured = format_demo(profile=None)
    measured.measured = Bench(38.0, accept_length=1.82)
    slow = next(f for f in diagnose(measured) if f.id == "slower-than-baseline")
    assert "measure the training side" not in slow.fix
    assert "training and serving feed the draft alike" in slow.fix
    missing = format_demo(profile=None, training_eval=None, serving_eval=None)
    slow = next(f for f in diagnose(missing) if f.id == "slower-than-baseline")
    assert "measure the training side (a local copy of the target" in slow.fix


def side(name: str, source: str, acceptance: list[float], top1: float) -> Side:
    """A diagnosis side fed taps 1, 2, 3 whose draft evaluation simulates 1 + sum(acceptance)."""
    taps = (Tap(1), Tap(2), Tap(3))
    return Side(name, taps, source, "", taps, Eval(acceptance, [top1]), 4)


def test_an_unexplained_gap_asks_only_for_the_evidence_the_run_lacks() -> None:
    # Training simulated 3.2, serving 2.0: a gap no check explains. The run had the target (its
    # JSON files' digests) and a training dump; the profile measured the prompt formats alike.
    e = format_demo(
        training=side("training", "training-dump", [0.8, 0.6, 0.5, 0.3], 0.7),
        serving=side("serving", "observed", [0.5, 0.3, 0.15, 0.05], 0.5),
        target_json_sha256={"config.json": "0" * 64},
    )
    assert e.profile is not None
    e.profile.prompt_format = [FormatRow("raw", 8, 2.0), FormatRow("chat-template", 8, 2.1)]
    gap = next(f for f in diagnose(e) if f.id == "training-serving-gap")
    assert gap.fix == "Compare the sampling of training and serving."
    bare = format_demo(
        profile=None,
        training=side("training", "config", [0.8, 0.6, 0.5, 0.3], 0.7),
        serving=side("serving", "predicted", [0.5, 0.3, 0.15, 0.05], 0.5),
    )
    gap = next(f for f in diagnose(bare) if f.id == "training-serving-gap")
    assert gap.fix == (
        "Collect the next evidence: a training dump (the features training really used) and a "
        "local copy of the target, so both sides are measured on the same taps; compare the "
        "prompt format and sampling of training and serving."
    )


def test_before_submit_says_what_was_checked_and_never_gives_a_green_light() -> None:
    run_measures = (
        "which taps the server feeds the draft against the ones it was trained on, the accept "
        "length and the speedup: the run measures them"
    )
    alone = PairCheck([], None, None, None)
    assert pair_check_words(alone) == (
        "Checked: the server's settings (its speculative algorithm and steps, its hidden states).",
        f"Not checked until the run: the server against a checkpoint (choose one above); "
        f"{run_measures}.",
    )
    elsewhere = DraftIdentity("unknown", "a" * 64, None, "org/draft", "not a path here")
    checked, unchecked = pair_check_words(PairCheck([], "/d", None, elsewhere))
    assert checked.endswith("; the checkpoint's config and weight headers.")
    assert unchecked.startswith(
        "Not checked until the run: whether the server serves this checkpoint (not a path here);"
    )
    same = DraftIdentity("same", "a" * 64, "a" * 64, "/d", "the weight files are byte-identical")
    checked, unchecked = pair_check_words(PairCheck([], "/d", None, same))
    assert checked.endswith(
        "; whether the server serves this checkpoint (the weight files are byte-identical)."
    )
    assert unchecked == f"Not checked until the run: {run_measures}."


# --- a fix is something to paste ------------------------------------------------------------

SERVER = ServerReport.from_dict(
    {
        "url": "http://127.0.0.1:30000",
        "version": "0.5.23",
        "model_path": "/models/llama",
        "speculative": {
            "algorithm": "EAGLE3",
            "draft_model_path": "/d/draft",
            "num_steps": 4,
            "eagle_topk": 1,
            "num_draft_tokens": 5,
        },
    }
)
SHIFTED = Finding(
    "layout-mismatch",
    "critical",
    "Serving feeds the draft other taps than training did.",
    "slot 0 ...",
    'Set "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 0, 1]} in the draft\'s '
    "config.json and restart the server: SGLang 0.5.23 then captures the embedding output, "
    "after block 1, after block 2.",
    {"config_ids": [-1, 0, 1], "sglang_version": "0.5.23"},
)


def test_a_config_fix_is_a_whole_json_object_with_its_minus_one_beside_it() -> None:
    block = fix_block(SHIFTED, SERVER)
    assert block is not None and block.language == "json"
    assert json.loads(block.code) == {
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 0, 1]}
    }
    assert block.note == "-1 = the embedding output"
    assert "-1 =" not in block.code and "Merge into" not in block.code


def test_a_server_fix_is_a_whole_command_that_keeps_serving_the_draft() -> None:
    hidden = Finding(
        "hidden-states-off",
        "warning",
        "The server does not return hidden states.",
        "",
        "Restart the server with --enable-return-hidden-states, then run the diagnosis again.",
    )
    block = fix_block(hidden, SERVER)
    assert block is not None and block.language == "bash"
    assert shlex.split(block.code) == [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/llama",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "/d/draft",
        "--speculative-num-steps",
        "4",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "5",
        "--enable-return-hidden-states",
    ]
    # The steps advice's flags replace the server's own steps, not add to them.
    fewer = Finding(
        "num-steps-advice", "info", "T.", "", FLAGS_4.replace(" 4 ", " 2 ").replace(" 5", " 3")
    )
    block = fix_block(fewer, SERVER)
    assert block is not None
    tokens = shlex.split(block.code)
    assert tokens.count("--speculative-num-steps") == 1
    assert tokens[tokens.index("--speculative-num-steps") + 1] == "2"
    # vLLM: its CLI and the whole speculative config.
    vllm = ServerReport.from_dict({"url": "http://h:8000", "engine": "vllm", "model_path": "/m"})
    steps = Finding("num-steps-advice", "info", "T.", "", vllm_steps_flags(2, "/d/draft"))
    block = fix_block(steps, vllm)
    assert block is not None and shlex.split(block.code) == [
        "vllm",
        "serve",
        "/m",
        "--speculative-config",
        '{"method": "eagle3", "model": "/d/draft", "num_speculative_tokens": 2}',
    ]
    assert fix_block(Finding("x", "info", "T.", "", "Retrain the draft."), SERVER) is None


@pytest.fixture(scope="module")
def shifted_run(tmp_path_factory) -> tuple[Path, int]:
    """A home with one run whose root cause edits the checkpoint's config (ids [-1, 0, 1])."""
    d = json.loads(STORED.read_text())
    d["findings"] = [SHIFTED.to_dict(), *d["findings"]]
    d["verdict"]["root_cause"] = SHIFTED.to_dict()
    d["verdict"]["status"] = "problem"
    home = tmp_path_factory.mktemp("story") / "home"
    with db.open_store(home) as store:
        run_id = db.create_run(store, None, "http://127.0.0.1:30002")
        db.update_run(store, run_id, status="succeeded", diagnosis_json=json.dumps(d))
        db.save_findings(store, run_id, d["findings"])
    return home, run_id


def test_the_run_page_pastes_the_fix_and_the_checkpoint_tab_names_the_layout(
    shifted_run, monkeypatch
) -> None:
    home, run_id = shifted_run
    monkeypatch.setenv("EAGLE3DASH_HOME", str(home))
    at = app("run", run=str(run_id))
    no_exception(at)
    blocks = [c.value for c in at.code]
    pasted = '{"eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 0, 1]}}'
    assert blocks[0] == pasted  # under the banner, then under the finding
    assert all(json.loads(b) for b in blocks if b.startswith("{"))
    assert not any(b.startswith(("Set ", "check ", "Nothing")) for b in blocks)  # no prose
    captions = [plain(c.value) for c in at.caption]
    assert captions.count(
        "The fix, to paste. Merge into the draft's config.json, served by SGLang 0.5.23. "
        "-1 = the embedding output."
    ) == len([b for b in blocks if b == pasted])
    shown = texts(at)
    assert "No problems found in the checkpoint." not in shown
    assert (
        "The checkpoint's files are readable: its config and weights load as they are. Its "
        "layout is the issue: Serving feeds the draft other taps than training did "
        "(layout-mismatch)." in shown
    )


def test_a_slowdown_with_a_cause_offers_no_steps_setting_to_paste() -> None:
    # The steps advice says 1 step would be 30% faster on today's acceptance; but the format gap
    # caps that acceptance, so the slowdown's fix is the gap first, with no flags to paste.
    faster = Recommendation(
        1, 1.2, 49.4, 4, 38.0, "--speculative-num-steps 1", 1, 0.3, 0.1, 0.5, True
    )
    profile = format_demo().profile
    assert profile is not None
    profile.recommended = faster
    found = diagnose(format_demo(profile=profile))
    slow = next(f for f in found if f.id == "slower-than-baseline")
    assert slow.fix == (
        "Fix prompt-format-gap first (it caps the accept length), then run the diagnosis again: "
        "its steps advice rests on the acceptance that fix changes."
    )
    assert "--speculative" not in slow.fix
