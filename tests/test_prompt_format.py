"""Prompt formats on tiny real tokenizers: a word-level one with a BOS and chat templates written
here, and the demo target's byte-level tokenizer with a prefix-only template."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from eagle3dash.prompt_format import FORMATS, format_prompts, has_thinking_switch
from eagle3dash.servebench import Prompt, parse_prompt_lines

SPECIAL = ["<bos>", "<unk>", "<|user|>", "<|system|>", "<|assistant|>", "<think>", "</think>"]
WORDS = ["hello", "world", "system", ":", "be", "brief", ".", "user", "hi", "!", "assistant"]
# ids: <bos> 0, <unk> 1, <|user|> 2, <|system|> 3, <|assistant|> 4, <think> 5, </think> 6,
# hello 7, world 8, system 9, ":" 10, be 11, brief 12, "." 13, user 14, hi 15, "!" 16,
# assistant 17

PLAIN = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# Thinking on opens a think block, off gives an empty one, unset gives neither: the three differ.
THINKING = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if enable_thinking is defined %}"
    "{% if enable_thinking %}<think>{% else %}<think></think>{% endif %}{% endif %}{% endif %}"
)
DEMO_TARGET = Path(__file__).parent.parent / "eagle3dash" / "demo" / "fixtures" / "target"


def word_tokenizer(chat_template: str | None) -> PreTrainedTokenizerFast:
    """A word-level tokenizer that adds <bos> by default, like a Llama tokenizer."""
    vocab = {token: i for i, token in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", 0)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        unk_token="<unk>",
        additional_special_tokens=SPECIAL[2:],
    )
    fast.chat_template = chat_template
    return fast


def three_prompts() -> list[Prompt]:
    """A text prompt, a messages prompt and an ids prompt (ids of "world hello")."""
    lines = [
        {"prompt": "Hello world", "category": "chat"},
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi!"},
            ]
        },
        {"input_ids": [8, 7]},
    ]
    return parse_prompt_lines([json.dumps(line) for line in lines], "test prompts")


def test_raw_and_chat_template_ids() -> None:
    rows, reason = format_prompts(three_prompts(), word_tokenizer(PLAIN))
    assert reason is None
    assert [r.format for r in rows] == ["raw", "chat-template"]
    raw, chat = rows
    # raw: <bos> as /generate adds it; the messages prompt as "system: be brief.\nuser: hi!\n
    # assistant:"; the ids prompt untouched.
    assert raw.ids == [[0, 7, 8], [0, 9, 10, 11, 12, 13, 14, 10, 15, 16, 17, 10], [8, 7]]
    # chat-template: no <bos> (the template brings its own specials); the ids spliced in.
    assert chat.ids == [[2, 7, 8, 4], [3, 11, 12, 13, 2, 15, 16, 4], [2, 8, 7, 4]]
    # Each row keeps the prompt it came from: its category, its messages.
    assert chat.prompts[0].category == "chat" and chat.prompts[0].text == "Hello world"
    assert chat.prompts[1].messages == (("system", "Be brief."), ("user", "Hi!"))


def test_thinking_switch_adds_two_rows() -> None:
    tokenizer = word_tokenizer(THINKING)
    assert has_thinking_switch(tokenizer) and not has_thinking_switch(word_tokenizer(PLAIN))
    rows, reason = format_prompts(three_prompts(), tokenizer)
    assert reason is None
    assert [r.format for r in rows] == list(FORMATS)
    by_format = {r.format: r.ids for r in rows}
    assert by_format["chat-template"][0] == [2, 7, 8, 4]
    assert by_format["chat-template, thinking on"] == [
        [2, 7, 8, 4, 5],
        [3, 11, 12, 13, 2, 15, 16, 4, 5],
        [2, 8, 7, 4, 5],
    ]
    assert by_format["chat-template, thinking off"][2] == [2, 8, 7, 4, 5, 6]


def test_no_chat_template_leaves_raw_and_a_reason() -> None:
    rows, reason = format_prompts(three_prompts(), word_tokenizer(None))
    assert [r.format for r in rows] == ["raw"]
    assert reason == "the tokenizer has no chat template"


def test_prefix_only_template_on_the_demo_target() -> None:
    """The demo target is byte-level (id = byte value, no BOS); a template with no text after
    the content splices an ids prompt right after the prefix."""
    tokenizer = AutoTokenizer.from_pretrained(DEMO_TARGET, local_files_only=True)
    tokenizer.chat_template = "P:{% for m in messages %}{{ m.content }}{% endfor %}"
    prompts = [Prompt("hi"), Prompt("", input_ids=(1, 2, 3))]
    rows, reason = format_prompts(prompts, tokenizer)
    assert reason is None
    # "P" = 80, ":" = 58, "h" = 104, "i" = 105
    assert [(r.format, r.ids) for r in rows] == [
        ("raw", [[104, 105], [1, 2, 3]]),
        ("chat-template", [[80, 58, 104, 105], [80, 58, 1, 2, 3]]),
    ]


@pytest.mark.parametrize(
    ("template", "prompts", "reason"),
    [
        (
            "{% for m in messages %}{{ m.content | lower }}{% endfor %}",
            [Prompt("", input_ids=(7,))],
            "the chat template does not keep a message's content as given",
        ),
        (
            "{% for m in messages %}{% if m.role == 'system' %}"
            "{{ raise_exception('no system role') }}{% endif %}{{ m.content }}{% endfor %}",
            [Prompt("hi"), Prompt("x", messages=(("system", "be brief"), ("user", "hi")))],
            "the chat template does not render these prompts (no system role)",
        ),
    ],
)
def test_a_template_that_cannot_make_the_rows(
    template: str, prompts: list[Prompt], reason: str
) -> None:
    rows, why = format_prompts(prompts, word_tokenizer(template))
    assert [r.format for r in rows] == ["raw"] and why == reason
