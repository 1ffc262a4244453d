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

Captures are made from a local Hugging Face target (`capture_with_transformers`: any taps, the
target's greedy tokens, its embedding) or from an SGLang endpoint (`capture_from_sglang`: the
concatenated aux states the server really feeds its draft, split into the serving layout's taps).
`read_target_embedding` reads only a target's embedding from its safetensors.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor

from .errors import InputError
from .layout import Layout, Tap, format_layout
from .sglang_rules import DEFAULT_SGLANG_VERSION, HIDDEN_STATES_FIX, capture_layout, parse_version

if TYPE_CHECKING:
    from .sglang import GenerateResult, ServerReport, SGLangClient

__all__ = [
    "FORMAT",
    "Capture",
    "CaptureError",
    "Sequence",
    "capture_aux_layers_from_sglang",
    "capture_from_sglang",
    "capture_with_transformers",
    "load_capture",
    "num_target_layers",
    "read_capture",
    "read_specforge_dump",
    "read_speculators_dump",
    "read_target_embedding",
    "save_capture",
]

FORMAT = "eagle3dash-capture/1"
MANIFEST = "capture.json"
EMBED_FILE = "embed_tokens.safetensors"
EMBED_KEY = "embed_tokens.weight"
_KEY = re.compile(r"^s(\d+)\.(.+)$")


# Tokens generated past a serving capture's budget, so that the last rounds replayed within the
# budget have references for chains of up to REFERENCE_TAIL - 1 draft steps.
REFERENCE_TAIL = 8


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


# --------------------------------------------------------------------------------------------
# Target checkpoints on disk: layer count and embedding without loading the model
# --------------------------------------------------------------------------------------------

EMBED_NAMES = (
    "model.embed_tokens.weight",
    "embed_tokens.weight",
    "model.language_model.embed_tokens.weight",
    "language_model.model.embed_tokens.weight",
)


def _read_config(target_path: str | Path) -> tuple[Path, dict]:
    path = Path(target_path)
    cfg = path if path.is_file() else path / "config.json"
    if not cfg.is_file():
        raise CaptureError(f"{path}: no config.json; not a Hugging Face model directory")
    try:
        config = json.loads(cfg.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CaptureError(f"{cfg}: cannot be read as JSON: {e}") from e
    if not isinstance(config, dict):
        raise CaptureError(f"{cfg}: expected a JSON object, got {type(config).__name__}")
    return cfg, config


def num_target_layers(target_path: str | Path) -> int:
    """The target's decoder block count N from config.json (`num_hidden_layers`, top level or in
    `text_config` for multimodal wrappers). `target_path` is the model directory or its config."""
    cfg, config = _read_config(target_path)
    for where in (config, config.get("text_config"), config.get("language_config")):
        if isinstance(where, dict) and isinstance(where.get("num_hidden_layers"), int):
            return int(where["num_hidden_layers"])
    raise CaptureError(
        f"{cfg}: no integer num_hidden_layers (top level or in text_config); "
        "cannot tell how many decoder blocks the target has"
    )


def read_target_embedding(target_path: str | Path) -> Tensor:
    """The target's input embedding [V, H], read alone from its safetensors with `safe_open`.

    Nothing else is loaded, so a draft without its own embedding can be evaluated against a large
    target on a box that could not hold the target. Sharded checkpoints are resolved through
    `model.safetensors.index.json`'s weight_map; tensor names tried, in order: EMBED_NAMES.
    `target_path` is the model directory or one .safetensors file.
    """
    path = Path(target_path)
    if path.is_file():
        files = [path]
    elif path.is_dir():
        index = path / "model.safetensors.index.json"
        files = []
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text()).get("weight_map") or {}
            except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as e:
                raise CaptureError(f"{index}: cannot read its weight_map: {e}") from e
            for name in EMBED_NAMES:
                if name in weight_map:
                    files = [path / str(weight_map[name])]
                    break
            else:
                raise CaptureError(
                    f"{index}: weight_map has none of {', '.join(EMBED_NAMES)}; cannot find the "
                    "target's embedding"
                )
        else:
            files = sorted(path.glob("*.safetensors"))
    else:
        raise CaptureError(f"{path}: no such file or directory")
    if not files:
        raise CaptureError(f"{path}: no .safetensors files (is this a Hugging Face model dir?)")
    for f in files:
        if not f.is_file():
            raise CaptureError(f"{f}: listed in the index but missing")
        try:
            with safe_open(str(f), framework="pt") as h:
                keys = set(h.keys())
                for name in EMBED_NAMES:
                    if name in keys:
                        return h.get_tensor(name)
        except Exception as e:
            raise CaptureError(f"{f}: cannot be read as safetensors: {e}") from e
    raise CaptureError(
        f"{path}: none of {', '.join(EMBED_NAMES)} in {', '.join(f.name for f in files)}"
    )


# --------------------------------------------------------------------------------------------
# Capture with transformers (a local Hugging Face target)
# --------------------------------------------------------------------------------------------

Progress = Callable[[int, int], None]


def _decoder_layers(model: torch.nn.Module, num_layers: int | None) -> torch.nn.ModuleList:
    """The decoder block list of a causal LM: model.model.layers for the Llama family."""
    candidates = []
    get_decoder = getattr(model, "get_decoder", None)
    if callable(get_decoder):
        with contextlib.suppress(Exception):  # some wrappers raise when they have no decoder
            candidates.append(getattr(get_decoder(), "layers", None))
    for dotted in (
        "model.layers",
        "model.language_model.layers",
        "language_model.model.layers",
        "model.decoder.layers",
        "transformer.h",
        "gpt_neox.layers",
    ):
        obj: object = model
        for part in dotted.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        candidates.append(obj)
    for layers in candidates:
        if (
            isinstance(layers, torch.nn.ModuleList)
            and len(layers) > 0
            and (num_layers is None or len(layers) == num_layers)
        ):
            return layers
    raise CaptureError(
        f"cannot find the decoder layers of {type(model).__name__} (tried get_decoder().layers, "
        "model.layers, model.language_model.layers, transformer.h, ...)"
    )


def _check_taps(taps: Layout, num_layers: int, where: str) -> None:
    for t in taps:
        if not 0 <= t.depth <= num_layers:
            raise CaptureError(
                f"{where}: {t} lies outside the target's taps 0..{num_layers} "
                f"({num_layers} decoder blocks)"
            )
        if t.post_norm and t.depth != num_layers:
            raise CaptureError(
                f"{where}: {t}: only the last block's output (depth {num_layers}) has a "
                "post-norm form"
            )


def _as_id_list(seq: object, i: int) -> list[int]:
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


@torch.inference_mode()
def capture_with_transformers(
    target_path: str | Path,
    token_sequences: list[list[int]] | list[Tensor],
    taps: Layout,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    with_target_ids: bool = True,
    with_embedding: bool = True,
    progress: Progress | None = None,
    batch_tokens: int = 16384,
) -> Capture:
    """Run a local Hugging Face causal LM over `token_sequences` and keep the states at `taps`.

    Tap(d), d < N, is `hidden_states[d]` (Tap(0) the embedding output); Tap(N), the last block's
    raw (pre-norm) output, comes from a forward hook on the last decoder layer, because
    transformers' last `hidden_states` entry is after the final norm: that one is
    Tap(N, post_norm=True). target_ids are the logits' argmax (the target's greedy next token at
    each position). The model is loaded with local_files_only=True: never from the hub.
    Sequences of equal length run together, up to `batch_tokens` tokens per forward.
    """
    from transformers import AutoModelForCausalLM

    path = Path(target_path)
    if not path.exists():
        raise CaptureError(f"{path}: no such target model directory")
    taps = tuple(dict.fromkeys(taps))
    if not taps:
        raise CaptureError("capture_with_transformers: no taps requested")
    seqs = [_as_id_list(s, i) for i, s in enumerate(token_sequences)]
    if not seqs:
        raise CaptureError("capture_with_transformers: no token sequences")
    for i, s in enumerate(seqs):
        if not s:
            raise CaptureError(f"token sequence {i} is empty")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # no "Loading weights" bars in CLI output and job logs
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, local_files_only=True)
    except Exception as e:
        raise CaptureError(
            f"{path}: cannot load the target with transformers "
            f"(AutoModelForCausalLM, local files only): {type(e).__name__}: {e}"
        ) from e
    model = model.to(device).eval()
    config = model.config
    text_config = getattr(config, "text_config", None) or config
    n_cfg = getattr(text_config, "num_hidden_layers", None)
    layers = _decoder_layers(model, n_cfg)
    N = len(layers)
    _check_taps(taps, N, str(path))
    vocab = int(model.get_input_embeddings().weight.shape[0])
    for i, s in enumerate(seqs):
        bad = [t for t in s if not 0 <= t < vocab]
        if bad:
            raise CaptureError(
                f"token sequence {i} has ids {bad[:5]} outside the target's vocabulary "
                f"0..{vocab - 1}"
            )

    grabbed: list[Tensor] = []

    def grab(_module: torch.nn.Module, _args: object, output: object) -> None:
        grabbed.append(output[0] if isinstance(output, tuple | list) else output)

    hook = layers[-1].register_forward_hook(grab) if Tap(N) in taps else None
    results: dict[int, Sequence] = {}
    by_length: dict[int, list[int]] = {}
    for i, s in enumerate(seqs):
        by_length.setdefault(len(s), []).append(i)
    hidden_size = None
    try:
        for length, members in sorted(by_length.items()):
            per_batch = max(1, batch_tokens // length)
            for start in range(0, len(members), per_batch):
                batch = members[start : start + per_batch]
                ids = torch.tensor([seqs[i] for i in batch], dtype=torch.int64, device=device)
                grabbed.clear()
                out = model(input_ids=ids, output_hidden_states=True, use_cache=False)
                hs = out.hidden_states
                if hs is None or len(hs) != N + 1:
                    raise CaptureError(
                        f"{path}: output_hidden_states gave "
                        f"{None if hs is None else len(hs)} entries, expected {N + 1}"
                    )
                hidden_size = int(hs[0].shape[-1])
                for b, i in enumerate(batch):
                    states = {}
                    for t in taps:
                        if t.depth == N and not t.post_norm:
                            if len(grabbed) != 1:
                                raise CaptureError(
                                    f"{path}: the hook on the last decoder layer fired "
                                    f"{len(grabbed)} times in one forward"
                                )
                            x = grabbed[0][b]
                        else:
                            x = hs[t.depth][b]
                        states[t] = x.detach().to("cpu").clone()
                    target = out.logits[b].argmax(-1).to("cpu") if with_target_ids else None
                    results[i] = Sequence(
                        input_ids=torch.tensor(seqs[i], dtype=torch.int64),
                        states=states,
                        target_ids=target,
                    )
                del out, hs
                if progress is not None:
                    progress(len(results), len(seqs))
    finally:
        if hook is not None:
            hook.remove()
    embed = None
    if with_embedding:
        embed = model.get_input_embeddings().weight.detach().to("cpu").clone()
    assert hidden_size is not None
    return Capture(
        taps=taps,
        sequences=[results[i] for i in range(len(seqs))],
        hidden_size=hidden_size,
        source=f"transformers:{path}",
        meta={
            "reader": "transformers",
            "target": str(path),
            "num_hidden_layers": N,
            "architectures": list(getattr(config, "architectures", None) or []),
            "model_type": getattr(config, "model_type", None),
            "dtype": _dtype_name(dtype),
            "device": str(device),
            "taps": format_layout(taps),
            "target_ids": "argmax of the target's logits" if with_target_ids else None,
        },
        embed_weight=embed,
    )


# --------------------------------------------------------------------------------------------
# Capture from an SGLang endpoint (the states serving really feeds the draft)
# --------------------------------------------------------------------------------------------

Warn = Callable[[str], None] | list[str] | None


def _warner(warn: Warn, sink: list[str]) -> Callable[[str], None]:
    """Every warning goes to `sink` (kept in the capture's meta) and to `warn`: a callable, a list
    to append to, or None for `warnings.warn`."""

    def emit(message: str) -> None:
        sink.append(message)
        if warn is None:
            warnings.warn(message, stacklevel=3)
        elif isinstance(warn, list):
            warn.append(message)
        else:
            warn(message)

    return emit


def _check_version(version: str | None, url: str, emit: Callable[[str], None]) -> None:

    old = (
        "SGLang before 0.5.20 truncates or misattributes the per-token hidden states of decode "
        "steps under speculative decoding (issue #26163); the prefill block used here is still "
        "right"
    )
    if version is None:
        emit(f"{url} does not report its version; if it is older than 0.5.20: {old}")
        return
    try:
        parsed = parse_version(version)
    except ValueError as e:
        emit(f"{url}: {e}; {old}")
        return
    if parsed < HIDDEN_STATES_FIX:
        emit(f"{url} runs SGLang {version}: {old}")


def _flush(client: SGLangClient, tries: int = 5, wait: float = 0.5) -> None:
    """POST /flush_cache, retrying while SGLang refuses it because requests are in flight."""
    from .sglang import EndpointError

    for attempt in range(tries):
        try:
            client.flush_cache()
            return
        except EndpointError as e:
            if e.status != 400 or attempt + 1 == tries:
                raise
            time.sleep(wait * 2**attempt)


def _aux_mode(report: ServerReport) -> str | None:
    """'eagle3' or 'aux-only' when the server returns concatenated aux states, else None."""
    spec = report.speculative
    if spec is not None and spec.algorithm.upper() == "EAGLE3":
        return "eagle3"
    if report.enable_return_aux_hidden_states:
        return "aux-only"
    return None


def _prefill_block(result: GenerateResult, n: int, url: str, cached: object) -> Tensor:
    """meta_info.hidden_states[0] as a [n, W] float32 tensor, checked against the token count."""
    hs = result.hidden_states
    if not hs:
        raise CaptureError(
            f"{url}: /generate with return_hidden_states answered without "
            "meta_info.hidden_states; is the server started with --enable-return-hidden-states?"
        )
    try:
        block = torch.tensor(hs[0], dtype=torch.float32)
    except (TypeError, ValueError) as e:
        raise CaptureError(
            f"{url}: meta_info.hidden_states[0] is not a [tokens][width] block of numbers: {e}"
        ) from e
    if block.dim() == 1 and n == 1:
        block = block[None]
    if block.dim() != 2:
        raise CaptureError(
            f"{url}: meta_info.hidden_states[0] has shape {tuple(block.shape)}, expected "
            f"[{n}, width] (one row per input token)"
        )
    if block.shape[0] != n:
        raise CaptureError(
            f"{url}: the prefill block has rows for {block.shape[0]} of {n} input tokens "
            f"(cached_tokens={cached}): the radix cache served part of the prompt although it "
            "was flushed (a busy server?). Rerun when the server is idle, or start it with "
            "--disable-radix-cache"
        )
    return block


def _one_hidden_size_error(url: str, width: int, report: ServerReport) -> CaptureError:
    spec = report.speculative
    running = f"--speculative-algorithm {spec.algorithm}" if spec else "no speculative decoding"
    return CaptureError(
        f"{url}: the returned hidden states are {width} wide, one hidden size: SGLang returns the "
        "concatenated aux states the draft reads only while EAGLE-3 capture is active "
        f"(--speculative-algorithm EAGLE3), and this server runs {running}, so these are the "
        "final-normed states. With --speculative-algorithm EAGLE an EAGLE-3 draft gets "
        "width-H states and skips fc: restart with --speculative-algorithm EAGLE3"
    )


def _split_serving(
    block: Tensor, taps: Layout, report: ServerReport, hidden_size: int | None
) -> tuple[int, dict[Tap, Tensor]]:
    """Split [n, K*Ht] into the K taps, which SGLang concatenates in ascending layer order."""
    width, K = int(block.shape[1]), len(taps)
    if _aux_mode(report) is None or (hidden_size is not None and width == hidden_size and K > 1):
        raise _one_hidden_size_error(report.url, width, report)
    if width % K:
        raise CaptureError(
            f"{report.url}: the aux block is {width} wide, not a multiple of the {K} taps of the "
            f"serving layout {format_layout(taps)}: the server captures another number of layers"
        )
    ht = width // K
    if hidden_size is not None and ht != hidden_size:
        raise CaptureError(
            f"{report.url}: the aux block is {width} wide = {width / hidden_size:g} hidden sizes "
            f"of {hidden_size}, but the serving layout {format_layout(taps)} has {K} taps"
        )
    return ht, {tap: block[:, i * ht : (i + 1) * ht].clone() for i, tap in enumerate(taps)}


def _prompt_ids(prompt: object, i: int) -> list[int]:
    if isinstance(prompt, str):
        raise CaptureError(
            f"prompt {i} is text: the capture needs token ids so the rows line up with tokens "
            "(pipeline.prompt_ids turns text into ids with the target's local tokenizer)"
        )
    ids = _as_id_list(prompt, i)
    if not ids:
        raise CaptureError(f"prompt {i} has no tokens")
    return [int(t) for t in ids]


def capture_from_sglang(
    client: SGLangClient,
    prompts: list[list[int]],
    serving_layout: Layout,
    max_new_tokens: int = 64,
    progress: Progress | None = None,
    warn: Warn = None,
    *,
    hidden_size: int | None = None,
    report: ServerReport | None = None,
) -> Capture:
    """The aux states an SGLang server really feeds its EAGLE-3 draft, for greedy completions.

    Per prompt (token ids, so the rows line up with known tokens):
    (a) a greedy completion of `max_new_tokens` (ignore_eos) -> tokens = prompt + completion;
    (b) /flush_cache (a radix-cache hit would drop or shift rows), then /generate on `tokens`
        with max_new_tokens=1 and return_hidden_states; meta_info.hidden_states[0], the prefill
        block [len(tokens), K*Ht], is split into the K taps of `serving_layout` in ascending
        layer order, the order SGLang concatenates them in (duplicates are captured once).
    `serving_layout` is the layout this server captures (layout.serving_layout); the capture's
    taps are those taps, sorted. `hidden_size` (the target's, if known) tightens the width checks.

    References (the choice that makes the simulated accept length comparable to the measured
    one): over HTTP the target's greedy token is known only inside the completion, so
    target_ids[j] = tokens[j+1] (and target_ids[-1] = the token (b) generates, the target's
    greedy token after the last position) and loss_mask[j] = 1 for j >= len(prompt) + 1.
    The evaluation counts row t when loss_mask[t+2] is on, i.e. rows t >= len(prompt) - 1:
    exactly the positions a serving draft drafts from (the first round after prefill reads the
    last prompt position and the first sampled token), and every reference those rows read is a
    target-greedy completion token. In the prompt region target_ids are the prompt's own next
    tokens, not the target's; they are never counted. meta["measured_accept_length"] is
    sum(completion_tokens) / sum(spec_verify_ct) of the completions in (a), the server's accept
    length on these very sequences.

    Warns (through `warn`: a callable, a list, or None for warnings.warn; all warnings are kept
    in meta["warnings"]) when the server is older than 0.5.20 (issue #26163). Raises
    EndpointError when the server cannot return hidden states (restart hint in the message) and
    CaptureError when the returned states are not aux states (no EAGLE-3 capture active).
    """
    if max_new_tokens < 1:
        raise CaptureError("max_new_tokens must be at least 1: the completion is the reference")
    taps = tuple(sorted(set(serving_layout)))
    if not taps:
        raise CaptureError("capture_from_sglang: empty serving layout")
    if any(t.post_norm for t in taps):
        raise CaptureError(
            f"serving layout {format_layout(taps)} has a post-norm tap: SGLang captures only "
            "pre-norm residual streams"
        )
    if not prompts:
        raise CaptureError("capture_from_sglang: no prompts")
    ids_list = [_prompt_ids(p, i) for i, p in enumerate(prompts)]
    said: list[str] = []
    emit = _warner(warn, said)
    report = report or client.probe()
    url = report.url
    _check_version(report.version, url, emit)
    if not report.enable_return_aux_hidden_states:
        report.require_hidden_states()  # EndpointError with the restart hint

    sequences: list[Sequence] = []
    prompt_lengths, completion_lengths = [], []
    completion_tokens, verify_ct = 0, 0
    ht_seen: int | None = None
    for i, ids in enumerate(ids_list):
        # REFERENCE_TAIL tokens past the budget give the last served rounds their references.
        first = client.generate(
            input_ids=ids, max_new_tokens=max_new_tokens + REFERENCE_TAIL, temperature=0.0
        )
        completion = [int(t) for t in first.output_ids]
        if not completion:
            raise CaptureError(f"{url}: prompt {i}: the server generated no tokens")
        completion_tokens += first.completion_tokens or len(completion)
        verify_ct += first.spec_verify_ct or 0
        tokens = ids + completion
        _flush(client)
        second = client.generate(
            input_ids=tokens, max_new_tokens=1, temperature=0.0, return_hidden_states=True
        )
        cached = second.meta_info.get("cached_tokens")
        block = _prefill_block(second, len(tokens), url, cached)
        if isinstance(cached, int) and cached > 0:
            raise CaptureError(
                f"{url}: prompt {i}: {cached} of {len(tokens)} tokens came from the radix cache "
                "despite the flush (a busy server?), so the prefill rows are unreliable. Rerun "
                "when the server is idle, or start it with --disable-radix-cache"
            )
        ht, states = _split_serving(block, taps, report, hidden_size)
        if ht_seen is not None and ht != ht_seen:
            raise CaptureError(f"{url}: prompt {i}: hidden size {ht} differs from {ht_seen}")
        ht_seen = ht
        P, L = len(ids), len(tokens)
        target_ids = None
        if second.output_ids:
            target_ids = torch.tensor(tokens[1:] + [int(second.output_ids[0])], dtype=torch.int64)
        loss_mask = (torch.arange(L) >= P + 1).to(torch.int64)
        sequences.append(
            Sequence(
                input_ids=torch.tensor(tokens, dtype=torch.int64),
                states=states,
                target_ids=target_ids,
                loss_mask=loss_mask,
            )
        )
        prompt_lengths.append(P)
        completion_lengths.append(len(completion))
        if progress is not None:
            progress(i + 1, len(ids_list))

    spec = report.speculative
    assert ht_seen is not None
    return Capture(
        taps=taps,
        sequences=sequences,
        hidden_size=ht_seen,
        source=f"sglang:{url}",
        meta={
            "reader": "sglang",
            "url": url,
            "version": report.version,
            "model_path": report.model_path,
            "architectures": report.architectures,
            "aux_capture": _aux_mode(report),
            "speculative_algorithm": spec.algorithm if spec else None,
            "draft_model_path": spec.draft_model_path if spec else None,
            "num_steps": spec.num_steps if spec else None,
            "eagle_topk": spec.eagle_topk if spec else None,
            "num_draft_tokens": spec.num_draft_tokens if spec else None,
            "serving_layout": format_layout(taps),
            "max_new_tokens": max_new_tokens,
            "served_tokens": max_new_tokens,  # the budget serving rounds are replayed up to
            "prompt_lengths": prompt_lengths,
            "completion_lengths": completion_lengths,
            "completion_tokens": completion_tokens,
            "spec_verify_ct": verify_ct,
            "measured_accept_length": completion_tokens / verify_ct if verify_ct else None,
            "target_ids": "tokens[j+1] (target-greedy completion) and the greedy token after "
            "the last position; prompt region: the prompt's next tokens, never counted",
            "loss_mask": "1 at positions >= prompt length + 1: evaluation rows t >= prompt "
            "length - 1, the positions serving drafts from",
            "warnings": said,
        },
    )


def capture_aux_layers_from_sglang(
    client: SGLangClient,
    prompts: list[list[int]],
    num_target_layers: int,
    max_new_tokens: int = 64,
    progress: Progress | None = None,
    warn: Warn = None,
    *,
    hidden_size: int | None = None,
    arch: str | None = None,
) -> Capture:
    """`capture_from_sglang` for a 0.5.23 capture-only server (no draft loaded), started with
    `--enable-return-aux-hidden-states --speculative-algorithm EAGLE3
    [--return-aux-hidden-state-layer-ids ...]`.

    The taps come from the server's configured ids (server_info
    return_aux_hidden_state_layer_ids; none = SGLang's defaults) through SGLang's id rule for
    the target's architecture and version (layout.py: Llama family "output of layer i" ->
    Tap(i+1)). ASSUMPTION, unverified against SGLang's source: the capture-only ids go through
    the same set_eagle3_layers_to_capture as a draft's eagle_config ids; a warning says so and
    meta["layout_rule"] records the rule used. target_ids / loss_mask as in capture_from_sglang.
    """

    report = client.probe()
    if not report.enable_return_aux_hidden_states:
        raise CaptureError(
            f"{report.url} is not in aux capture mode (server_info enable_return_aux_hidden_states "
            "is false): start SGLang 0.5.23+ with --enable-return-aux-hidden-states "
            "--speculative-algorithm EAGLE3 --return-aux-hidden-state-layer-ids ..., or use "
            "capture_from_sglang on a server running the draft"
        )
    ids = report.return_aux_hidden_state_layer_ids
    family = arch or (report.architectures[0] if report.architectures else "llama")
    try:
        result = capture_layout(
            num_target_layers,
            tuple(int(i) for i in ids) if ids else None,
            report.version or DEFAULT_SGLANG_VERSION,
            family,
        )
    except ValueError as e:
        raise CaptureError(f"{report.url}: {e}") from e
    if result.error:
        raise CaptureError(f"{report.url}: aux layer ids {ids}: {result.error}")
    said: list[str] = []
    emit = _warner(warn, said)
    emit(
        f"aux capture ids {ids if ids else '(defaults)'} read as taps "
        f"{format_layout(result.layout)} by SGLang's rule for draft ids ({result.rule}); "
        "assumed to hold for --return-aux-hidden-state-layer-ids"
    )
    cap = capture_from_sglang(
        client,
        prompts,
        result.layout,
        max_new_tokens,
        progress,
        warn,
        hidden_size=hidden_size,
        report=report,
    )
    cap.meta["aux_layer_ids"] = list(ids) if ids else None
    cap.meta["layout_rule"] = result.rule
    cap.meta["warnings"] = said + cap.meta["warnings"]
    return cap
