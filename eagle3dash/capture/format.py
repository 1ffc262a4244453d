"""The eagle3dash capture format: target hidden states at named taps for token sequences.

On disk a capture is a directory:

    capture.json             {"format": "eagle3dash-capture/1",
                              "taps": [{"depth", "post_norm"}...], "hidden_size": Ht,
                              "num_sequences": n, "dtype": "bfloat16", "source": "...",
                              "meta": {...}, "shards": ["shard_00000.safetensors", ...]}
    shard_00000.safetensors  s{i}.input_ids [L] int64, s{i}.{tap.key()} [L, Ht],
                             optional s{i}.target_ids [L], s{i}.loss_mask [L]
    embed_tokens.safetensors optional: embed_tokens.weight [V, Ht], the target's embedding
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

from eagle3dash.errors import InputError
from eagle3dash.home_files import CAPTURE_MANIFEST
from eagle3dash.layout import Layout, Tap, bracketed, describe_layout, layout_from_json

FORMAT = "eagle3dash-capture/1"
MANIFEST = CAPTURE_MANIFEST
EMBED_FILE = "embed_tokens.safetensors"
EMBED_KEY = "embed_tokens.weight"
_KEY = re.compile(r"^s(\d+)\.(.+)$")


class CaptureError(InputError):
    """A capture or training dump that cannot be read; the message names the path and problem."""


def _taps_text(taps: Layout | list[Tap]) -> str:
    """'[1,3] (after block 1, after block 3)' for messages."""
    return f"{bracketed(tuple(taps))} ({describe_layout(tuple(taps))})"


@dataclass(eq=False)
class Sequence:
    """One token sequence and the target's states at each tap."""

    input_ids: Tensor  # [L] int64
    states: dict[Tap, Tensor]  # tap -> [L, Ht]
    target_ids: Tensor | None = None  # [L] the target's greedy next token after each position
    loss_mask: Tensor | None = None  # [L]

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass(eq=False)
class Capture:
    """Target hidden states at named taps for a set of sequences."""

    taps: Layout
    sequences: list[Sequence]
    hidden_size: int
    source: str = ""
    meta: dict = field(default_factory=dict)
    embed_weight: Tensor | None = None  # [V, Ht] target embedding, for drafts without their own

    def aux(self, index: int, layout: Layout) -> Tensor:
        """The fc input of sequence `index` under `layout`: its taps concatenated, [L, A*Ht]."""
        seq = self.sequences[index]
        missing = [t for t in layout if t not in seq.states]
        if missing:
            raise CaptureError(
                f"capture {self.source or '(in memory)'} has no states at "
                f"{_taps_text(missing)} for sequence {index}; it has "
                f"{_taps_text(sorted(seq.states))}"
            )
        return torch.cat([seq.states[t] for t in layout], dim=-1)


# progress(done, total) after each sequence, for both capture backends.
Progress = Callable[[int, int], None]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _as_id_list(seq: object, i: int) -> list[int]:
    """Sequence `i` as a list of token ids, from a list or a [L] / [1, L] tensor."""
    if isinstance(seq, Tensor):
        if seq.dim() == 2 and seq.shape[0] == 1:
            seq = seq[0]
        if seq.dim() != 1:
            raise CaptureError(f"token sequence {i} has shape {tuple(seq.shape)}, expected [L]")
        return [int(x) for x in seq.tolist()]
    if isinstance(seq, list | tuple) and all(
        isinstance(x, int) and not isinstance(x, bool) for x in seq
    ):
        return [int(x) for x in seq]
    raise CaptureError(f"token sequence {i} is not a list of token ids: {type(seq).__name__}")


def _sequence_tensors(i: int, seq: Sequence) -> dict[str, Tensor]:
    out = {f"s{i}.input_ids": seq.input_ids.reshape(-1).to(torch.int64)}
    for tap, x in seq.states.items():
        out[f"s{i}.{tap.key()}"] = x
    if seq.target_ids is not None:
        out[f"s{i}.target_ids"] = seq.target_ids.reshape(-1).to(torch.int64)
    if seq.loss_mask is not None:
        out[f"s{i}.loss_mask"] = seq.loss_mask.reshape(-1)
    return {k: v.detach().cpu().contiguous() for k, v in out.items()}


def _own_memory(tensors: dict[str, Tensor], taken: list[tuple[int, int]]) -> dict[str, Tensor]:
    """`tensors`, each cloned only when its bytes overlap bytes in `taken` (safetensors refuses
    overlapping views; views of one buffer that do not overlap, like the taps of one SGLang
    capture, are saved without a copy). `taken` gains the tensors' byte ranges."""
    out = {}
    for name, x in tensors.items():
        start = x.data_ptr()
        stop = start + x.numel() * x.element_size()
        if any(start < b and a < stop for a, b in taken):
            x = x.clone()
            start = x.data_ptr()
            stop = start + x.numel() * x.element_size()
        taken.append((start, stop))
        out[name] = x
    return out


def save_capture(capture: Capture, path: str | Path, shard_bytes: int = 512 << 20) -> Path:
    """Write `capture` to directory `path` (created); a sequence never spans two shards."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    for old in path.glob("shard_*.safetensors"):
        old.unlink()
    shards: list[str] = []
    pending: dict[str, Tensor] = {}
    taken: list[tuple[int, int]] = []  # the byte ranges of the tensors in `pending`
    size = 0

    def flush() -> None:
        nonlocal pending, size
        if pending:
            name = f"shard_{len(shards):05d}.safetensors"
            save_file(pending, str(path / name), metadata={"format": FORMAT})
            shards.append(name)
        pending, size = {}, 0
        taken.clear()

    dtype = None
    for i, seq in enumerate(capture.sequences):
        extra = set(seq.states) - set(capture.taps)
        if extra:
            raise CaptureError(f"sequence {i} has taps {sorted(extra)} not in capture.taps")
        tensors = _sequence_tensors(i, seq)
        for x in seq.states.values():
            dtype = dtype or x.dtype
        nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
        if pending and size + nbytes > shard_bytes:
            flush()
        pending.update(_own_memory(tensors, taken))
        size += nbytes
    flush()
    if capture.embed_weight is not None:
        save_file(
            {EMBED_KEY: capture.embed_weight.detach().cpu().contiguous()}, str(path / EMBED_FILE)
        )
    elif (path / EMBED_FILE).exists():
        (path / EMBED_FILE).unlink()
    manifest = {
        "format": FORMAT,
        "taps": [t.to_dict() for t in capture.taps],
        "hidden_size": capture.hidden_size,
        "num_sequences": len(capture.sequences),
        "dtype": _dtype_name(dtype) if dtype is not None else None,
        "source": capture.source,
        "meta": capture.meta,
        "shards": shards,
    }
    tmp = path / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(path / MANIFEST)
    return path


def _read_manifest(path: Path) -> dict:
    mpath = path / MANIFEST
    if not path.is_dir():
        raise CaptureError(f"{path}: not a directory")
    if not mpath.is_file():
        raise CaptureError(f"{path}: no {MANIFEST}; not an eagle3dash capture")
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CaptureError(f"{mpath}: cannot be read as JSON: {e}") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise CaptureError(f"{mpath}: format is {got!r}, expected {FORMAT!r}")
    for key in ("taps", "hidden_size", "num_sequences", "shards"):
        if key not in manifest:
            raise CaptureError(f"{mpath}: missing field {key!r}")
    _check_manifest(manifest, mpath)
    return manifest


def _check_manifest(manifest: dict, mpath: Path) -> None:
    """The manifest's fields of the types save_capture writes; shards plain names beside it."""

    def count(key: str, least: int) -> None:
        value = manifest[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise CaptureError(f"{mpath}: {key} is {value!r}, not a whole number >= {least}")

    count("hidden_size", 1)
    count("num_sequences", 0)
    taps, shards = manifest["taps"], manifest["shards"]
    if not isinstance(taps, list) or not all(isinstance(t, dict) for t in taps):
        raise CaptureError(f"{mpath}: taps must be a list of {{depth, post_norm}} objects")
    if not isinstance(shards, list) or not all(
        isinstance(n, str) and n not in ("", ".", "..") and Path(n).name == n for n in shards
    ):
        raise CaptureError(f"{mpath}: shards must be a list of file names beside {MANIFEST}")


def load_capture(path: str | Path, taps: Layout | None = None, load_embed: bool = True) -> Capture:
    """Read a capture directory, loading only the states of `taps` (all taps if None)."""
    path = Path(path)
    manifest = _read_manifest(path)
    try:
        have = layout_from_json(manifest["taps"])
    except (TypeError, KeyError, ValueError) as e:
        raise CaptureError(f"{path / MANIFEST}: bad taps field: {e}") from e
    wanted = have if taps is None else tuple(dict.fromkeys(taps))
    missing = [t for t in wanted if t not in have]
    if missing:
        raise CaptureError(
            f"{path}: the capture has no states at {_taps_text(missing)}; it has {_taps_text(have)}"
        )
    n = int(manifest["num_sequences"])
    by_key = {t.key(): t for t in wanted}
    parts: dict[int, dict[str, Tensor]] = {}
    for name in manifest["shards"]:
        spath = path / name
        if not spath.is_file():
            raise CaptureError(f"{spath}: shard listed in {MANIFEST} is missing")
        try:
            with safe_open(str(spath), framework="pt") as f:
                for key in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                    m = _KEY.match(key)
                    if not m:
                        continue
                    i, what = int(m.group(1)), m.group(2)
                    if what in ("input_ids", "target_ids", "loss_mask") or what in by_key:
                        parts.setdefault(i, {})[what] = f.get_tensor(key)
        except CaptureError:
            raise
        except Exception as e:  # safetensors raises its own error types for corrupt files
            raise CaptureError(f"{spath}: cannot be read as safetensors: {e}") from e
    sequences = []
    for i in range(n):
        got = parts.get(i)
        if got is None or "input_ids" not in got:
            raise CaptureError(f"{path}: sequence {i} (s{i}.input_ids) is in no shard")
        absent = [k for k in by_key if k not in got]
        if absent:
            raise CaptureError(f"{path}: sequence {i} lacks {', '.join(absent)}")
        sequences.append(
            Sequence(
                input_ids=got["input_ids"],
                states={by_key[k]: got[k] for k in by_key},
                target_ids=got.get("target_ids"),
                loss_mask=got.get("loss_mask"),
            )
        )
    embed = None
    if load_embed and (path / EMBED_FILE).is_file():
        try:
            with safe_open(str(path / EMBED_FILE), framework="pt") as f:
                embed = f.get_tensor(EMBED_KEY)
        except Exception as e:
            raise CaptureError(f"{path / EMBED_FILE}: cannot read {EMBED_KEY}: {e}") from e
    return Capture(
        taps=wanted,
        sequences=sequences,
        hidden_size=int(manifest["hidden_size"]),
        source=str(manifest.get("source", "")),
        meta=dict(manifest.get("meta") or {}),
        embed_weight=embed,
    )
