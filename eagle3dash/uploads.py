"""Checkpoint uploads and registrations: stream to disk, validate, content-address, register.

An upload is either the checkpoint's files (`config.json` plus `.safetensors` shards, an index or a
`pytorch_model.bin`) or ONE archive (`.zip`, `.tar`, `.tar.gz`/`.tgz`) of a checkpoint folder. Every
upload is copied in 1 MiB chunks into a staging folder under the home (never read into memory at
once), archive members are checked before anything is written (regular files only; no absolute
paths, `..`, symlinks, hardlinks or devices; caps on the member count and the total size, counted
on the bytes really written), a single top-level folder is flattened, and the checkpoint is read
with `checkpoint.inspect` BEFORE it is registered. A broken upload raises `UploadError` naming the
problem; nothing is registered and the staging folder is removed. A good one moves to
`checkpoints/<sha256>/` (the `store.content_address` of the folder, so the same upload twice is
stored once) and is registered with `uploaded=True` and its inspect report.

No Streamlit here: the app hands over its UploadedFile objects (anything with `.name` and `.read`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any, Protocol

from eagle3dash import store as db
from eagle3dash.checkpoint import _MAX_HEADER as MAX_HEADER_BYTES
from eagle3dash.checkpoint import CONFIG, inspect, inspect_draft
from eagle3dash.errors import InputError
from eagle3dash.identity import checkpoint_digest
from eagle3dash.provenance import is_run_folder
from eagle3dash.servebench import MAX_PROMPT_FILE_BYTES, PromptFileError, parse_prompt_bytes

CHUNK = 1 << 20
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")
FILE_SUFFIXES = (".json", ".safetensors", ".bin")
# For st.file_uploader(type=...): Streamlit matches the last suffix, so ".tar.gz" is "gz".
UPLOAD_TYPES = ("json", "safetensors", "bin", "zip", "tar", "gz", "tgz")
PROMPT_TYPES = ("jsonl", "json", "txt")
MAX_TOTAL_BYTES = 64 << 30  # a Kimi-sized draft is ~5 GB; 64 GiB leaves room for big fp32 ones
MAX_MEMBERS = 10_000
# The largest file one upload takes, Streamlit's server.maxUploadSize (.streamlit/config.toml):
# Streamlit holds an uploaded file in memory until it is stored, and a Kimi-sized EAGLE-3 draft's
# weights are ~5 GB in one file.
MAX_UPLOAD_FILE_MB = 8192
MAX_EXPANSION = 100.0
EXPANSION_FLOOR = 16 << 20
UNDECLARED_MARGIN = 16 << 20  # configs, tokenizers, readmes: what no safetensors header declares
_SKIPPED_PREFIXES = ("__MACOSX/",)  # macOS Finder archive junk
_SKIPPED_NAMES = (".DS_Store",)
_DRIVE = re.compile(r"^[A-Za-z]:")


class UploadError(InputError):
    """An upload that cannot become a checkpoint; the message names the file and the problem."""


class NamedStream(Protocol):
    """What an upload is: Streamlit's UploadedFile, an open file, a BytesIO with a name."""

    name: str

    def read(self, size: int = -1) -> bytes: ...


@dataclass(frozen=True)
class UploadLimits:
    """Caps on one upload: total bytes written and archive members."""

    max_total_bytes: int = MAX_TOTAL_BYTES
    max_members: int = MAX_MEMBERS
    # Trained weights barely compress; an archive that grows past this ratio (and the floor, for
    # tiny test drafts) is a bomb, stopped while extracting.
    max_expansion: float = MAX_EXPANSION
    expansion_floor: int = EXPANSION_FLOOR
    # Every byte written is declared by a .safetensors header (its header and tensors), is in a
    # .bin state dict, or counts against this margin; padding past a header stops the upload.
    undeclared_margin: int = UNDECLARED_MARGIN


@dataclass
class UploadedCheckpoint:
    """A registered upload."""

    checkpoint_id: int
    sha256: str
    path: Path
    name: str
    report: dict
    already_stored: bool = False  # the same content was in checkpoints/ already
    files: list[str] = field(default_factory=list)
    already_registered: bool = False  # a checkpoint with this content was registered before


# --- names -------------------------------------------------------------------------------------


def is_archive(name: str) -> bool:
    """Whether a file name is one of the archive kinds accepted."""
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def archive_stem(name: str) -> str:
    """`ckpt.tar.gz` -> `ckpt`."""
    base = PurePosixPath(name.replace("\\", "/")).name
    for suffix in sorted(ARCHIVE_SUFFIXES, key=len, reverse=True):
        if base.lower().endswith(suffix):
            return base[: -len(suffix)] or base
    return base


def member_path(name: str, archive: str = "archive") -> str | None:
    """A member's safe relative POSIX path; None for entries to skip; UploadError if unsafe."""
    if "\0" in name:
        raise UploadError(f"{archive}: member {name!r} has a NUL in its name")
    if "\\" in name:
        raise UploadError(
            f"{archive}: member {name!r} has a backslash in its name; make the archive with "
            "zip or tar on Linux/macOS (or 7-Zip), which write '/' separators"
        )
    if name.startswith("/") or _DRIVE.match(name):
        raise UploadError(f"{archive}: member {name!r} is an absolute path; refusing the archive")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UploadError(f"{archive}: member {name!r} climbs out with '..'; refusing the archive")
    if not parts:
        return None
    text = "/".join(parts)
    if text.startswith(_SKIPPED_PREFIXES) or parts[-1] in _SKIPPED_NAMES:
        return None
    return text


def _plain_file_name(name: str) -> str:
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    if base in ("", ".", "..") or "\0" in base:
        raise UploadError(f"bad file name {name!r}")
    if not base.lower().endswith(FILE_SUFFIXES):
        raise UploadError(
            f"{base}: not a checkpoint file; upload config.json with the .safetensors files "
            "(or the .safetensors index and its shards, or pytorch_model.bin), or one "
            ".zip/.tar/.tar.gz of the checkpoint folder"
        )
    return base


# --- streaming copies --------------------------------------------------------------------------


class _Budget:
    """Counts bytes and members written for one upload against its limits."""

    def __init__(
        self,
        limits: UploadLimits,
        label: str,
        archive_bytes: int | None = None,
        headers_bound: bool = True,
    ) -> None:
        self.limits = limits
        self.label = label
        self.bytes = 0
        self.members = 0
        self.headers_bound = headers_bound  # False for the archive itself, before extraction
        self.undeclared = 0
        # What an archive of this size may expand to (None: not an archive).
        self.expands_to = (
            None
            if archive_bytes is None
            else max(limits.expansion_floor, int(limits.max_expansion * archive_bytes))
        )

    def add_member(self) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise UploadError(
                f"{self.label}: more than {self.limits.max_members} files and folders; a draft "
                "checkpoint has a handful, so this is not one (pack only the checkpoint folder)"
            )

    def check_size(self, n: int) -> None:
        """Refuse early when `n` more bytes (a member's declared size) would pass a cap."""
        over_expansion = self.expands_to is not None and self.bytes + n > self.expands_to
        if over_expansion or self.bytes + n > self.limits.max_total_bytes:
            self.add_bytes(n)

    def add_bytes(self, n: int) -> None:
        self.bytes += n
        if self.expands_to is not None and self.bytes > self.expands_to:
            raise UploadError(
                f"{self.label}: expands to more than {_size(self.expands_to)}, over "
                f"{self.limits.max_expansion:.0f}x its own size, which trained weights never do "
                "(a zip bomb, or padding): refused and removed; pack only the checkpoint folder"
            )
        if self.bytes > self.limits.max_total_bytes:
            raise UploadError(
                f"{self.label}: larger than the {_size(self.limits.max_total_bytes)} cap on one "
                "upload; give the checkpoint's path on this machine instead"
            )

    def add_undeclared(self, n: int, name: str) -> None:
        """Count bytes (negative: fewer) no .safetensors header declares; refuse past the margin."""
        self.undeclared += n
        if self.headers_bound and self.undeclared > self.limits.undeclared_margin:
            raise UploadError(
                f"{self.label}: {name} takes the files past what their .safetensors headers "
                f"declare by more than {_size(self.limits.undeclared_margin)} (padding, or files "
                "that are not the checkpoint): refused and removed; upload only the config, the "
                "weights and the tokenizer"
            )


def _declared_size(path: Path, written: int) -> int | None:
    """The size a .safetensors file's header declares (its 8 length bytes, the header and the
    tensors' data), 0 if the header is unreadable, None while its header is not all written."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if not 0 < n <= MAX_HEADER_BYTES:
            return 0
        if written < 8 + n:
            return None
        try:
            header = json.loads(f.read(n))
        except (ValueError, RecursionError):
            return 0
    if not isinstance(header, dict):
        return 0
    ends = [
        entry["data_offsets"][1]
        for key, entry in header.items()
        if key != "__metadata__"
        and isinstance(entry, dict)
        and isinstance(entry.get("data_offsets"), list)
        and len(entry["data_offsets"]) == 2
        and isinstance(entry["data_offsets"][1], int)
    ]
    return 8 + n + max(ends, default=0)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _copy(src: IO[bytes] | NamedStream, dest: Path, budget: _Budget) -> str:
    """Copy a stream to a new file in chunks, counting bytes (and those beyond what a
    .safetensors header declares, read from the file as soon as its header is written); the
    file's SHA-256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    suffix = dest.suffix.lower()
    declared: int | None = None if suffix == ".safetensors" else 0
    written = excess = 0
    with open(dest, "xb") as out:
        while chunk := src.read(CHUNK):
            budget.add_bytes(len(chunk))
            h.update(chunk)
            out.write(chunk)
            written += len(chunk)
            if suffix == ".bin":  # a state dict declares nothing up front: the caps bound it
                continue
            if declared is None and written >= 8:
                out.flush()
                declared = _declared_size(dest, written)
            new_excess = max(0, written - (declared or 0))
            budget.add_undeclared(new_excess - excess, dest.name)
            excess = new_excess
    return h.hexdigest()


def _rewind(f: Any) -> None:
    seek = getattr(f, "seek", None)
    if seek is not None:
        with contextlib.suppress(OSError, ValueError):
            seek(0)


# --- archives ----------------------------------------------------------------------------------


def extract_archive(
    archive: Path, dest: Path, limits: UploadLimits = UploadLimits(), label: str | None = None
) -> dict[str, str]:
    """Extract a zip or tar archive's regular files under `dest`; relative name -> SHA-256.

    Every member is checked before it is written; the first bad one raises UploadError (the
    caller removes `dest`).
    """
    label = label or archive.name
    budget = _Budget(limits, label, archive.stat().st_size)
    dest.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        return _extract_zip(archive, dest, budget, label)
    try:
        tf = tarfile.open(archive, "r:*")  # noqa: SIM115 - closed by the with below
    except (tarfile.TarError, OSError, EOFError):
        raise UploadError(
            f"{label}: not a zip or tar archive, or one cut short; upload a .zip, .tar or "
            ".tar.gz of the checkpoint folder"
        ) from None
    with tf:
        try:
            return _extract_tar(tf, dest, budget, label)
        except (tarfile.TarError, EOFError, zlib.error):
            raise UploadError(
                f"{label}: the archive is damaged or cut short; pack the checkpoint folder and "
                "upload it again"
            ) from None


def _extract_zip(archive: Path, dest: Path, budget: _Budget, label: str) -> dict[str, str]:
    hashes: dict[str, str] = {}
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError):
        raise UploadError(
            f"{label}: the zip archive is damaged or cut short; pack the checkpoint folder and "
            "upload it again"
        ) from None
    with zf:
        infos = zf.infolist()
        if len(infos) > budget.limits.max_members:
            budget.members = len(infos) - 1
            budget.add_member()
        budget.check_size(sum(i.file_size for i in infos))
        for info in infos:
            budget.add_member()
            mode = info.external_attr >> 16
            kind = stat.S_IFMT(mode)
            if kind == stat.S_IFLNK:
                raise UploadError(
                    f"{label}: member {info.filename!r} is a symbolic link; archive the files "
                    "themselves (zip without --symlinks)"
                )
            if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
                raise UploadError(f"{label}: member {info.filename!r} is not a regular file")
            if info.flag_bits & 0x1:
                raise UploadError(f"{label}: member {info.filename!r} is encrypted")
            rel = member_path(info.filename, label)
            if rel is None or info.is_dir() or kind == stat.S_IFDIR:
                continue
            target = _member_target(dest, rel, label)
            try:
                with zf.open(info) as src:
                    hashes[rel] = _copy(src, target, budget)
            except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError):
                raise UploadError(
                    f"{label}: {rel} inside the archive is damaged (or packed with a method "
                    "zip cannot read); pack the checkpoint folder again with plain zip or tar"
                ) from None
    return hashes


def _extract_tar(tf: tarfile.TarFile, dest: Path, budget: _Budget, label: str) -> dict[str, str]:
    hashes: dict[str, str] = {}
    for m in tf:
        budget.add_member()
        if m.issym() or m.islnk():
            kind = "a symbolic link" if m.issym() else "a hard link"
            raise UploadError(
                f"{label}: member {m.name!r} is {kind} (to {m.linkname!r}); archive the files "
                "themselves (tar without links, or tar -h)"
            )
        if m.isdir():
            member_path(m.name, label)  # still refuse unsafe names
            continue
        if not m.isreg():
            raise UploadError(
                f"{label}: member {m.name!r} is not a regular file (a device, fifo or other "
                "special entry); refusing the archive"
            )
        rel = member_path(m.name, label)
        if rel is None:
            continue
        budget.check_size(m.size)
        target = _member_target(dest, rel, label)
        src = tf.extractfile(m)
        if src is None:  # pragma: no cover - isreg() members always have data
            raise UploadError(f"{label}: member {rel} has no data")
        with src:
            hashes[rel] = _copy(src, target, budget)
    return hashes


def _member_target(dest: Path, rel: str, label: str) -> Path:
    target = db.safe_join(dest, rel)
    if target.exists() or any(p.is_file() for p in target.parents):
        raise UploadError(f"{label}: member {rel} appears twice (or clashes with a file)")
    return target


# --- staging -----------------------------------------------------------------------------------


def _flatten(root: Path, hashes: dict[str, str]) -> tuple[Path, dict[str, str], str | None]:
    """Descend through single top-level folders; the new root, its hashes and the folder name."""
    folder = None
    while True:
        entries = list(root.iterdir())
        if len(entries) != 1 or not entries[0].is_dir():
            return root, hashes, folder
        folder = entries[0].name
        prefix = folder + "/"
        hashes = {k[len(prefix) :]: v for k, v in hashes.items() if k.startswith(prefix)}
        root = entries[0]


def dir_digest(hashes: Mapping[str, str]) -> str:
    """`store.content_address` of a folder, from its files' relative names and SHA-256s."""
    h = hashlib.sha256()
    for name in sorted(hashes, key=lambda n: PurePosixPath(n).parts):
        h.update(f"{name}\0{hashes[name]}\n".encode())
    return h.hexdigest()


def _staging(store: db.Store) -> Path:
    return Path(tempfile.mkdtemp(prefix=".upload-", dir=store.path("checkpoints")))


def register_upload(
    store: db.Store,
    files: Iterable[NamedStream],
    *,
    name: str | None = None,
    limits: UploadLimits = UploadLimits(),
) -> UploadedCheckpoint:
    """Validate, store (content-addressed) and register an uploaded checkpoint.

    `files` is either one archive or the checkpoint's files (each `.name` a plain file name).
    Raises UploadError (an InputError) with the problem; then nothing is registered or left.
    """
    try:
        return _register_upload(store, list(files), name, limits)
    except OSError as e:  # a full disk, a quota, an I/O error: the home's disk, not the upload
        why = "the disk is full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else e.strerror
        raise UploadError(
            f"the upload could not be written into the home {store.home} ({why or e}): free "
            f"space there (or set {db.HOME_ENV} to a folder on a larger disk) and upload again"
        ) from None


def _register_upload(
    store: db.Store, uploads: list[NamedStream], name: str | None, limits: UploadLimits
) -> UploadedCheckpoint:
    if not uploads:
        raise UploadError("no files uploaded: upload config.json and the .safetensors files")
    names = [str(getattr(u, "name", "") or "") for u in uploads]
    archives = [n for n in names if is_archive(n)]
    if archives and len(uploads) > 1:
        raise UploadError(
            f"{', '.join(names)}: upload either one archive ({archives[0]}) or the checkpoint "
            "files, not both"
        )
    staging = _staging(store)
    try:
        root = staging / "checkpoint"
        folder: str | None = None
        if archives:
            label = PurePosixPath(archives[0].replace("\\", "/")).name
            raw = staging / "archive"
            budget = _Budget(limits, label, headers_bound=False)
            _rewind(uploads[0])
            _copy(uploads[0], raw, budget)
            hashes = extract_archive(raw, root, limits, label)
            raw.unlink()
            root, hashes, folder = _flatten(root, hashes)
            default_name = folder or archive_stem(label)
        else:
            label = " + ".join(names)
            budget = _Budget(limits, label)
            hashes = {}
            for upload, upload_name in zip(uploads, names, strict=True):
                base = _plain_file_name(upload_name)
                if base in hashes:
                    raise UploadError(f"{base} was uploaded twice")
                budget.add_member()
                _rewind(upload)
                hashes[base] = _copy(upload, root / base, budget)
            default_name = None
        if not hashes:
            raise UploadError(f"{label}: no files in the upload")
        if not (root / CONFIG).is_file() and not is_run_folder(root):
            found = ", ".join(sorted(hashes)[:8]) + (" ..." if len(hashes) > 8 else "")
            raise UploadError(
                f"{label}: no config.json at the top of the upload (found: {found}); upload the "
                "trainer's config.json with the weights, or archive the checkpoint folder itself"
            )
        try:
            inspect(root)
        except InputError as e:
            text = str(e).replace(str(root), label)
            raise UploadError(f"{label} is not a usable checkpoint: {text}") from None
        sha = dir_digest(hashes)
        final = store.path("checkpoints", sha)
        already = final.is_dir()
        if not already:
            try:
                os.rename(root, final)
            except OSError:
                if not final.is_dir():
                    raise
                already = True  # the same content arrived meanwhile
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    report = inspect(final)
    checkpoint_dir = Path(report.path)  # a run folder's best (else latest) checkpoint
    registered = _register(
        store,
        checkpoint_dir,
        report.to_json(),
        name,
        default_name or f"upload-{sha[:12]}",
        sha256=sha,
        uploaded=True,
    )
    if registered.path != checkpoint_dir and not already:
        shutil.rmtree(final, ignore_errors=True)  # the same content is registered elsewhere
    return UploadedCheckpoint(
        checkpoint_id=registered.checkpoint_id,
        sha256=sha,
        path=registered.path,
        name=registered.name,
        report=report.to_json(),
        already_stored=already,
        files=sorted(hashes),
        already_registered=registered.known,
    )


@dataclass(frozen=True)
class Registered:
    """The checkpoint a registration ended in: a new one, or one with the same content."""

    checkpoint_id: int
    path: Path
    name: str
    known: bool  # a live checkpoint with the same config and weights was registered before


def _same_content(store: db.Store, digest: str) -> dict | None:
    """The oldest live checkpoint whose files still have this content digest."""
    for row in db.checkpoints_with_digest(store, digest):
        try:
            if checkpoint_digest(row["path"], store) == digest:
                return row
        except OSError:  # moved or deleted since: not this content any more
            continue
    return None


def _register(
    store: db.Store,
    path: Path,
    report: dict,
    name: str | None,
    default_name: str,
    sha256: str | None = None,
    uploaded: bool = False,
) -> Registered:
    """Register a checkpoint folder, or return the live one with the same content (its name
    kept unless `name` is given): the same draft by path and by upload is one checkpoint."""
    digest = checkpoint_digest(path, store)
    known = _same_content(store, digest)
    if known is not None and Path(known["path"]) != path:
        checkpoint_id = db.add_checkpoint(store, known["path"], name=name, content_digest=digest)
        return Registered(checkpoint_id, Path(known["path"]), name or known["name"], True)
    checkpoint_id = db.add_checkpoint(
        store,
        path,
        name=name if known is not None else name or default_name,
        format=report.get("format"),
        report=report,
        sha256=sha256,
        uploaded=uploaded,
        content_digest=digest,
    )
    row = db.get_checkpoint(store, checkpoint_id)
    assert row is not None  # just registered
    return Registered(checkpoint_id, path, row.name, known is not None)


def register_path(
    store: db.Store,
    path: str | os.PathLike[str],
    name: str | None = None,
    draft_config: str | None = None,
) -> tuple[int, dict]:
    """Inspect a checkpoint on this machine and register it (files are left where they are).

    A SpecForge step folder with the draft's `draft_config` registers the draft made from its
    state dict. Returns the checkpoint id and its inspect report; a CheckpointError names what is
    wrong. A checkpoint with the same content (an upload of it, say) is that checkpoint, its name
    kept.
    """
    registered, report = registration(store, path, name, draft_config)
    return registered.checkpoint_id, report


def registration(
    store: db.Store,
    path: str | os.PathLike[str],
    name: str | None = None,
    draft_config: str | None = None,
) -> tuple[Registered, dict]:
    """register_path's checkpoint with whether it was registered before (the same content by
    another path or upload), and its inspect report."""
    text = str(path).strip()
    if not text:
        raise InputError("give the checkpoint's folder (or its config.json) on this machine")
    report = inspect_draft(text, draft_config)
    directory = Path(report.path)
    return _register(store, directory, report.to_json(), name, directory.name), report.to_json()


# --- prompts -----------------------------------------------------------------------------------


def save_prompt_file(store: db.Store, upload: NamedStream) -> tuple[Path, int]:
    """Validate an uploaded JSONL prompt file and keep it as prompts/<sha256>.jsonl.

    Returns the saved path (for DiagnoseOptions.prompts) and the number of prompts.
    """
    label = PurePosixPath(str(getattr(upload, "name", "prompts.jsonl")).replace("\\", "/")).name
    _rewind(upload)
    data = upload.read(MAX_PROMPT_FILE_BYTES + 1)
    prompts = parse_prompt_bytes(data, label)
    sha = hashlib.sha256(data).hexdigest()
    folder = store.path("prompts")
    folder.mkdir(exist_ok=True)
    path = store.path("prompts", f"{sha}.jsonl")
    if not path.is_file():
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise PromptFileError(
                f"{label}: could not be written into the home {store.home} ({e.strerror or e}): "
                "free space there and upload again"
            ) from None
    return path, len(prompts)
