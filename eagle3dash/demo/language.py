"""The demo's "segment-repeat" language: induction-heavy token sequences from numpy seeds.

A sequence is BOS (token 0) followed by blocks until it is `length` tokens long. A block is a
fresh segment S of m ~ U{6..16} tokens, each uniform over 1..255, followed by r ~ U{2..4} verbatim
repeats of S. About 69% of positions are copies, predictable only by in-context induction; the
rest are fresh random tokens that nothing can predict. So a good model tops out near 75% top-1.

Everything is generated from a numpy `Generator` (PCG64) seeded with an int: the same seed gives
the same sequences on every machine. Streams used by the demo build (`STREAMS`): the target's
training data, the drafts' training data (the same for both drafts), monitor batches, the final
evaluation set and the demo prompts.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "BOS",
    "LENGTH",
    "STREAMS",
    "VOCAB",
    "Stream",
    "PROMPT_COUNT",
    "PROMPT_LENGTH",
    "copy_mask",
    "demo_prompts",
    "gen_batch",
    "gen_sequence",
    "sequences",
]

VOCAB = 256  # token 0 is BOS, 1..255 are the alphabet
BOS = 0
LENGTH = 128  # tokens per sequence
SEGMENT = (6, 16)  # segment length m, inclusive
REPEATS = (2, 4)  # verbatim repeats r after the fresh segment, inclusive

# numpy seeds of every data stream of the demo (recorded in build.json)
STREAMS = {
    "target_train": 0,
    "draft_train": 1,
    "target_monitor": 12345,
    "draft_monitor": 777,
    "eval": 2024,
    "prompts": 4096,
}


def gen_sequence(rng: np.random.Generator, length: int = LENGTH) -> tuple[np.ndarray, np.ndarray]:
    """(tokens [length] int64, copy [length] bool) from `rng`: BOS, then blocks until `length`.

    copy[i] is true where token i repeats the token one segment length earlier in its block.
    """
    tokens = [BOS]
    copy = [False]
    while len(tokens) < length:
        m = int(rng.integers(SEGMENT[0], SEGMENT[1] + 1))
        r = int(rng.integers(REPEATS[0], REPEATS[1] + 1))
        segment = rng.integers(1, VOCAB, size=m).tolist()
        tokens.extend(segment)
        copy.extend([False] * m)
        for _ in range(r):
            tokens.extend(segment)
            copy.extend([True] * m)
    return np.asarray(tokens[:length], dtype=np.int64), np.asarray(copy[:length], dtype=bool)


def gen_batch(
    rng: np.random.Generator, batch: int, length: int = LENGTH
) -> tuple[np.ndarray, np.ndarray]:
    """`batch` sequences from `rng`, one after another: (tokens [B, L] int64, copy [B, L] bool)."""
    pairs = [gen_sequence(rng, length) for _ in range(batch)]
    return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


class Stream:
    """An endless, deterministic supply of batches from one seed."""

    def __init__(self, seed: int, batch: int, length: int = LENGTH):
        self.seed, self.batch, self.length = seed, batch, length
        self.rng = np.random.default_rng(seed)

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        return gen_batch(self.rng, self.batch, self.length)


def sequences(seed: int, count: int, length: int = LENGTH) -> list[list[int]]:
    """`count` sequences of the stream `seed` as lists of token ids."""
    tokens, _ = gen_batch(np.random.default_rng(seed), count, length)
    return [[int(t) for t in row] for row in tokens]


def copy_mask(seed: int, count: int, length: int = LENGTH) -> np.ndarray:
    """The copy-position mask [count, length] of `sequences(seed, count, length)`."""
    return gen_batch(np.random.default_rng(seed), count, length)[1]


PROMPT_COUNT = 16  # held-out sequences of the "prompts" stream
PROMPT_LENGTH = 48  # their first 48 tokens: BOS + segments


def demo_prompts() -> list[list[int]]:
    """The demo's prompts: PROMPT_COUNT held-out sequences' first PROMPT_LENGTH tokens."""
    return [s[:PROMPT_LENGTH] for s in sequences(STREAMS["prompts"], PROMPT_COUNT, LENGTH)]
