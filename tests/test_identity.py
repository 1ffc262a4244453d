"""Which draft is which: weight digests by content, cached in the store by path, size and mtime."""

from __future__ import annotations

import hashlib
import os

from eagle3dash import store as db
from eagle3dash.identity import checkpoint_digest, compare_drafts, weights_digest


def folder(path, weights: bytes, config: bytes = b'{"hidden_size": 32}'):
    path.mkdir(parents=True)
    (path / "config.json").write_bytes(config)
    (path / "model.safetensors").write_bytes(weights)
    return path


def test_the_digest_covers_each_weight_file_by_name_and_content(tmp_path) -> None:
    a = folder(tmp_path / "a", b"x" * 100)
    inner = hashlib.sha256(b"x" * 100).hexdigest()
    expected = hashlib.sha256(f"model.safetensors\0{inner}\n".encode()).hexdigest()
    assert weights_digest(a) == expected
    # config.json is not a weight file: another config with the same weights is the same draft
    b = folder(tmp_path / "b", b"x" * 100, config=b"{}")
    assert weights_digest(b) == expected


def test_same_config_and_sizes_with_other_bytes_differ(tmp_path) -> None:
    a = folder(tmp_path / "a", b"x" * 100)
    b = folder(tmp_path / "b", b"y" * 100)
    assert compare_drafts(a, str(b), served_is_local=True).status == "differs"
    assert compare_drafts(a, str(a), served_is_local=True).status == "same"


def test_a_remote_or_unreadable_served_draft_is_unknown(tmp_path) -> None:
    a = folder(tmp_path / "a", b"x" * 100)
    remote = compare_drafts(a, str(a), served_is_local=False)
    assert remote.status == "unknown" and "not a path on this machine" in remote.reason
    gone = compare_drafts(a, str(tmp_path / "nowhere"), served_is_local=True)
    assert gone.status == "unknown" and "not readable here" in gone.reason


def test_the_store_caches_digests_by_path_size_and_mtime(tmp_path) -> None:
    store = db.open_store(tmp_path / "home")
    a = folder(tmp_path / "a", b"x" * 100)
    first = weights_digest(a, store)
    # Same size and mtime, other bytes: the cache answers without reading the file again.
    weights = a / "model.safetensors"
    stat = weights.stat()
    weights.write_bytes(b"z" * 100)
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert weights_digest(a, store) == first
    # A new mtime means a new reading.
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert weights_digest(a, store) != first
    assert weights_digest(a) == weights_digest(a, store)


def test_the_checkpoint_digest_covers_the_config_and_the_weights(tmp_path) -> None:
    a = folder(tmp_path / "a", b"w" * 64, b'{"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}')
    copy = folder(tmp_path / "copy", b"w" * 64, b'{"eagle_aux_hidden_state_layer_ids": [0, 1, 2]}')
    fixed = folder(
        tmp_path / "fixed", b"w" * 64, b'{"eagle_aux_hidden_state_layer_ids": [-1, 0, 1]}'
    )
    assert checkpoint_digest(copy) == checkpoint_digest(a) == checkpoint_digest(a / "config.json")
    assert checkpoint_digest(fixed) != checkpoint_digest(a)
    assert weights_digest(fixed) == weights_digest(a)
