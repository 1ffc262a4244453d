"""Checkpoint uploads without Streamlit: streaming, archive checks, flattening, addressing."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile

import pytest

from eagle3dash import store as db
from eagle3dash.checkpoint import save
from eagle3dash.errors import InputError
from eagle3dash.servebench import PromptFileError, load_prompts
from eagle3dash.spec import DraftSpec
from eagle3dash.testing.tensors import random_tensors
from eagle3dash.uploads import (
    CHUNK,
    UploadError,
    UploadLimits,
    archive_stem,
    dir_digest,
    member_path,
    register_path,
    register_upload,
    save_prompt_file,
)
from tests.uploadkit import Upload, tar_of, zip_of

SPEC = DraftSpec(
    format="specforge",
    hidden_size=32,
    target_hidden_size=32,
    intermediate_size=64,
    num_layers=1,
    num_heads=2,
    num_kv_heads=2,
    head_dim=16,
    vocab_size=128,
    draft_vocab_size=128,
    aux_layer_ids=(1, 2, 3),
    aux_ids_location="eagle_config",
)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> dict[str, bytes]:
    path = save(SPEC, random_tensors(SPEC, seed=0), tmp_path_factory.mktemp("c") / "d", "specforge")
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


@pytest.fixture
def store(tmp_path):
    s = db.open_store(tmp_path / "home")
    yield s
    s.close()


def files(ckpt: dict[str, bytes]) -> list[Upload]:
    return [Upload(name, blob) for name, blob in ckpt.items()]


def nothing_left(store: db.Store) -> bool:
    """No checkpoint registered, nothing in checkpoints/ (no staging folder either)."""
    return (
        db.list_checkpoints(store, include_removed=True) == []
        and list(store.path("checkpoints").iterdir()) == []
    )


# --- good uploads ------------------------------------------------------------------------------


def test_checkpoint_files_are_streamed_stored_by_content_and_registered(store, ckpt) -> None:
    uploads = files(ckpt)
    result = register_upload(store, uploads)
    assert result.path == store.path("checkpoints", result.sha256)
    assert db.content_address(result.path) == result.sha256
    assert sorted(p.name for p in result.path.iterdir()) == sorted(ckpt)
    row = db.get_checkpoint(store, result.checkpoint_id)
    assert row.uploaded and row.sha256 == result.sha256 and row.format == "specforge"
    assert row.report["aux_layer_ids"] == [1, 2, 3]
    assert row.report["path"] == str(result.path)
    # Copied in chunks: never one read of the whole stream.
    assert all(u.reads and set(u.reads) == {CHUNK} for u in uploads)


def test_the_same_upload_twice_is_stored_once(store, ckpt) -> None:
    first = register_upload(store, files(ckpt))
    again = register_upload(store, files(ckpt))
    assert again.sha256 == first.sha256 and again.already_stored
    assert again.checkpoint_id == first.checkpoint_id
    assert [p.name for p in store.path("checkpoints").iterdir()] == [first.sha256]


@pytest.mark.parametrize("kind", ["zip", "tar", "tar.gz", "tgz"])
def test_an_archive_of_a_folder_is_flattened(store, ckpt, kind) -> None:
    members = {f"out/final-draft/{n}": b for n, b in ckpt.items()}
    members["__MACOSX/out/._config.json"] = b"junk"
    tar_mode = "w" if kind == "tar" else "w:gz"
    blob = zip_of(members) if kind == "zip" else tar_of(members, tar_mode)
    result = register_upload(store, [Upload(f"draft.{kind}", blob)])
    assert result.name == "final-draft"
    assert sorted(p.name for p in result.path.iterdir()) == sorted(ckpt)
    assert result.sha256 == db.content_address(result.path)
    # The same files uploaded loose land in the same place.
    assert register_upload(store, files(ckpt)).path == result.path


def test_an_archive_without_a_folder_is_named_after_it(store, ckpt) -> None:
    result = register_upload(store, [Upload("kimi-eagle3.tar.gz", tar_of(ckpt))])
    assert result.name == "kimi-eagle3"
    assert register_upload(store, [Upload("x.zip", zip_of(ckpt))], name="given").name == "given"


def test_dir_digest_matches_content_address_on_nested_names(tmp_path) -> None:
    names = {"a-b": b"1", "a/b": b"2", "a/c/d": b"3", "ab": b"4", "a.b": b"5"}
    hashes = {}
    for name, blob in names.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(blob)
        hashes[name] = db.content_address(path)
    assert dir_digest(hashes) == db.content_address(tmp_path)


# --- bad uploads -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("member", "says"),
    [
        ("../evil", "'..'"),
        ("ok/../../evil", "'..'"),
        ("/etc/evil", "absolute"),
        ("C:/evil", "absolute"),
        ("dir\\evil", "backslash"),
    ],
)
def test_zip_members_that_leave_the_folder_are_refused(store, ckpt, tmp_path, member, says):
    blob = zip_of({**ckpt, member: b"boom"})
    with pytest.raises(UploadError, match=says):
        register_upload(store, [Upload("bad.zip", blob)])
    assert nothing_left(store)
    assert not (store.home / "evil").exists() and not (store.home.parent / "evil").exists()


def test_tar_traversal_is_refused(store, ckpt) -> None:
    with pytest.raises(UploadError, match="'..'"):
        register_upload(store, [Upload("bad.tar.gz", tar_of({**ckpt, "../../evil": b"x"}))])
    assert nothing_left(store)


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "device", "fifo"])
def test_tar_links_and_special_files_are_refused(store, ckpt, kind) -> None:
    info = tarfile.TarInfo("link")
    info.type = {
        "symlink": tarfile.SYMTYPE,
        "hardlink": tarfile.LNKTYPE,
        "device": tarfile.CHRTYPE,
        "fifo": tarfile.FIFOTYPE,
    }[kind]
    info.linkname = "/etc/passwd"
    says = {"symlink": "symbolic link", "hardlink": "hard link"}.get(kind, "not a regular file")
    with pytest.raises(UploadError, match=says):
        register_upload(store, [Upload("bad.tar", tar_of(ckpt, "w", extra=[info]))])
    assert nothing_left(store)


def test_zip_symlink_members_are_refused(store, ckpt) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, blob in ckpt.items():
            zf.writestr(name, blob)
        link = zipfile.ZipInfo("model-link.safetensors")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "/etc/passwd")
    with pytest.raises(UploadError, match="symbolic link"):
        register_upload(store, [Upload("bad.zip", buf.getvalue())])
    assert nothing_left(store)


def test_size_and_member_caps(store, ckpt) -> None:
    total = sum(len(b) for b in ckpt.values())
    small = UploadLimits(max_total_bytes=total - 1)
    with pytest.raises(UploadError, match="larger than"):
        register_upload(store, files(ckpt), limits=small)
    with pytest.raises(UploadError, match="larger than"):  # declared sizes, before extracting
        register_upload(store, [Upload("c.zip", zip_of(ckpt))], limits=small)
    with pytest.raises(UploadError, match="larger than"):
        register_upload(store, [Upload("c.tgz", tar_of(ckpt))], limits=small)
    many = {f"f{i}.json": b"{}" for i in range(20)}
    with pytest.raises(UploadError, match="more than 10 files"):
        register_upload(store, [Upload("m.zip", zip_of({**ckpt, **many}))], limits=max_members(10))
    with pytest.raises(UploadError, match="more than 10 files"):
        register_upload(
            store, [Upload("m.tar", tar_of({**ckpt, **many}, "w"))], limits=max_members(10)
        )
    assert nothing_left(store)


def max_members(n: int) -> UploadLimits:
    return UploadLimits(max_members=n)


def test_a_broken_checkpoint_is_rejected_with_nothing_left_behind(store, ckpt) -> None:
    blob = ckpt["model.safetensors"]
    broken = {**ckpt, "model.safetensors": blob[: len(blob) - 100]}
    with pytest.raises(UploadError, match="truncated") as err:
        register_upload(store, files(broken))
    assert "model.safetensors" in str(err.value) and ".upload-" not in str(err.value)
    with pytest.raises(UploadError, match="not valid JSON"):
        register_upload(store, files({**ckpt, "config.json": b"{nope"}))
    with pytest.raises(UploadError, match="no weights"):
        register_upload(store, files({"config.json": ckpt["config.json"]}))
    assert nothing_left(store)


def test_uploads_that_are_not_checkpoints(store, ckpt) -> None:
    with pytest.raises(UploadError, match="no config.json at the top"):
        register_upload(store, [Upload("w.zip", zip_of({"model.safetensors": b"x"}))])
    with pytest.raises(UploadError, match="not a checkpoint file"):
        register_upload(store, [Upload("notes.txt", b"hello")])
    with pytest.raises(UploadError, match="not both"):
        register_upload(store, [Upload("a.zip", zip_of(ckpt)), *files(ckpt)])
    with pytest.raises(UploadError, match="not a zip or tar archive"):
        register_upload(store, [Upload("junk.zip", b"PK garbage, not a zip")])
    with pytest.raises(UploadError, match="uploaded twice"):
        register_upload(store, [*files(ckpt), Upload("config.json", b"{}")])
    with pytest.raises(UploadError, match="no files"):
        register_upload(store, [])
    assert issubclass(UploadError, InputError)
    assert nothing_left(store)


def test_member_names() -> None:
    assert member_path("a/./b//c") == "a/b/c"
    assert member_path("dir/") == "dir"
    assert member_path("__MACOSX/x") is None and member_path("a/.DS_Store") is None
    assert member_path("./") is None
    with pytest.raises(UploadError):
        member_path("a\0b")
    assert archive_stem("x/ckpt.tar.gz") == "ckpt" and archive_stem("ckpt.TGZ") == "ckpt"


# --- paths and prompts -------------------------------------------------------------------------


def test_register_path_inspects_first(store, tmp_path) -> None:
    path = save(SPEC, random_tensors(SPEC, seed=1), tmp_path / "mine", "specforge")
    checkpoint_id, report = register_path(store, path / "config.json")
    row = db.get_checkpoint(store, checkpoint_id)
    assert row.path == str(path) and not row.uploaded and report["format"] == "specforge"
    with pytest.raises(InputError, match="does not exist"):
        register_path(store, tmp_path / "nope")
    assert len(db.list_checkpoints(store)) == 1


def test_prompt_files_are_validated_and_kept(store) -> None:
    good = Upload(
        "p.jsonl", b'{"prompt": "hi"}\n\n{"messages": [{"role": "user", "content": "x"}]}\n'
    )
    path, count = save_prompt_file(store, good)
    assert count == 2 and path.parent == store.path("prompts")
    assert len(load_prompts(path)) == 2
    with pytest.raises(PromptFileError, match="q.jsonl, line 2"):
        save_prompt_file(store, Upload("q.jsonl", b'{"prompt": "hi"}\n[1]\n'))
    with pytest.raises(PromptFileError, match="not UTF-8"):
        save_prompt_file(store, Upload("r.jsonl", b"\xff\xfe"))
    with pytest.raises(PromptFileError, match="s.jsonl: larger than 64 MiB"):
        save_prompt_file(store, Upload("s.jsonl", b"x" * ((64 << 20) + 1)))


# --- the same checkpoint, however it arrives ---------------------------------------------------


def test_a_re_upload_keeps_the_checkpoints_name(store, ckpt) -> None:
    first = register_upload(store, [Upload("kimi-eagle3.tar.gz", tar_of(ckpt))])
    assert (first.name, first.already_registered) == ("kimi-eagle3", False)
    again = register_upload(store, files(ckpt))  # loose files: no archive name to take
    assert (again.checkpoint_id, again.name, again.already_registered) == (
        first.checkpoint_id,
        "kimi-eagle3",
        True,
    )
    assert db.get_checkpoint(store, first.checkpoint_id).name == "kimi-eagle3"


def test_a_path_and_an_upload_of_the_same_content_are_one_checkpoint(store, ckpt, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    for name, blob in ckpt.items():
        (mine / name).write_bytes(blob)
    checkpoint_id, _ = register_path(store, mine)
    uploaded = register_upload(store, files(ckpt))
    assert (uploaded.checkpoint_id, uploaded.path, uploaded.name) == (checkpoint_id, mine, "mine")
    assert uploaded.already_registered
    assert list(store.path("checkpoints").iterdir()) == []  # the copy was not kept
    assert [c.id for c in db.list_checkpoints(store)] == [checkpoint_id]


def test_an_upload_then_the_same_content_by_path_is_one_checkpoint(store, ckpt, tmp_path):
    uploaded = register_upload(store, [Upload("draft.zip", zip_of(ckpt))], name="epoch 7")
    mine = tmp_path / "elsewhere"
    mine.mkdir()
    for name, blob in ckpt.items():
        (mine / name).write_bytes(blob)
    assert register_path(store, mine)[0] == uploaded.checkpoint_id
    assert [c.name for c in db.list_checkpoints(store)] == ["epoch 7"]


def test_the_same_weights_under_another_config_are_another_checkpoint(store, ckpt) -> None:
    import json

    config = json.loads(ckpt["config.json"])
    config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [-1, 0, 1]
    fixed = {**ckpt, "config.json": json.dumps(config).encode()}
    a = register_upload(store, files(ckpt))
    b = register_upload(store, files(fixed))
    assert a.checkpoint_id != b.checkpoint_id and not b.already_registered


@pytest.mark.parametrize(
    ("name", "blob", "says"),
    [
        (
            "junk.tar.gz",
            b"this is not an archive at all",
            "junk.tar.gz: not a zip or tar archive, or one cut short; upload a .zip, .tar or "
            ".tar.gz of the checkpoint folder",
        ),
        (
            "cut.tar.gz",
            None,
            "cut.tar.gz: the archive is damaged or cut short; pack the checkpoint folder and "
            "upload it again",
        ),
    ],
)
def test_a_junk_archive_is_one_line_in_plain_words(store, ckpt, name, blob, says) -> None:
    if blob is None:
        whole = tar_of(ckpt)
        blob = whole[: len(whole) // 2]
    with pytest.raises(UploadError) as err:
        register_upload(store, [Upload(name, blob)])
    assert str(err.value) == says
    assert nothing_left(store)


@pytest.mark.parametrize("pack", ["zip", "tgz"])
def test_an_archive_bomb_is_stopped_while_extracting_and_removed(store, ckpt, pack) -> None:
    # A valid draft plus 40 MiB of zeros: the archive is a few hundred KB, so past 100x (and the
    # 16 MiB floor) it is refused, before the zeros are all written, and nothing stays.
    padded = {**ckpt, "padding.bin": bytes(40 << 20)}
    blob = zip_of(padded) if pack == "zip" else tar_of(padded)
    assert len(blob) * 100 < (16 << 20)  # so the floor decides here
    with pytest.raises(UploadError) as err:
        register_upload(store, [Upload(f"bomb.{pack}", blob)])
    assert "expands to more than 16.0 MiB, over 100x its own size" in str(err.value)
    assert nothing_left(store)


def test_files_past_what_the_headers_declare_are_refused_while_extracting(store, ckpt) -> None:
    # A plain .tar does not compress, so the 100x ratio never fires: 3 MiB of notes beside the
    # draft pass a 2 MiB margin only if the bound counts what the headers declare.
    margin = UploadLimits(undeclared_margin=2 << 20)
    notes = {**ckpt, "notes.txt": bytes(3 << 20)}
    with pytest.raises(UploadError, match=r"notes.txt takes the files past what their \.safe"):
        register_upload(store, [Upload("n.tar", tar_of(notes, "w"))], limits=margin)
    assert nothing_left(store)
    # Padding after the tensors a header declares counts the same, in a zip as in plain files.
    padded = {**ckpt, "model.safetensors": ckpt["model.safetensors"] + bytes(3 << 20)}
    with pytest.raises(UploadError, match="model.safetensors takes the files past"):
        register_upload(store, [Upload("p.tar", tar_of(padded, "w"))], limits=margin)
    with pytest.raises(UploadError, match="model.safetensors takes the files past"):
        register_upload(store, files(padded), limits=margin)
    assert nothing_left(store)
    # Within the margin (a 1 MiB tokenizer), the same draft is registered.
    tokenizer = {**ckpt, "tokenizer.json": b"{}" + bytes(1 << 20)}
    done = register_upload(store, [Upload("t.tar", tar_of(tokenizer, "w"))], limits=margin)
    assert sorted(done.files) == sorted([*ckpt, "tokenizer.json"])
