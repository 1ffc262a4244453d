"""How SGLang is told things: the command-line flags to copy for each change a finding asks of
an SGLang server (read in 0.5.23's server_args.py and arg_groups/speculative_hook.py).

Every function returns a complete fragment of a launch command (no prose), so a fix block can be
pasted as it is. The vLLM room's `words.py` answers the same questions (engines.rules.words).
"""

from __future__ import annotations

import shlex

ENGINE = "SGLang"
# The knob that sets how many tokens a round drafts, as a user of this engine names it.
STEPS_KNOB = "--speculative-num-steps"
# What shows the states the server feeds its draft (tokenizer_manager.py refuses
# return_hidden_states without it).
CAPTURE_FLAG = "--enable-return-hidden-states"
# Where the server names the draft it loads.
DRAFT_PATH_SETTING = "--speculative-draft-model-path"
# What a server's environment can hold that fakes the measured acceptance (0.5.23
# speculative/eagle_worker.py reads it).
FAKE_ACCEPT_ENV: str | None = "SGLANG_SIMULATE_ACC_LEN"
# What splits prefill and decode into instances of their own (0.5.23 arg_groups/fields/disagg.py).
DISAGGREGATION_SETTING = "--disaggregation-mode"


def steps_flags(num_steps: int, draft: str | None = None) -> str:
    """Chain drafting with `num_steps` draft steps (topk 1 caps the draft tokens at steps + 1);
    the draft path is SGLang's own flag, so it is not repeated here."""
    return (
        f"--speculative-num-steps {num_steps} --speculative-eagle-topk 1 "
        f"--speculative-num-draft-tokens {num_steps + 1}"
    )


def speculation_flags(draft: str, num_steps: int = 3) -> str:
    """Speculative decoding with this EAGLE-3 draft at `num_steps` chain steps."""
    return f"--speculative-algorithm EAGLE3 {draft_flags(draft)} {steps_flags(num_steps)}"


def draft_flags(draft: str, num_steps: int | None = None) -> str:
    """The flag that makes the server load this draft."""
    return f"--speculative-draft-model-path {draft}"


def capture_flags() -> str:
    """The flag that lets /generate return the states the server feeds its draft."""
    return CAPTURE_FLAG


def capture_action(device: str | None = None) -> str:
    """What makes the served states capturable, as a step to take."""
    return f"restart the server with {CAPTURE_FLAG}"


def launch_command(model: str, flags: str) -> str:
    """The whole command that serves `model` with these flags (SGLang's launcher)."""
    return f"python -m sglang.launch_server --model-path {shlex.quote(model)} {flags}".strip()


def batch_cost_flags(concurrency: int | None) -> str | None:
    """The flag that keeps a batch of this many requests on CUDA graphs."""
    return f"--cuda-graph-max-bs {max(concurrency or 1, 1)}"


def unquantized_draft_flags() -> str | None:
    """The flag that loads the draft unquantized while the target stays quantized (0.5.8+)."""
    return "--speculative-draft-model-quantization unquant"


def kv_cache_flags() -> str:
    """The KV cache in the model's dtype (--kv-cache-dtype, whose default is auto)."""
    return "--kv-cache-dtype auto"


def draft_window_flags(window: int) -> str | None:
    """The draft's sliding window (0.5.12+ server_args.py): models/llama_eagle3.py takes it from
    this flag alone, never from the draft's layer_types."""
    return f"--speculative-draft-window-size {window}"
