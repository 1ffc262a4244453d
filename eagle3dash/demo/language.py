"""The demo's "segment-repeat" language: induction-heavy token sequences from numpy seeds.

A sequence is BOS (token 0) followed by blocks until it is `length` tokens long. A block is a
fresh segment S of m ~ U{6..16} tokens, each uniform over 1..255, followed by r ~ U{2..4} verbatim
repeats of S. About 69% of positions are copies, predictable only by in-context induction; the
rest are fresh random tokens that nothing can predict. So a good model tops out near 75% top-1.

Everything is generated from a numpy `Generator` (PCG64) seeded with an int: the same seed gives
the same sequences on every machine. Streams used by the demo build (`STREAMS`): the target's
training data, the drafts' training data (the same for both drafts), monitor batches, the final
evaluation set, the format draft's data and the demo prompts.

The demo prompts come in two categories of the same language with their own parameters
(`PROMPT_CATEGORIES`), so a per-category profile shows a real spread on a CPU:
"copy-heavy" (segments of 6..10 tokens, 4..8 repeats: the prompt ends inside a repeat and the
target keeps copying, which the drafts predict) and "novel" (fresh segments of 20..28 tokens,
longer than any the target was trained on, at most one repeat: the target's continuation wanders
off the copy pattern and the drafts accept far less). The spread is measured, not assumed:
tests/test_demo.py serves draft B through the SGLang double per category.

`CHAT_TEMPLATE` is the demo target's chat template (in its tokenizer_config.json): a system header
before the user's content and nothing after it, so on an ids prompt it prepends
`CHAT_PREFIX_IDS` (the byte tokenizer's ids of `CHAT_PREFIX`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "BOS",
    "CHAT_PREFIX",
    "CHAT_PREFIX_IDS",
    "CHAT_TEMPLATE",
    "PROMPT_CATEGORIES",
    "PromptCategory",
    "LENGTH",
    "STREAMS",
    "VOCAB",
    "Stream",
    "PROMPT_COUNT",
    "PROMPT_LENGTH",
    "copy_mask",
    "demo_prompt_rows",
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
    "prompts_copy_heavy": 4096,
    "prompts_novel": 4097,
    "draft_c_train": 3,
    "draft_c_monitor": 779,
}


def gen_sequence(
    rng: np.random.Generator,
    length: int = LENGTH,
    segment: tuple[int, int] = SEGMENT,
    repeats: tuple[int, int] = REPEATS,
) -> tuple[np.ndarray, np.ndarray]:
    """(tokens [length] int64, copy [length] bool) from `rng`: BOS, then blocks until `length`.

    copy[i] is true where token i repeats the token one segment length earlier in its block.
    `segment` and `repeats` bound m and r (inclusive); the defaults are the training language.
    """
    tokens = [BOS]
    copy = [False]
    while len(tokens) < length:
        m = int(rng.integers(segment[0], segment[1] + 1))
        r = int(rng.integers(repeats[0], repeats[1] + 1))
        fresh = rng.integers(1, VOCAB, size=m).tolist()
        tokens.extend(fresh)
        copy.extend([False] * m)
        for _ in range(r):
            tokens.extend(fresh)
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


PROMPT_COUNT = 16  # half of each category, interleaved
PROMPT_LENGTH = 48  # each prompt is the first 48 tokens of a sequence: BOS + segments


@dataclass(frozen=True)
class PromptCategory:
    """A category of demo prompts: the language with its own segment and repeat bounds."""

    name: str
    stream: str  # its key in STREAMS (the numpy seed)
    segment: tuple[int, int]
    repeats: tuple[int, int]


PROMPT_CATEGORIES = (
    PromptCategory("copy-heavy", "prompts_copy_heavy", (6, 10), (4, 8)),
    PromptCategory("novel", "prompts_novel", (20, 28), (0, 1)),
)

CHAT_PREFIX = "<|sys|>demo<|user|>"
CHAT_PREFIX_IDS = tuple(CHAT_PREFIX.encode())  # the byte tokenizer: token id = byte
CHAT_TEMPLATE = CHAT_PREFIX + "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def demo_prompt_rows() -> list[tuple[str, list[int]]]:
    """The demo's prompts as (category, input_ids), the categories taking turns.

    Prompt i of a category is the first PROMPT_LENGTH tokens of sequence i of its stream.
    """
    per = PROMPT_COUNT // len(PROMPT_CATEGORIES)
    columns = []
    for cat in PROMPT_CATEGORIES:
        rng = np.random.default_rng(STREAMS[cat.stream])
        seqs = [gen_sequence(rng, LENGTH, cat.segment, cat.repeats)[0] for _ in range(per)]
        columns.append([(cat.name, [int(t) for t in s[:PROMPT_LENGTH]]) for s in seqs])
    return [row for turn in zip(*columns, strict=True) for row in turn]


def demo_prompts() -> list[list[int]]:
    """The demo's prompts' input_ids (`demo_prompt_rows` without the categories)."""
    return [ids for _, ids in demo_prompt_rows()]
