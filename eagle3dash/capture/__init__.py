"""Captures: target hidden states at named taps for token sequences, on disk and from dumps.

`format` holds the Capture and its directory format; `dumps` reads training dumps (SpecForge,
speculators) as captures; `hf` captures from a local Hugging Face target; `from_sglang` captures
the aux states an SGLang endpoint really feeds its draft.
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
from eagle3dash.capture.from_sglang import (
    REFERENCE_TAIL,
    capture_aux_layers_from_sglang,
    capture_from_sglang,
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
    "REFERENCE_TAIL",
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
