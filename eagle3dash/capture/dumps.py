"""Training dumps read as captures, and `read_capture`, which reads whatever a path holds.

SpecForge offline features (`data_*.ckpt[.gz]`) and speculators hidden states
(`hs_*.safetensors`) store no layer ids, so the caller names the layout the dump was made with.
"""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

import torch
from safetensors import safe_open
from torch import Tensor

from eagle3dash.capture.format import MANIFEST, Capture, CaptureError, Sequence, load_capture
from eagle3dash.layout import Layout, Tap, format_layout


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
        if "aux_hidden_state" in absent and "hidden_states" in obj:
            # algorithms/{dflash,domino,dspark}/providers.py (SpecForge 0.2.0): their features
            # are `hidden_states` (DSpark adds `target_last_hidden_states`), not EAGLE-3's
            algorithm = "DSpark" if "target_last_hidden_states" in obj else "DFlash or Domino"
            raise CaptureError(
                f"{f}: features of a {algorithm} draft (keys {sorted(obj)}): eagle3dash "
                "diagnoses EAGLE-3 drafts only, whose dumps hold aux_hidden_state"
            )
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


# hs_connectors 0.9.0 fp8_utils.py SCALES_KEY: the fp8 backend's per-token scales
SCALES = "hidden_states_scales"
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def _dequantized(hs: Tensor, scales: Tensor | None, path: Path) -> Tensor:
    """hidden_states as float32, fp8 ones times their per-token scales.

    hs_connectors 0.9.0 (fp8_hidden_states_connector.py, fp8_utils.py) stores float8_e4m3fn
    hidden_states [L, A+1, Ht] with float32 hidden_states_scales [L, 1, 1] (amax / 448 per
    token) and dequantizes as fp8.to(dtype) * scale.
    """
    fp8 = hs.dtype in _FP8
    if not fp8 and scales is None:
        return hs
    problem = None
    if fp8 and scales is None:
        problem = f"hidden_states are {hs.dtype} but the file has no {SCALES}"
    elif not fp8:
        problem = f"the file has {SCALES} but hidden_states are {hs.dtype}, not float8"
    else:
        assert scales is not None
        rows = scales.reshape(-1) if scales.numel() == hs.shape[0] else None
        if rows is None:
            problem = (
                f"{SCALES} has shape {tuple(scales.shape)}; one scale per token "
                f"({hs.shape[0]}) was expected"
            )
        elif not bool(torch.isfinite(rows.float()).all()) or bool((rows <= 0).any()):
            problem = f"{SCALES} holds non-positive or non-finite scales"
    if problem is not None:
        raise CaptureError(
            f"{path}: {problem}: an inconsistent FP8 dump; write it again with one backend"
        )
    assert scales is not None
    return hs.float() * scales.reshape(-1, 1, 1).float()


def read_speculators_dump(path: str | Path, layout: Layout, num_target_layers: int) -> Capture:
    """speculators hidden states (`**/hs_*.safetensors`) as a capture.

    Each file holds hidden_states [L, A+1, Ht] (slots in capture order; the last slot is the
    target's final pre-norm state, kept as Tap(N)) and token_ids [L]; the fp8 backend's
    float8 hidden_states are dequantized with their hidden_states_scales. A dump made without
    the last layer ([L, A, Ht]) is accepted too. The loss mask lives in the Arrow dataset and is not
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
                scales = h.get_tensor(SCALES) if SCALES in keys else None
        except CaptureError:
            raise
        except Exception as e:
            raise CaptureError(f"{f}: cannot be read as safetensors: {e}") from e
        ids = _squeeze_batch(ids, 1, "token_ids", f).to(torch.int64)
        hs = _dequantized(_squeeze_batch(hs, 3, "hidden_states", f), scales, f)
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
