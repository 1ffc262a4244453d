"""A stand-in for a real SGLang 0.5.23 server on 127.0.0.1: it replays the responses recorded from
one (shared/fixtures/sglang-0.5.23/; the tests that need them skip without them), for the client's
and the probe's tests."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.httpserver import App, Reply, Request

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "sglang-0.5.23"

# The same refusal in 0.5.20+ tokenizer_manager.py (_validate_one_request), when the server has no
# --return-hidden-states-mode: "hidden states" without "the", and the new flags named.
HIDDEN_STATES_MESSAGE_0_5_20 = (
    "The server is not configured to return hidden states. "
    "Please set `--return-hidden-states-mode last`, `--return-hidden-states-mode full`, "
    "or the legacy `--enable-return-hidden-states` flag."
)

# 0.5.20+ tokenizer_manager.py when the server runs --return-hidden-states-mode last and a request
# asks for every token's state (return_hidden_states: true).
HIDDEN_STATES_ABOVE_LAST = (
    "The requested return_hidden_states mode exceeds the server maximum `last`. "
    "Please launch with `--return-hidden-states-mode full` to allow return_hidden_states=True."
)


def load_fixture(name: str) -> dict:
    path = FIXTURES / name
    if not path.is_file():
        pytest.skip(f"recorded SGLang 0.5.23 responses not found at {FIXTURES} (shared/ missing)")
    return json.loads(path.read_text())


# Not recorded: 0.5.23's /model_info shape per 0.5.23 python/sglang/srt/entrypoints/http_server.py.
MODEL_INFO = {
    "model_path": "models/tiny-llama",
    "tokenizer_path": "models/tiny-llama",
    "is_generation": True,
    "preferred_sampling_params": None,
    "weight_version": "default",
    "served_model_name": "models/tiny-llama",
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
}


def replay_app(server_info: dict, meta_extra: dict | None = None) -> App:
    """Answers like the recorded 0.5.23 server; `meta_extra` is merged into generate meta_info."""
    gen8 = load_fixture("generate_8_tokens.json")
    gen32 = load_fixture("generate_32_tokens_greedy.json")

    def app(req: Request) -> Reply:
        if req.method == "GET" and req.path in ("/server_info", "/get_server_info"):
            return Reply(body=server_info)
        if req.method == "GET" and req.path in ("/model_info", "/get_model_info"):
            return Reply(body=MODEL_INFO)
        if req.path == "/health":
            return Reply(body=b"")
        if req.path == "/flush_cache":
            return Reply(body="Cache flushed.\nPlease check backend logs for more details.\n")
        if req.method == "POST" and req.path == "/generate":
            payload = req.json()
            mode = server_info.get("return_hidden_states_mode")
            if payload.get("return_hidden_states") and mode == "last":
                return Reply(400, {"error": {"message": HIDDEN_STATES_ABOVE_LAST}})
            if payload.get("return_hidden_states") and not (
                server_info.get("enable_return_hidden_states") or mode == "full"
            ):
                return Reply(400, {"error": {"message": HIDDEN_STATES_MESSAGE_0_5_20}})
            n = payload["sampling_params"]["max_new_tokens"]
            body = copy.deepcopy(gen8 if n == 8 else gen32)
            body["meta_info"].update(meta_extra or {})
            return Reply(body=body)
        return Reply(404, {"detail": "Not Found"})

    return app


def spec_server_info(info: dict) -> dict:
    """The recorded server info with EAGLE-3 speculation (3 steps, topk 1, 4 draft tokens) on."""
    info = copy.deepcopy(info)
    info.update(
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path="drafts/tiny-eagle3",
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
        speculative_draft_model_quantization="unquant",
        _speculative_draft_quantization_explicitly_set=True,
    )
    info["internal_states"][0]["avg_spec_accept_length"] = 2.75
    return info
