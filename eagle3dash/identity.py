"""Which draft is which: a streamed digest of a checkpoint's weight files.

Two checkpoints are the same draft only if their tensor data is the same: another epoch of the
same run has the same config.json and the same file sizes, so names and sizes prove nothing. The
digest covers every weight file (safetensors, .bin, index) byte for byte; a cache keyed by path,
size and mtime (the store's) saves hashing a multi-GB draft twice.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from eagle3dash.http_client import is_this_machine
from eagle3dash.provenance import nemo_exports

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".index.json")
CHUNK = 1 << 20


class DigestCache(Protocol):
    """Where file digests are remembered (the store implements it)."""

    def get_digest(self, path: str, size: int, mtime_ns: int) -> str | None:
        """The digest recorded for this file at this size and mtime, or None."""

    def put_digest(self, path: str, size: int, mtime_ns: int, digest: str) -> None:
        """Remember a file's digest."""


@dataclass(frozen=True)
class DraftIdentity:
    """Whether the served draft is the checkpoint under diagnosis, by the content of its weights."""

    status: str  # "same" | "differs" | "unknown"
    checkpoint_digest: str | None
    served_digest: str | None
    served_path: str | None
    reason: str  # how it was decided, or why it could not be

    def to_dict(self) -> dict:
        """JSON form."""
        return {
            "status": self.status,
            "checkpoint_digest": self.checkpoint_digest,
            "served_digest": self.served_digest,
            "served_path": self.served_path,
            "reason": self.reason,
        }


def is_local_url(url: str) -> bool:
    """Whether an endpoint URL names this machine (so the paths it reports are paths here)."""
    return is_this_machine(urlsplit(url).hostname or "")


def weight_files(path: str | Path) -> list[Path]:
    """The weight files of a checkpoint folder (or the one file given), sorted by name."""
    p = Path(path)
    if p.is_file():
        p = p.parent if p.name == "config.json" else p
    if p.is_file():
        return [p]
    return sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES))


def file_digest(path: Path, cache: DigestCache | None = None) -> str:
    """SHA-256 of one file, streamed; cached by path, size and mtime."""
    stat = path.stat()
    key = str(path.resolve())
    if cache is not None:
        hit = cache.get_digest(key, stat.st_size, stat.st_mtime_ns)
        if hit is not None:
            return hit
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    digest = h.hexdigest()
    if cache is not None:
        cache.put_digest(key, stat.st_size, stat.st_mtime_ns, digest)
    return digest


def weights_digest(path: str | Path, cache: DigestCache | None = None) -> str:
    """One digest over a checkpoint's weight files: each file's name and content digest."""
    files = weight_files(path)
    if not files:
        raise FileNotFoundError(f"{path}: no weight files")
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}\0{file_digest(f, cache)}\n".encode())
    return h.hexdigest()


def checkpoint_digest(path: str | Path, cache: DigestCache | None = None) -> str:
    """One digest over a checkpoint's config.json and weight files: the same draft wherever it
    lies (a path of yours, an upload). The same weights under another config (a fixed
    `eagle_aux_hidden_state_layer_ids`) are another checkpoint."""
    p = Path(path)
    folder = p if p.is_dir() else p.parent
    h = hashlib.sha256()
    config = folder / "config.json"
    if config.is_file():
        h.update(f"config.json\0{file_digest(config)}\n".encode())
    h.update(weights_digest(folder, cache).encode())
    return h.hexdigest()


def compare_drafts(
    checkpoint: str | Path,
    served: str | None,
    served_is_local: bool,
    cache: DigestCache | None = None,
) -> DraftIdentity:
    """Is the draft the server names (`served`, its --speculative-draft-model-path) the
    checkpoint under diagnosis? Decided by content when both are readable here. A NeMo AutoModel
    step is its export, served as serve_vllm.py's copy (its tensors renamed, so other bytes)."""
    exports = nemo_exports(checkpoint)
    try:
        mine = weights_digest(exports[0] if exports else checkpoint, cache)
        copies = {weights_digest(p, cache): p for p in exports[1:]}
    except OSError as e:
        return DraftIdentity("unknown", None, None, served, f"the checkpoint is unreadable: {e}")
    if not served:
        return DraftIdentity("unknown", mine, None, None, "the server does not name its draft")
    if not served_is_local or not os.path.isabs(served):
        reason = f"the server's draft {served} is not a path on this machine"
        return DraftIdentity("unknown", mine, None, served, reason)
    try:
        theirs = weights_digest(served, cache)
    except OSError as e:
        reason = f"the server's draft {served} is not readable here ({type(e).__name__})"
        return DraftIdentity("unknown", mine, None, served, reason)
    if theirs == mine:
        return DraftIdentity("same", mine, theirs, served, "the weight files are byte-identical")
    if theirs in copies:
        reason = (
            f"the weight files are those of serve_vllm.py's copy of the export, {copies[theirs]}"
        )
        return DraftIdentity("same", mine, theirs, served, reason)
    return DraftIdentity(
        "differs", mine, theirs, served, "the weight files differ in content (SHA-256)"
    )
