"""Random-weight draft tensors for tests: any DraftSpec, canonical names, a sane forward."""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path

import torch

from eagle3dash.spec import OPTIONAL_TENSORS, DraftSpec, expected_shapes


def random_tensors(
    spec: DraftSpec, seed: int = 0, with_embed: bool = False, with_d2t: bool | None = None
) -> dict[str, torch.Tensor]:
    """A random-weight draft for `spec` whose forward stays numerically sane (tests)."""
    gen = torch.Generator().manual_seed(seed)
    dtype = getattr(torch, spec.dtype)
    out: dict[str, torch.Tensor] = {}
    for name, shape in expected_shapes(spec).items():
        if name in OPTIONAL_TENSORS and not (name == "embed_tokens.weight" and with_embed):
            continue
        if re.search(r"norm(\.\d+)?\.weight$", name):  # RMSNorm gains near 1
            t = 1.0 + 0.02 * torch.randn(shape, generator=gen)
        elif name.endswith(".bias") or name == "embed_tokens.weight":
            t = 0.02 * torch.randn(shape, generator=gen)
        else:  # Linear [out, in]: std 1/sqrt(in) keeps activations O(1) through the layer
            t = torch.randn(shape, generator=gen) / math.sqrt(shape[1])
        out[name] = t.to(dtype)
    if with_d2t is None:
        with_d2t = spec.draft_vocab_size < spec.vocab_size
    if with_d2t:
        v, vd = spec.vocab_size, spec.draft_vocab_size
        target_ids = torch.randperm(v, generator=gen)[:vd].sort().values
        out["d2t"] = target_ids - torch.arange(vd)  # target id = draft id + d2t[draft id]
        t2d = torch.zeros(v, dtype=torch.bool)
        t2d[target_ids] = True
        out["t2d"] = t2d
    return out


_ST_BYTES = {"F32": 4, "BF16": 2, "F16": 2, "I64": 8, "BOOL": 1}


def write_headers_only(path: Path, tensors: dict[str, tuple[list[int], str]]) -> int:
    """A safetensors file of these (shape, dtype code) tensors whose data is a sparse hole: a
    full-size draft (an 8B target's) in a few KB of disk, for headers-only readers. Returns the
    data bytes the header declares."""
    header, offset = {}, 0
    for name, (shape, code) in tensors.items():
        nbytes = math.prod(shape) * _ST_BYTES[code]
        span = [offset, offset + nbytes]
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": span}
        offset += nbytes
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(8 + len(text) + offset)  # no disk blocks behind the data
    return offset
