"""Tiny draft specs for tests."""

from __future__ import annotations

from eagle3dash.spec import DraftSpec


def tiny_spec(**overrides) -> DraftSpec:
    """A tiny SpecForge-format draft spec (hidden 32, 4 heads, 2 KV heads); override any field."""
    fields = dict(
        format="specforge",
        hidden_size=32,
        target_hidden_size=32,
        intermediate_size=64,
        num_layers=1,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        vocab_size=64,
        draft_vocab_size=64,
    )
    fields.update(overrides)
    return DraftSpec(**fields)
