"""Captures from a local Hugging Face target, and what its checkpoint tells without loading it.

`capture_with_transformers` keeps any taps, the target's greedy tokens and its embedding;
`num_target_layers` and `read_target_embedding` read only config.json and the embedding tensor.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import Tensor

from eagle3dash.capture.format import (
    Capture,
    CaptureError,
    Progress,
    Sequence,
    _as_id_list,
    _dtype_name,
)
from eagle3dash.layout import Layout, Tap, format_layout
from eagle3dash.target import TargetError, num_layers

EMBED_NAMES = (
    "model.embed_tokens.weight",
    "embed_tokens.weight",
    "model.language_model.embed_tokens.weight",
    "language_model.model.embed_tokens.weight",
)


def num_target_layers(target_path: str | Path) -> int:
    """The target's decoder block count N from config.json (target.num_layers); `target_path` is
    the model directory or its config."""
    try:
        return num_layers(target_path)
    except TargetError as e:
        raise CaptureError(str(e)) from None


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
            except (OSError, ValueError, AttributeError, RecursionError) as e:
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
        # Any: transformers' typing of the loaded model's .to and outputs is narrower than its use
        model: Any = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=dtype, local_files_only=True
        )
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
        hidden = output[0] if isinstance(output, tuple | list) else output
        assert isinstance(hidden, Tensor)  # a decoder block returns its hidden states first
        grabbed.append(hidden)

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
