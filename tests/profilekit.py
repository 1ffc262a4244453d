"""A hand-written acceptance profile (issue 13's contract form) and the words the Run page shows
for it, for the profile's page tests in AppTest and in Chromium."""

from __future__ import annotations

CATEGORY_TITLE = "Per category: accept length, tok/s and speedup"
FLAGS = "--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3"

# Three categories; "novel" accepts least (measured 1.2), the prompt format was profiled raw only.
SAMPLE = {
    "steps": 3,
    "per_position": {
        "positions": [1, 2, 3],
        "simulated_training": [0.8, 0.5, 0.25],
        "simulated_serving": [0.3, 0.1, 0.0],
        "measured": [0.25, 0.05, 0.0],
    },
    "per_category": [
        {
            "category": "copy-heavy",
            "prompts": 4,
            "measured_accept_length": 3.1,
            "sim_accept_training": 3.3,
            "sim_accept_serving": 1.3,
            "tok_s": 120.5,
            "baseline_tok_s": 60.25,
            "speedup": 2.0,
        },
        {
            "category": "novel",
            "prompts": 4,
            "measured_accept_length": 1.2,
            "sim_accept_training": 1.5,
            "sim_accept_serving": 1.1,
            "tok_s": 62.0,
            "baseline_tok_s": 62.0,
            "speedup": 1.0,
        },
        {
            "category": "chat",
            "prompts": 3,
            "measured_accept_length": 2.4,
            "sim_accept_training": 2.6,
            "sim_accept_serving": 1.2,
            "tok_s": 96.0,
            "baseline_tok_s": 60.0,
            "speedup": 1.6,
        },
    ],
    "prompt_format": [
        {
            "format": "raw",
            "prompts": 11,
            "measured_accept_length": 2.25,
            "sim_accept_serving": 1.2,
            "tok_s": 92.5,
        }
    ],
    "temperature": [
        {"temperature": 0.0, "measured_accept_length": 2.25, "tok_s": 92.5},
        {"temperature": 0.7, "measured_accept_length": 1.75, "tok_s": 80.0},
    ],
    "steps_advice": [
        {
            "num_steps": 1,
            "predicted_accept_length": 1.25,
            "predicted_tok_s": 70.0,
            "source": "measured",
        },
        {
            "num_steps": 2,
            "predicted_accept_length": 1.5,
            "predicted_tok_s": 84.0,
            "source": "measured",
        },
        {
            "num_steps": 3,
            "predicted_accept_length": 1.55,
            "predicted_tok_s": 80.0,
            "source": "measured",
        },
        {
            "num_steps": 4,
            "predicted_accept_length": 1.6,
            "predicted_tok_s": 76.0,
            "source": "simulated",
        },
    ],
    "recommended": {
        "num_steps": 2,
        "predicted_accept_length": 1.5,
        "predicted_tok_s": 84.0,
        "current_num_steps": 3,
        "current_tok_s": 80.0,
        "flags": FLAGS,
        "fastest_num_steps": 2,
        "gain": 0.05,
        "gain_low": 0.01,
        "gain_high": 0.09,
        "changes": True,
    },
    "step_costs": {
        "verify_s": 0.011,
        "draft_step_s": 0.0012,
        "request_fixed_s": 0.012,
        "source": "baseline",
    },
    "not_profiled": [
        {
            "part": "prompt_format",
            "reason": "no local tokenizer with a chat template",
            "option": "target",
            "action": "give a local copy of the target",
        }
    ],
}
