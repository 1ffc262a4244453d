"""Captures: target hidden states at named taps for token sequences, on disk and from dumps.

On disk a capture is a directory:

    capture.json             {"format": "eagle3dash-capture/1",
                              "taps": [{"depth", "post_norm"}...], "hidden_size": Ht,
                              "num_sequences": n, "dtype": "bfloat16", "source": "...",
                              "meta": {...}, "shards": ["shard_00000.safetensors", ...]}
    shard_00000.safetensors  s{i}.input_ids [L] int64, s{i}.{tap.key()} [L, Ht],
                             optional s{i}.target_ids [L], s{i}.loss_mask [L]
    embed_tokens.safetensors optional: embed_tokens.weight [V, Ht], the target's embedding

Training dumps are read as captures: SpecForge offline features (`data_*.ckpt[.gz]`) and speculators
hidden states (`hs_*.safetensors`). Neither stores the layer ids, so the caller names the layout the
dump was made with.
"""

from __future__ import annotations

import gzip
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

from .errors import InputError
from .layout import Layout, Tap, format_layout

__all__ = [
    "FORMAT",
    "Capture",
    "CaptureError",
    "Sequence",
    "load_capture",
    "read_capture",
    "read_specforge_dump",
    "read_speculators_dump",
    "save_capture",
]

FORMAT = "eagle3dash-capture/1"
MANIFEST = "capture.json"
EMBED_FILE = "embed_tokens.safetensors"
EMBED_KEY = "embed_tokens.weight"
_KEY = re.compile(r"^s(\d+)\.(.+)$")


class CaptureError(InputError):
    """A capture or training dump that cannot be read; the message names the path and problem."""


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
                f"capture {self.source or '(in memory)'} lacks taps "
                f"{', '.join(map(str, missing))} for sequence {index}; it has "
                f"{', '.join(map(str, sorted(seq.states)))}"
            )
        return torch.cat([seq.states[t] for t in layout], dim=-1)


# --------------------------------------------------------------------------------------------
# The eagle3dash format
# --------------------------------------------------------------------------------------------


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _sequence_tensors(i: int, seq: Sequence) -> dict[str, Tensor]:
    out = {f"s{i}.input_ids": seq.input_ids.reshape(-1).to(torch.int64)}
    for tap, x in seq.states.items():
        out[f"s{i}.{tap.key()}"] = x
    if seq.target_ids is not None:
        out[f"s{i}.target_ids"] = seq.target_ids.reshape(-1).to(torch.int64)
    if seq.loss_mask is not None:
        out[f"s{i}.loss_mask"] = seq.loss_mask.reshape(-1)
    # safetensors refuses views sharing storage: give each tensor its own
    return {k: v.detach().cpu().contiguous().clone() for k, v in out.items()}


def save_capture(capture: Capture, path: str | Path, shard_bytes: int = 512 << 20) -> Path:
    """Write `capture` to directory `path` (created); a sequence never spans two shards."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    for old in path.glob("shard_*.safetensors"):
        old.unlink()
    shards: list[str] = []
    pending: dict[str, Tensor] = {}
    size = 0

    def flush() -> None:
        nonlocal pending, size
        if pending:
            name = f"shard_{len(shards):05d}.safetensors"
            save_file(pending, str(path / name), metadata={"format": FORMAT})
            shards.append(name)
        pending, size = {}, 0

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
        pending.update(tensors)
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
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CaptureError(f"{mpath}: cannot be read as JSON: {e}") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise CaptureError(f"{mpath}: format is {got!r}, expected {FORMAT!r}")
    for key in ("taps", "hidden_size", "num_sequences", "shards"):
        if key not in manifest:
            raise CaptureError(f"{mpath}: missing field {key!r}")
    return manifest


def load_capture(path: str | Path, taps: Layout | None = None, load_embed: bool = True) -> Capture:
    """Read a capture directory, loading only the states of `taps` (all taps if None)."""
    path = Path(path)
    manifest = _read_manifest(path)
    try:
        have = tuple(
            Tap(int(t["depth"]), bool(t.get("post_norm", False))) for t in manifest["taps"]
        )
    except (TypeError, KeyError, ValueError) as e:
        raise CaptureError(f"{path / MANIFEST}: bad taps field: {e}") from e
    wanted = have if taps is None else tuple(dict.fromkeys(taps))
    missing = [t for t in wanted if t not in have]
    if missing:
        raise CaptureError(
            f"{path}: capture has no taps {', '.join(map(str, missing))}; "
            f"it has {', '.join(map(str, have))}"
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


# --------------------------------------------------------------------------------------------
# Training dumps
# --------------------------------------------------------------------------------------------


def _numbered(files: list[Path], stem: str) -> list[Path]:
    """Sort dump files by the integer in `{stem}_{n}`, then by path."""

    def key(p: Path) -> tuple[int, str]:
        m = re.match(rf"{stem}_(\d+)", p.name)
        return (int(m.group(1)) if m else -1, str(p))

    return sorted(files, key=key)


def _torch_load(path: Path) -> object:
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = io.BytesIO(f.read())
            return torch.load(data, map_location="cpu", weights_only=True)
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise CaptureError(
            f"{path}: cannot be read with torch.load(weights_only=True) (only plain tensors and "
            f"containers are accepted; arbitrary pickles are never executed): {e}"
        ) from e


def _squeeze_batch(x: Tensor, ndim: int, what: str, path: Path) -> Tensor:
    while x.dim() > ndim and x.shape[0] == 1:
        x = x[0]
    if x.dim() != ndim:
        raise CaptureError(f"{path}: {what} has shape {tuple(x.shape)}, expected {ndim} dims")
    return x


def _split_slots(x: Tensor, layout: Layout, path: Path) -> tuple[int, dict[Tap, Tensor]]:
    """[L, A*Ht] -> Ht and {tap: [L, Ht]} in layout order."""
    A = len(layout)
    if x.shape[-1] % A:
        raise CaptureError(
            f"{path}: aux_hidden_state width {x.shape[-1]} is not a multiple of the "
            f"{A} taps of layout {format_layout(layout)}"
        )
    ht = x.shape[-1] // A
    return ht, {tap: x[:, i * ht : (i + 1) * ht].clone() for i, tap in enumerate(layout)}


def read_specforge_dump(
    path: str | Path, layout: Layout, num_target_layers: int | None = None
) -> Capture:
    """SpecForge offline features (`**/data_*.ckpt`, `.ckpt.gz`) as a capture.

    Each file holds input_ids [L], loss_mask [L], aux_hidden_state [1, L, A*Ht] (split into
    `layout`'s taps, the layout the dump was made with) and hidden_state [1, L, Ht], the target's
    final post-norm state, kept as Tap(N, post_norm=True) when num_target_layers (N) is given.
    Files are loaded with torch.load(weights_only=True) only.
    """
    root = Path(path)
    layout = tuple(layout)
    files = _numbered(
        [p for pat in ("data_*.ckpt", "data_*.ckpt.gz") for p in root.rglob(pat) if p.is_file()],
        "data",
    )
    if not files:
        raise CaptureError(f"{root}: no SpecForge data_*.ckpt or data_*.ckpt.gz files")
    final = Tap(num_target_layers, post_norm=True) if num_target_layers is not None else None
    sequences, hidden_size = [], None
    for f in files:
        obj = _torch_load(f)
        if not isinstance(obj, dict):
            raise CaptureError(f"{f}: expected a dict of tensors, got {type(obj).__name__}")
        absent = [k for k in ("input_ids", "aux_hidden_state") if k not in obj]
        if absent:
            raise CaptureError(f"{f}: missing keys {absent}; has {sorted(obj)}")
        bad = [k for k, v in obj.items() if not isinstance(v, Tensor)]
        if bad:
            raise CaptureError(f"{f}: keys {bad} are not tensors")
        ids = _squeeze_batch(obj["input_ids"], 1, "input_ids", f).to(torch.int64)
        aux = _squeeze_batch(obj["aux_hidden_state"], 2, "aux_hidden_state", f)
        if aux.shape[0] != ids.shape[0]:
            raise CaptureError(
                f"{f}: aux_hidden_state has {aux.shape[0]} rows, input_ids {ids.shape[0]}"
            )
        ht, states = _split_slots(aux, layout, f)
        if hidden_size is not None and ht != hidden_size:
            raise CaptureError(f"{f}: hidden size {ht} differs from earlier files ({hidden_size})")
        hidden_size = ht
        if final is not None and "hidden_state" in obj and final not in states:
            hs = _squeeze_batch(obj["hidden_state"], 2, "hidden_state", f)
            if tuple(hs.shape) != (ids.shape[0], ht):
                raise CaptureError(f"{f}: hidden_state has shape {tuple(hs.shape)}")
            states[final] = hs
        mask = obj.get("loss_mask")
        if mask is not None:
            mask = _squeeze_batch(mask, 1, "loss_mask", f)
        sequences.append(Sequence(input_ids=ids, states=states, loss_mask=mask))
    taps = layout
    if final is not None and all(final in s.states for s in sequences) and final not in layout:
        taps = layout + (final,)
    meta = {
        "reader": "specforge",
        "files": len(files),
        "layout_assumed": format_layout(layout),
        "num_target_layers": num_target_layers,
    }
    vocab = list(root.rglob("vocab_mapping/*.pt"))
    if vocab:
        meta["vocab_mapping"] = [str(p) for p in vocab]
    assert hidden_size is not None
    return Capture(
        taps=taps,
        sequences=sequences,
        hidden_size=hidden_size,
        source=f"specforge-dump:{root}",
        meta=meta,
    )


def read_speculators_dump(path: str | Path, layout: Layout, num_target_layers: int) -> Capture:
    """speculators hidden states (`**/hs_*.safetensors`) as a capture.

    Each file holds hidden_states [L, A+1, Ht] (slots in capture order; the last slot is the
    target's final pre-norm state, kept as Tap(N)) and token_ids [L]. A dump made without the
    last layer ([L, A, Ht]) is accepted too. The loss mask lives in the Arrow dataset and is not
    read here.
    """
    root = Path(path)
    layout = tuple(layout)
    files = _numbered([p for p in root.rglob("hs_*.safetensors") if p.is_file()], "hs")
    if not files:
        raise CaptureError(f"{root}: no speculators hs_*.safetensors files")
    final = Tap(num_target_layers)
    A = len(layout)
    sequences, hidden_size, with_final = [], None, True
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as h:
                keys = set(h.keys())
                absent = [k for k in ("hidden_states", "token_ids") if k not in keys]
                if absent:
                    raise CaptureError(f"{f}: missing tensors {absent}; has {sorted(keys)}")
                hs = h.get_tensor("hidden_states")
                ids = h.get_tensor("token_ids")
        except CaptureError:
            raise
        except Exception as e:
            raise CaptureError(f"{f}: cannot be read as safetensors: {e}") from e
        ids = _squeeze_batch(ids, 1, "token_ids", f).to(torch.int64)
        hs = _squeeze_batch(hs, 3, "hidden_states", f)
        if hs.shape[0] != ids.shape[0]:
            raise CaptureError(
                f"{f}: hidden_states has {hs.shape[0]} rows, token_ids {ids.shape[0]}"
            )
        slots = hs.shape[1]
        if slots not in (A, A + 1):
            raise CaptureError(
                f"{f}: hidden_states has {slots} slots; layout {format_layout(layout)} has {A} "
                f"taps (expected {A} + 1 with the final layer)"
            )
        with_final = with_final and slots == A + 1
        if hidden_size is not None and hs.shape[2] != hidden_size:
            raise CaptureError(f"{f}: hidden size {hs.shape[2]} differs from earlier files")
        hidden_size = int(hs.shape[2])
        states = {tap: hs[:, i].clone() for i, tap in enumerate(layout)}
        if slots == A + 1 and final not in states:
            states[final] = hs[:, A].clone()
        sequences.append(Sequence(input_ids=ids, states=states))
    taps = layout + ((final,) if with_final and final not in layout else ())
    assert hidden_size is not None
    return Capture(
        taps=taps,
        sequences=sequences,
        hidden_size=hidden_size,
        source=f"speculators-dump:{root}",
        meta={
            "reader": "speculators",
            "files": len(files),
            "layout_assumed": format_layout(layout),
            "num_target_layers": num_target_layers,
        },
    )


def read_capture(
    path: str | Path, layout: Layout | None = None, num_target_layers: int | None = None
) -> Capture:
    """Read whatever `path` holds: an eagle3dash capture, a SpecForge or a speculators dump."""
    root = Path(path)
    if root.is_file() and root.name == MANIFEST:
        root = root.parent
    if not root.exists():
        raise CaptureError(f"{root}: no such file or directory")
    if (root / MANIFEST).is_file():
        return load_capture(root, taps=layout)
    if not root.is_dir():
        raise CaptureError(f"{root}: not a capture directory")
    specforge = next(root.rglob("data_*.ckpt"), None) or next(root.rglob("data_*.ckpt.gz"), None)
    speculators = next(root.rglob("hs_*.safetensors"), None)
    if specforge is not None:
        if layout is None:
            raise CaptureError(
                f"{root}: a SpecForge dump does not store its layer ids; pass the layout it was "
                "made with"
            )
        return read_specforge_dump(root, layout, num_target_layers)
    if speculators is not None:
        if layout is None or num_target_layers is None:
            raise CaptureError(
                f"{root}: a speculators dump does not store its layer ids; pass the layout it was "
                "made with and the target's number of layers"
            )
        return read_speculators_dump(root, layout, num_target_layers)
    raise CaptureError(
        f"{root}: neither an eagle3dash capture ({MANIFEST}) nor a SpecForge (data_*.ckpt) or "
        "speculators (hs_*.safetensors) dump"
    )
