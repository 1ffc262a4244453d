"""The same prompts in each prompt format, as the token ids a server would see.

- raw: what SGLang's /generate does with `text`: the tokenizer's default encoding, special
  tokens (a BOS) included (`TokenizerManager._tokenize_texts` calls `tokenizer(texts)` or
  `tokenizer.encode(t)` with no add_special_tokens argument; python/sglang/srt/managers/
  tokenizer_manager.py, sgl-project/sglang 001067ff). A messages prompt is its
  `servebench.render_messages` text, the text servebench sends; an ids prompt is sent as given.
- chat-template: what /v1/chat/completions does: the template rendered with
  add_generation_prompt=True (and the request's chat_template_kwargs, here enable_thinking), then
  encoded with add_special_tokens=False, as the template brings its own special tokens
  (`OpenAIServingChat._apply_jinja_template`, python/sglang/srt/entrypoints/openai/
  serving_chat.py, sgl-project/sglang 002897c2). A text prompt is one user message; an ids
  prompt goes between the ids of the template's text before and after its content.
- thinking on / off: only for a template with an `enable_thinking` switch (Qwen3's style).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jinja2 import TemplateError

from eagle3dash.servebench import Prompt

__all__ = ["FORMATS", "FormattedPrompts", "format_prompts", "has_thinking_switch"]

RAW = "raw"  # what servebench sends: the benchmark's own format
FORMATS = (RAW, "chat-template", "chat-template, thinking on", "chat-template, thinking off")
# The content an ids prompt's template is rendered around: text no template rewrites.
_SENTINEL = "Eagle3dashPromptIds"
_THINKING = {"chat-template, thinking on": True, "chat-template, thinking off": False}


class _TemplateError(Exception):
    """The template cannot make a row; the message is the not_profiled reason."""


@dataclass(frozen=True)
class FormattedPrompts:
    """The prompts in one format: each as the given prompt with the ids of that format."""

    format: str  # one of FORMATS
    prompts: tuple[Prompt, ...]

    @property
    def ids(self) -> list[list[int]]:
        """Each prompt's token ids."""
        return [list(p.input_ids or ()) for p in self.prompts]


def _template_source(tokenizer: Any) -> str | None:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: apply_chat_template uses "default"
        template = template.get("default")
    return template if isinstance(template, str) and template.strip() else None


def has_thinking_switch(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template reads an `enable_thinking` variable."""
    return "enable_thinking" in (_template_source(tokenizer) or "")


def _encode(tokenizer: Any, text: str, special: bool) -> list[int]:
    return list(tokenizer(text, add_special_tokens=special)["input_ids"])


def _raw(prompt: Prompt, tokenizer: Any) -> tuple[int, ...]:
    if prompt.input_ids is not None:
        return prompt.input_ids
    return tuple(_encode(tokenizer, prompt.text, special=True))


def _render(tokenizer: Any, messages: list[dict[str, str]], thinking: bool | None) -> str:
    extra = {} if thinking is None else {"enable_thinking": thinking}
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **extra
    )


def _templated(prompt: Prompt, tokenizer: Any, thinking: bool | None) -> tuple[int, ...]:
    if prompt.input_ids is not None:
        rendered = _render(tokenizer, [{"role": "user", "content": _SENTINEL}], thinking)
        if rendered.count(_SENTINEL) != 1:
            raise _TemplateError("the chat template does not keep a message's content as given")
        before, after = rendered.split(_SENTINEL)
        return (
            *_encode(tokenizer, before, special=False),
            *prompt.input_ids,
            *_encode(tokenizer, after, special=False),
        )
    pairs = prompt.messages or (("user", prompt.text),)
    messages = [{"role": role, "content": content} for role, content in pairs]
    return tuple(_encode(tokenizer, _render(tokenizer, messages, thinking), special=False))


def format_prompts(
    prompts: Sequence[Prompt], tokenizer: Any
) -> tuple[list[FormattedPrompts], str | None]:
    """The prompts in every format that applies to this tokenizer (raw always), and why the
    chat-template rows are missing (None when they are there)."""
    rows = [FormattedPrompts(RAW, tuple(p.with_ids(_raw(p, tokenizer)) for p in prompts))]
    if _template_source(tokenizer) is None:
        return rows, "the tokenizer has no chat template"
    variants: dict[str, bool | None] = {"chat-template": None}
    if has_thinking_switch(tokenizer):
        variants.update(_THINKING)
    try:
        for name, thinking in variants.items():
            formatted = tuple(p.with_ids(_templated(p, tokenizer, thinking)) for p in prompts)
            rows.append(FormattedPrompts(name, formatted))
    except _TemplateError as exc:
        return rows[:1], str(exc)
    except (TemplateError, TypeError, ValueError) as exc:  # raise_exception, a Jinja error
        return rows[:1], f"the chat template does not render these prompts ({exc})"
    return rows, None
