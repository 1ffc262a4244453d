"""Tiny targets: a random LlamaForCausalLM for tests, the byte tokenizer tiny targets ship with."""

from __future__ import annotations

from pathlib import Path

import torch


def make_tiny_target(
    path: str | Path,
    num_layers: int = 3,
    hidden_size: int = 64,
    num_heads: int = 4,
    vocab_size: int = 256,
    seed: int = 0,
) -> Path:
    """A random-init LlamaForCausalLM saved with save_pretrained into `path` (tests)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).eval()
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    if vocab_size >= 256:
        save_byte_tokenizer(out)
    return out


def save_byte_tokenizer(path: str | Path) -> None:
    """Save a byte-level tokenizer (token id = UTF-8 byte value) that AutoTokenizer loads.

    Tiny targets have no trained tokenizer; this one lets every client tokenise text prompts the
    way the double does, through the ordinary `AutoTokenizer.from_pretrained(path)`.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # GPT-2's printable stand-ins for the 256 byte values, which ByteLevel pre-tokenisation emits.
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    stand_in = {b: chr(b) if b in printable else None for b in range(256)}
    extra = 0
    for b in range(256):
        if stand_in[b] is None:
            stand_in[b] = chr(256 + extra)
            extra += 1
    vocab = {char: b for b, char in stand_in.items() if char is not None}  # every byte has one
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer).save_pretrained(str(path))
