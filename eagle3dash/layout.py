"""Taps, layouts, the id conventions of each framework, and layout diffs.

A Tap is a point of the target's residual stream: Tap(d) is the state after d decoder blocks
(Tap(0) the embedding output, Tap(N) the last block's raw output); post_norm marks the final-normed
state (Hugging Face's last `hidden_states` entry). Framework ids are turned into taps at the edge.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Tap:
    """A point of the target's residual stream: after `depth` decoder blocks."""

    depth: int
    post_norm: bool = False

    def __str__(self) -> str:
        return f"Tap({self.depth}{', post_norm' if self.post_norm else ''})"

    def key(self) -> str:
        """Stable string key, used for tensor names in captures: 'tap3', 'tap61n'."""
        return f"tap{self.depth}{'n' if self.post_norm else ''}"

    def to_dict(self) -> dict:
        """JSON form: {"depth": d, "post_norm": b}."""
        return {"depth": self.depth, "post_norm": self.post_norm}


Layout = tuple[Tap, ...]  # the taps feeding the fc slots, in slot order


def parse_layout(text: str) -> Layout:
    """Parse '0,3,31' (or 'emb,3,31n'; a trailing 'n' marks post_norm) into a Layout."""
    taps = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if part.lower() in ("emb", "embed", "embedding"):
            taps.append(Tap(0))
            continue
        post_norm = part.endswith("n")
        digits = part[:-1] if post_norm else part
        if not digits.isdigit():
            raise ValueError(f"not a tap: {part!r} (use depths like '0,3,31'; '61n' = post-norm)")
        taps.append(Tap(int(digits), post_norm))
    if not taps:
        raise ValueError(f"empty layout: {text!r}")
    return tuple(taps)


def format_layout(layout: Layout) -> str:
    """Inverse of parse_layout: '0,3,31'."""
    return ",".join(f"{t.depth}{'n' if t.post_norm else ''}" for t in layout)
