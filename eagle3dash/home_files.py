"""The home folder's files, apart from its database: paths that never leave it, content
addresses, uploads written into checkpoints/<sha256>/ and deleted from there, capture folders.

`store.py` keeps the database and its queries and re-exports these names (`store.safe_join`, ...).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from eagle3dash.errors import InputError

CAPTURE_MANIFEST = "capture.json"  # a saved capture's manifest (capture/format.py writes it)


class UnsafePathError(InputError):
    """A path that would leave the home folder (`..`, an absolute member, a symlink out)."""


def safe_join(home: str | os.PathLike[str], *parts: str | os.PathLike[str]) -> Path:
    """`home/parts...`, refusing `..`, absolute members, and symlinks that lead out of home."""
    root = Path(home).resolve()
    path = root
    for part in parts:
        text = os.fspath(part)
        if not text:
            raise UnsafePathError("empty path member")
        if "\0" in text or "\\" in text:
            raise UnsafePathError(f"path member {text!r} holds a NUL or a backslash")
        if os.path.isabs(text):
            raise UnsafePathError(f"absolute path member {text!r} would leave {root}")
        for name in Path(text).parts:
            if name == "..":
                raise UnsafePathError(f"path member {text!r} climbs out with '..'")
        path = path / text
    resolved = path.resolve()
    if resolved != root and root not in resolved.parents:
        raise UnsafePathError(f"{path} leads out of {root} (to {resolved}, through a symlink)")
    return path


def inside(path: Path, folder: Path) -> bool:
    """Whether `path`, symlinks resolved, lies strictly inside `folder`."""
    resolved, root = path.resolve(), folder.resolve()
    return resolved != root and root in resolved.parents


def content_address(path_or_fileobj: str | os.PathLike[str] | IO[bytes]) -> str:
    """SHA-256 hex of a file, an open binary file (read to its end), or a folder's files."""
    if isinstance(path_or_fileobj, str | os.PathLike):
        path = Path(path_or_fileobj)
        if path.is_dir():
            return _dir_digest(path)
        with open(path, "rb") as f:
            return _stream_digest(f)
    stream = path_or_fileobj
    start = stream.tell() if stream.seekable() else None
    digest = _stream_digest(stream)
    if start is not None:
        stream.seek(start)
    return digest


def _stream_digest(f: IO[bytes]) -> str:
    h = hashlib.sha256()
    while chunk := f.read(1 << 20):
        h.update(chunk)
    return h.hexdigest()


def _dir_digest(folder: Path) -> str:
    """Hash of the sorted (relative name, file hash) list: names and contents, not times."""
    h = hashlib.sha256()
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    for p in files:
        name = p.relative_to(folder).as_posix()
        h.update(f"{name}\0{content_address(p)}\n".encode())
    return h.hexdigest()


def save_upload(
    home: str | os.PathLike[str], files: Mapping[str, bytes | IO[bytes]]
) -> tuple[str, Path]:
    """Write uploaded files (name -> bytes or binary file) to the home's checkpoints/<sha256>/."""
    if not files:
        raise InputError("no files uploaded")
    tmp = Path(tempfile.mkdtemp(prefix=".upload-", dir=safe_join(home, "checkpoints")))
    try:
        for name, data in files.items():
            dest = safe_join(tmp, name)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with open(dest, "wb") as out:
                if isinstance(data, bytes | bytearray | memoryview):
                    out.write(data)
                else:
                    shutil.copyfileobj(data, out, 1 << 20)
        sha = content_address(tmp)
        final = safe_join(home, "checkpoints", sha)
        try:
            os.rename(tmp, final)
        except OSError:
            if not final.is_dir():
                raise
            shutil.rmtree(tmp)  # the same content is already there
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sha, final


def delete_upload(home: str | os.PathLike[str], path: str) -> bool:
    """Delete an uploaded checkpoint (`path`, absolute or relative to the home) if it lies inside
    the home's checkpoints/ and is no symlink; whether anything was deleted."""
    uploads = Path(home) / "checkpoints"
    target = Path(path)
    if not target.is_absolute():
        target = Path(home) / target
    if not inside(target, uploads) or target.is_symlink():
        return False
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()
    else:
        return False
    return True


def saved_capture(home: str | os.PathLike[str], run_id: int) -> Path | None:
    """captures/<run>/ of the home when the run kept its serving capture there (its manifest
    written), else None; nothing is created."""
    path = safe_join(home, "captures", str(int(run_id)))
    return path if (path / CAPTURE_MANIFEST).is_file() else None


def capture_dir(home: str | os.PathLike[str], run_id: int) -> Path:
    """captures/<run>/ of the home (created): where a run's capture shards go."""
    path = safe_join(home, "captures", str(int(run_id)))
    path.mkdir(parents=True, exist_ok=True)
    return path
