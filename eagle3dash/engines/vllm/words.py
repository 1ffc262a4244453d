"""How vLLM is told things: the `--speculative-config` JSON and flags to copy for each change a
finding asks of a vLLM server (read in the released wheels: `config/speculative.py`
`SpeculativeConfig`, `engine/arg_utils.py`).

vLLM takes every speculative setting in one JSON object, so a change of the draft steps is the
whole `--speculative-config` again with `num_speculative_tokens` changed. Every function returns
a complete fragment of a launch command (no prose), so a fix block can be pasted as it is. The
SGLang room's `words.py` answers the same questions (engines.rules.words).
"""

from __future__ import annotations

import json
import shlex

ENGINE = "vLLM"
STEPS_KNOB = "num_speculative_tokens"
DRAFT_PLACEHOLDER = "<draft>"
DRAFT_PATH_SETTING = 'the "model" of --speculative-config'
FAKE_ACCEPT_ENV: str | None = None  # vLLM has no setting that fakes its acceptance
# A prefill/decode split: a KV connector with kv_role kv_producer / kv_consumer
# (config/kv_transfer.py).
DISAGGREGATION_SETTING = "--kv-transfer-config"


def speculative_config(config: dict) -> str:
    """`--speculative-config '<json>'`, quoted for a POSIX shell."""
    return f"--speculative-config {shlex.quote(json.dumps(config))}"


def steps_flags(num_steps: int, draft: str | None = None) -> str:
    """EAGLE-3 with `num_steps` draft tokens a round (vLLM drafts a chain)."""
    return speculation_flags(draft or DRAFT_PLACEHOLDER, num_steps)


def speculation_flags(draft: str, num_steps: int = 3) -> str:
    """Speculative decoding with this EAGLE-3 draft at `num_steps` draft tokens a round."""
    return speculative_config(
        {"method": "eagle3", "model": draft, "num_speculative_tokens": num_steps}
    )


def draft_flags(draft: str, num_steps: int | None = None) -> str:
    """The speculative config that makes the server load this draft (at its current steps)."""
    return speculation_flags(draft, num_steps or 3)


def capture_flags() -> str:
    """A capture server's speculative config: vLLM returns no hidden states from generate, so a
    second server of the same target writes the states it would feed an EAGLE-3 draft
    (`v1/spec_decode/extract_hidden_states.py`, the `ExampleHiddenStatesConnector`)."""
    return speculative_config({"method": "extract_hidden_states", "num_speculative_tokens": 1})


def capture_action(device: str | None = None) -> str:
    """What makes the served states capturable, as a step to take; on a CPU server none does."""
    if device == "cpu":
        return (
            "none on a CPU build: vLLM's capture connector pins host memory, which needs an "
            "accelerator (example_hidden_states_connector.py): capture on a GPU server of "
            "the same target"
        )
    return (
        f"start a capture server of the same target with {capture_flags()} and its "
        "kv-transfer connector, and give its URL (--capture-server)"
    )


def launch_command(model: str, flags: str) -> str:
    """The whole command that serves `model` with these flags (vLLM's CLI)."""
    return f"vllm serve {shlex.quote(model)} {flags}".strip()


def batch_cost_flags(concurrency: int | None) -> str | None:
    """None: no vLLM flag trades batch size against the draft's cost the way SGLang's
    CUDA-graph batch bound does (vLLM captures graphs for its batch sizes itself)."""
    return None


def unquantized_draft_flags() -> str | None:
    """None: an external vLLM draft is loaded as its own checkpoint says, not with the target's
    online quantization (vllm PR #40849, open: only MTP drafts inherit it)."""
    return None


def kv_cache_flags() -> str:
    """The KV cache in the model's dtype (config/cache.py cache_dtype, default auto)."""
    return "--kv-cache-dtype auto"


def draft_window_flags(window: int) -> str | None:
    """None: vLLM gives each draft layer the window its config's layer_types says
    (models/llama.py LlamaAttention, models/qwen3_eagle3.py; 0.32.0-0.34.0)."""
    return None
