"""Captures: target hidden states at named taps for token sequences, on disk and from dumps.

`format` holds the Capture and its directory format; `dumps` reads training dumps (SpecForge,
speculators) as captures; `hf` captures from a local Hugging Face target. What a server really
feeds its draft is captured by its engine's room (`engines/sglang/capture.py`,
`engines/vllm/capture.py`), which imports this package and never the other way round.
"""

from __future__ import annotations

from eagle3dash.capture.dumps import read_capture, read_specforge_dump, read_speculators_dump
from eagle3dash.capture.format import (
    FORMAT,
    MANIFEST,
    Capture,
    CaptureError,
    Sequence,
    load_capture,
    save_capture,
)
from eagle3dash.capture.hf import (
    EMBED_NAMES,
    capture_with_transformers,
    num_target_layers,
    read_target_embedding,
)

__all__ = [
    "EMBED_NAMES",
    "FORMAT",
    "MANIFEST",
    "Capture",
    "CaptureError",
    "Sequence",
    "capture_with_transformers",
    "load_capture",
    "num_target_layers",
    "read_capture",
    "read_specforge_dump",
    "read_speculators_dump",
    "read_target_embedding",
    "save_capture",
]
