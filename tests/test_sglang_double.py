"""The SGLang API double over real HTTP: 0.5.23 shapes, honest speculative decoding, capture rules.

A tiny random Llama target (3 blocks, hidden 64; 4 for the demo-like world) and random EAGLE-3
drafts saved in SpecForge format. Greedy references come from transformers' `generate`; the taps
are literals worked out by hand from SGLang's rules (or the knobs that override them), compared
with transformers' `output_hidden_states`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import httpx
import pytest
import torch
from transformers import LlamaForCausalLM

from eagle3dash import checkpoint
from eagle3dash.engines.sglang.adapter import SGLangEngine
from eagle3dash.engines.sglang.client import SGLangClient
from eagle3dash.engines.sglang.rules import serving_layout
from eagle3dash.layout import Tap
from eagle3dash.servebench import Prompt, run_bench
from eagle3dash.spec import DraftSpec
from eagle3dash.testing import sglang_double_engine as double_engine
from eagle3dash.testing.sglang_double import main, start_double
from eagle3dash.testing.sglang_double_engine import (
    HIDDEN_STATES_ABOVE_LAST,
    HIDDEN_STATES_DISABLED,
    TEMPLATE_PATH,
    TOPK1_WARNING,
    DoubleConfig,
    DoubleEngine,
    DoubleStartError,
)
from eagle3dash.testing.tensors import random_tensors
from eagle3dash.testing.tiny import make_tiny_target

FIXTURE = Path(__file__).resolve().parents[2] / "shared/fixtures/sglang-0.5.23/get_server_info.json"
PROMPTS = [[5, 6, 7, 8], [40, 41, 42, 43, 44, 45, 46], [200, 3]]


def draft_spec(hidden: int = 64, ids: tuple[int, ...] | None = (-1, 0, 1), **kw) -> DraftSpec:
    base = dict(
        format="specforge",
        hidden_size=hidden,
        target_hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_layers=1,
        num_heads=4,
        num_kv_heads=4,
        head_dim=hidden // 4,
        vocab_size=256,
        draft_vocab_size=256,
        max_position_embeddings=2048,
        aux_layer_ids=ids,
        aux_ids_location="eagle_config" if ids is not None else "missing",
        architectures=("LlamaForCausalLMEagle3",),
    )
    base.update(kw)
    return DraftSpec(**base)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("double")
    target = make_tiny_target(root / "target")
    # nested SpecForge ids [-1, 0, 1]: output-of +1 -> capture before layers 0, 1, 2 (0.5.22+)
    spec = draft_spec()
    draft = checkpoint.save(spec, random_tensors(spec, seed=1), root / "draft", "specforge")
    hf = LlamaForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    return {"root": root, "target": target, "draft": draft, "spec": spec, "hf": hf}


def greedy(hf: LlamaForCausalLM, prompt: list[int], n: int) -> list[int]:
    """transformers' own greedy decoding, never stopping at EOS."""
    gc = copy.deepcopy(hf.generation_config)
    gc.eos_token_id = None
    gc.do_sample = False
    gc.max_new_tokens = n
    gc.pad_token_id = 0
    with torch.inference_mode():
        out = hf.generate(torch.tensor([prompt]), generation_config=gc)
    return out[0, len(prompt) :].tolist()


def states(hf: LlamaForCausalLM, ids: list[int]) -> list[torch.Tensor]:
    """HF hidden_states[d] for the sequence: d < N the residual after d blocks, N post-norm."""
    with torch.inference_mode():
        out = hf(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    return [h[0] for h in out.hidden_states]


def generate(url: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/generate", json=body, timeout=60)


def check_spec_accounting(meta: dict, num_steps: int) -> None:
    """completion = first token + sum over rounds of (accepted drafts + 1 bonus)."""
    n, ct = meta["completion_tokens"], meta["spec_verify_ct"]
    assert 1 <= n / ct <= num_steps + 1
    assert meta["spec_accept_length"] == pytest.approx(n / ct)
    assert n == 1 + meta["spec_num_correct_drafts"] + ct
    assert meta["spec_num_proposed_drafts"] == ct * num_steps
    assert meta["spec_accept_rate"] == pytest.approx(
        meta["spec_num_correct_drafts"] / (ct * num_steps)
    )
    hist = meta["spec_correct_drafts_histogram"]
    assert (
        sum(hist) == ct
        and sum(i * c for i, c in enumerate(hist)) == meta["spec_num_correct_drafts"]
    )
    assert hist[-1] > 0 and len(hist) <= num_steps + 1  # grown only to the largest k seen


# -- shapes ------------------------------------------------------------------------------------


def test_template_is_the_real_fixture():
    if FIXTURE.is_file():
        assert json.loads(TEMPLATE_PATH.read_text()) == json.loads(FIXTURE.read_text())


def test_server_info_and_model_info_have_the_real_shape(models):
    real = json.loads(TEMPLATE_PATH.read_text())
    cfg = DoubleConfig(
        models["target"], models["draft"], "EAGLE3", enable_return_hidden_states=True
    )
    with start_double(cfg) as d:
        for path in ("/server_info", "/get_server_info"):
            info = httpx.get(d.url + path).json()
            assert set(real) <= set(info)
            assert set(real["internal_states"][0]) <= set(info["internal_states"][0])
            assert info["eagle3dash_double"] is True
            assert info["version"] == "0.5.23"
            assert info["model_path"] == str(models["target"])
            assert info["tp_size"] == 1 and info["device"] == "cpu"
            assert info["attention_backend"] == "torch_native"
            assert info["speculative_algorithm"] == "EAGLE3"
            assert info["speculative_draft_model_path"] == str(models["draft"])
            assert (info["speculative_num_steps"], info["speculative_eagle_topk"]) == (3, 1)
            assert info["speculative_num_draft_tokens"] == 4
            assert info["enable_return_hidden_states"] is True
            assert info["return_hidden_states_mode"] == "full"  # as 0.5.23 resolves the flag
            assert info["port"] == d.port
            assert info["eagle3dash_double_capture"]["prefill_layout"] == "0,1,2"
            assert "avg_spec_accept_length" not in info["internal_states"][0]
        for path in ("/model_info", "/get_model_info"):
            mi = httpx.get(d.url + path).json()
            assert mi["architectures"] == ["LlamaForCausalLM"] and mi["model_type"] == "llama"
            assert mi["is_generation"] is True and mi["weight_version"] == "default"
            assert mi["model_path"] == mi["served_model_name"] == str(models["target"])
        health = httpx.get(d.url + "/health")
        assert health.status_code == 200 and health.content == b""
        assert httpx.get(d.url + "/health_generate").status_code == 200
        assert httpx.post(d.url + "/flush_cache").text.startswith("Cache flushed.")
        assert httpx.get(d.url + "/flush_cache").status_code == 200


def test_unknown_paths_answer_like_fastapi(models):
    with start_double(DoubleConfig(models["target"])) as d:
        r = httpx.get(d.url + "/no/such/path")
        assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
        r = httpx.post(d.url + "/generate_nope", json={})
        assert r.status_code == 404 and r.json() == {"detail": "Not Found"}
        r = httpx.post(d.url + "/health")
        assert r.status_code == 405 and r.json() == {"detail": "Method Not Allowed"}


# -- decoding ----------------------------------------------------------------------------------


def test_speculative_output_equals_plain_greedy(models):
    hf, n = models["hf"], 24
    cfg = DoubleConfig(models["target"], models["draft"], "EAGLE3")
    with start_double(cfg) as d:
        r = generate(
            d.url,
            input_ids=PROMPTS,
            sampling_params={"temperature": 0, "max_new_tokens": n, "ignore_eos": True},
        )
        assert r.status_code == 200
        for prompt, one in zip(PROMPTS, r.json(), strict=True):
            assert one["output_ids"] == greedy(hf, prompt, n)
            meta = one["meta_info"]
            assert meta["finish_reason"] == {"type": "length", "length": n}
            assert meta["prompt_tokens"] == len(prompt) and meta["cached_tokens"] == 0
            check_spec_accounting(meta, 3)
        # text prompts use the byte-level scheme
        r = generate(
            d.url,
            text="hi!",
            sampling_params={"temperature": 0, "max_new_tokens": 9, "ignore_eos": True},
        ).json()
        assert r["output_ids"] == greedy(hf, list(b"hi!"), 9)
        assert r["text"] == bytes(r["output_ids"]).decode("utf-8", errors="replace")


def test_plain_greedy_without_speculation_and_stop_tokens(models):
    hf, prompt = models["hf"], PROMPTS[1]
    ref = greedy(hf, prompt, 16)
    with start_double(DoubleConfig(models["target"])) as d:
        r = generate(
            d.url,
            input_ids=prompt,
            sampling_params={"temperature": 0, "max_new_tokens": 16, "ignore_eos": True},
        )
        body = r.json()
        assert body["output_ids"] == ref
        assert not any(k.startswith("spec_") for k in body["meta_info"])
        stop = ref[5]
        r = generate(
            d.url,
            input_ids=prompt,
            sampling_params={
                "temperature": 0,
                "max_new_tokens": 16,
                "ignore_eos": True,
                "stop_token_ids": [stop],
            },
        ).json()
        assert r["output_ids"] == ref[: ref.index(stop) + 1]
        assert r["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
        chat = httpx.post(
            d.url + "/v1/chat/completions",
            json={
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
                "temperature": 0,
            },
        ).json()
        assert chat["object"] == "chat.completion" and chat["usage"]["completion_tokens"] == 4


def fed_lengths(engine: DoubleEngine, prompt: list[int], n: int) -> tuple[list[int], list[int]]:
    """(the output, the number of tokens each target forward of one greedy request was fed)."""
    fed: list[int] = []

    def count(_module, args, kwargs) -> None:
        fed.append(int(kwargs["input_ids"].shape[-1]))

    hook = engine.model.register_forward_pre_hook(count, with_kwargs=True)
    try:
        result = engine.generate(prompt, n, set(), want_hidden=False)
    finally:
        hook.remove()
    return result.output_ids, fed


def test_every_path_decodes_on_a_kv_cache(models):
    """A decode forward is fed only its new tokens (one without a draft, seq[-1] and the drafts
    with one), as a server decodes, so the plain path's compute stays inside its floor as the
    speculative path's does; the tokens stay transformers' greedy ones."""
    hf, prompt, n = models["hf"], PROMPTS[1], 12
    plain = DoubleEngine(DoubleConfig(models["target"]))
    output, fed = fed_lengths(plain, prompt, n)
    assert output == greedy(hf, prompt, n)
    assert fed == [len(prompt)] + [1] * (n - 1)  # the prefill gives the first token
    speculative = DoubleEngine(DoubleConfig(models["target"], models["draft"], "EAGLE3"))
    output, fed = fed_lengths(speculative, prompt, n)
    assert output == greedy(hf, prompt, n)
    assert fed[0] == len(prompt) and set(fed[1:]) == {1 + 3}  # seq[-1] and 3 drafts a round


class FakeClock:
    """time.perf_counter and time.sleep on a clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_forward_that_overran_is_made_up_by_the_next(monkeypatch):
    """A request pays the sum of its forwards' floors: 25 ms of compute in a 10 ms forward,
    then two forwards of 2 ms, take 30 ms in all (a per-forward deadline: 25 + 10 + 10)."""
    clock = FakeClock()
    monkeypatch.setattr(double_engine, "time", clock)
    pace = double_engine._Pace(clock.perf_counter())
    for compute in (0.025, 0.002, 0.002):
        with pace.costs(0.010):
            clock.now += compute
    assert clock.now == pytest.approx(0.030)
    assert clock.slept == [pytest.approx(0.001)]


def constant_draft(models, token: int) -> Path:
    """A draft with a zero lm_head: it always proposes draft id 0, which d2t maps to `token`."""
    spec = draft_spec(has_d2t=True, has_t2d=True)
    tensors = random_tensors(spec, seed=2, with_d2t=True)
    tensors["lm_head.weight"] = torch.zeros_like(tensors["lm_head.weight"])
    d2t = torch.zeros(256, dtype=torch.int64)
    d2t[0] = token
    tensors["d2t"] = d2t
    return checkpoint.save(spec, tensors, models["root"] / f"const{token}", "specforge")


def simulated_rounds(output: list[int], token: int, steps: int) -> tuple[int, int, list[int]]:
    """Rounds, accepted drafts and rounds by accepted drafts (SGLang's histogram: grown only to
    the largest count seen) when every round proposes `token` x steps, from the output."""
    pos, rounds, correct = 1, 0, 0  # the first token comes from prefill
    histogram: list[int] = []
    while pos < len(output):
        accepted = 0
        while accepted < steps and pos + accepted < len(output) and output[pos + accepted] == token:
            accepted += 1
        emitted = min(accepted + 1, len(output) - pos)
        pos += emitted
        rounds += 1
        correct += emitted - 1
        histogram += [0] * (emitted - len(histogram))
        histogram[emitted - 1] += 1
    return rounds, correct, histogram


def test_verify_count_is_honest_and_a_good_draft_is_accepted(models):
    hf, prompt, n = models["hf"], PROMPTS[0], 24
    ref = greedy(hf, prompt, n)
    token = max(set(ref), key=ref.count)  # the tiny random target falls into loops
    assert ref.count(token) >= n // 3
    cfg = DoubleConfig(
        models["target"], constant_draft(models, token), "EAGLE3", decode_log_interval=5
    )
    with start_double(cfg) as d:
        meta = generate(
            d.url,
            input_ids=prompt,
            sampling_params={"temperature": 0, "max_new_tokens": n, "ignore_eos": True},
        )
        body = meta.json()
        assert body["output_ids"] == ref
        meta = body["meta_info"]
        check_spec_accounting(meta, 3)
        rounds, correct, histogram = simulated_rounds(ref, token, 3)
        assert (meta["spec_verify_ct"], meta["spec_num_correct_drafts"]) == (rounds, correct)
        assert meta["spec_correct_drafts_histogram"] == histogram
        assert meta["spec_accept_length"] > 1.5
        # totals are added every decode_log_interval (5) verify rounds, as SGLang's log lines do
        avg = httpx.get(d.url + "/server_info").json()["internal_states"][0][
            "avg_spec_accept_length"
        ]
        assert 1.0 <= avg <= 4.0
        # a stop token in the middle of a round truncates it; accounting stays consistent
        r = generate(
            d.url,
            input_ids=prompt,
            sampling_params={
                "temperature": 0,
                "max_new_tokens": n,
                "ignore_eos": True,
                "stop_token_ids": [token],
            },
        ).json()
        assert r["output_ids"] == ref[: ref.index(token) + 1]
        assert r["meta_info"]["finish_reason"] == {"type": "stop", "matched": token}
        check_spec_accounting(r["meta_info"], 3)


def test_topk1_forces_num_draft_tokens(models):
    cfg = DoubleConfig(
        models["target"], models["draft"], "EAGLE3", num_steps=1, num_draft_tokens=16
    )
    with start_double(cfg) as d:
        info = httpx.get(d.url + "/server_info").json()
        assert info["speculative_num_steps"] == 1
        assert info["speculative_num_draft_tokens"] == 2
        assert TOPK1_WARNING in info["eagle3dash_double_warnings"]
        r = generate(
            d.url,
            input_ids=PROMPTS[0],
            sampling_params={"temperature": 0, "max_new_tokens": 12, "ignore_eos": True},
        )
        body = r.json()
        assert body["output_ids"] == greedy(models["hf"], PROMPTS[0], 12)
        check_spec_accounting(body["meta_info"], 1)


# -- hidden states and capture rules ---------------------------------------------------------------


def test_return_hidden_states_refused_when_disabled(models):
    with start_double(DoubleConfig(models["target"], models["draft"], "EAGLE3")) as d:
        r = generate(d.url, input_ids=PROMPTS[0], return_hidden_states=True)
        info = httpx.get(d.url + "/server_info").json()
    assert r.status_code == 400
    assert r.json() == {"error": {"message": HIDDEN_STATES_DISABLED}}
    assert HIDDEN_STATES_DISABLED == (  # tokenizer_manager.py 0.5.23
        "The server is not configured to return hidden states. "
        "Please set `--return-hidden-states-mode last`, `--return-hidden-states-mode full`, "
        "or the legacy `--enable-return-hidden-states` flag."
    )
    assert info["enable_return_hidden_states"] is False
    assert info["return_hidden_states_mode"] is None


def test_mode_last_turns_hidden_states_on_but_refuses_every_token(models):
    cfg = DoubleConfig(
        models["target"], models["draft"], "EAGLE3", return_hidden_states_mode="last"
    )
    with start_double(cfg) as d:
        info = httpx.get(d.url + "/server_info").json()
        refused = generate(d.url, input_ids=PROMPTS[0], return_hidden_states=True)
        plain = generate(
            d.url, input_ids=PROMPTS[0], sampling_params={"temperature": 0, "max_new_tokens": 4}
        )
        report = SGLangClient(d.url).probe()
    assert (info["enable_return_hidden_states"], info["return_hidden_states_mode"]) == (
        True,
        "last",
    )
    assert "--return-hidden-states-mode last" in info["launch_command"]
    assert refused.status_code == 400
    assert refused.json() == {"error": {"message": HIDDEN_STATES_ABOVE_LAST}}
    assert HIDDEN_STATES_ABOVE_LAST == (  # tokenizer_manager.py 0.5.23
        "The requested return_hidden_states mode exceeds the server maximum `last`. "
        "Please launch with `--return-hidden-states-mode full` to allow return_hidden_states=True."
    )
    assert plain.status_code == 200 and len(plain.json()["output_ids"]) == 4
    assert report.hidden_states == "last"


def test_mode_full_alone_returns_hidden_states(models):
    cfg = DoubleConfig(
        models["target"], models["draft"], "EAGLE3", return_hidden_states_mode="full"
    )
    with start_double(cfg) as d:
        r = generate(
            d.url,
            input_ids=PROMPTS[0],
            return_hidden_states=True,
            sampling_params={"temperature": 0, "max_new_tokens": 2},
        )
    assert r.status_code == 200
    assert len(r.json()["meta_info"]["hidden_states"][0]) == len(PROMPTS[0])


def test_a_prompt_longer_than_a_prefill_chunk_returns_its_last_chunk_rows(models):
    cfg = DoubleConfig(
        models["target"],
        models["draft"],
        "EAGLE3",
        enable_return_hidden_states=True,
        chunked_prefill_size=3,
    )
    with start_double(cfg) as d:
        info = httpx.get(d.url + "/server_info").json()
        body = generate(
            d.url,
            input_ids=PROMPTS[1],  # 7 tokens: chunks [0, 3), [3, 6), [6, 7)
            return_hidden_states=True,
            sampling_params={"temperature": 0, "max_new_tokens": 1},
        ).json()
    assert info["chunked_prefill_size"] == 3
    assert len(body["meta_info"]["hidden_states"][0]) == 1


def test_an_unknown_mode_is_refused_at_start(models):
    with pytest.raises(DoubleStartError, match="must be one of: None, 'last', or 'full'"):
        start_double(DoubleConfig(models["target"], return_hidden_states_mode="all"))


def expected_rows(hf, ids: list[int], taps) -> torch.Tensor:
    hs = states(hf, ids)
    return torch.cat([hs[t.depth] for t in taps], dim=-1)


def test_hidden_states_are_the_predicted_taps(models):
    hf, prompt, n = models["hf"], PROMPTS[1], 10
    taps = serving_layout(models["spec"], 3, "0.5.23", "LlamaForCausalLM").layout
    assert taps == (Tap(0), Tap(1), Tap(2))  # ids [-1, 0, 1] +1: the embedding and two blocks
    cfg = DoubleConfig(
        models["target"], models["draft"], "EAGLE3", enable_return_hidden_states=True
    )
    with start_double(cfg) as d:
        body = generate(
            d.url,
            input_ids=prompt,
            return_hidden_states=True,
            sampling_params={"temperature": 0, "max_new_tokens": n, "ignore_eos": True},
        ).json()
    out = body["output_ids"]
    hidden = body["meta_info"]["hidden_states"]
    block = torch.tensor(hidden[0])
    assert block.shape == (len(prompt), 3 * 64)
    torch.testing.assert_close(block, expected_rows(hf, prompt, taps), atol=1e-5, rtol=1e-4)
    # then one row per emitted token after the first: the state at the position that produced it
    rows = torch.tensor(hidden[1:])
    assert rows.shape == (n - 1, 3 * 64)
    full = expected_rows(hf, prompt + out, taps)
    torch.testing.assert_close(rows, full[len(prompt) : len(prompt) + n - 1], atol=1e-5, rtol=1e-4)


def test_default_ids_are_sglangs_defaults_in_layer_order(models):
    """No eagle_config ids on the 3-block target: SGLang captures before layers
    [2, N//2, N-3] = [2, 1, 0], concatenated in layer order: Tap(0), Tap(1), Tap(2)."""
    spec = draft_spec(ids=None)
    path = checkpoint.save(
        spec, random_tensors(spec, seed=3), models["root"] / "noids", "specforge"
    )
    taps = (Tap(0), Tap(1), Tap(2))
    cfg = DoubleConfig(models["target"], path, "EAGLE3", enable_return_hidden_states=True)
    with start_double(cfg) as d:
        body = generate(
            d.url,
            input_ids=PROMPTS[0],
            return_hidden_states=True,
            sampling_params={"temperature": 0, "max_new_tokens": 2, "ignore_eos": True},
        ).json()
    block = torch.tensor(body["meta_info"]["hidden_states"][0])
    assert block.shape == (len(PROMPTS[0]), 3 * 64)
    torch.testing.assert_close(
        block, expected_rows(models["hf"], PROMPTS[0], taps), atol=1e-5, rtol=1e-4
    )


def test_cuda_graph_emulation_uses_default_taps_for_verify(tmp_path):
    """<= 0.5.10 with custom ids: eager prefill captures the config ids, verify the defaults."""
    target = make_tiny_target(tmp_path / "t7", num_layers=7, hidden_size=32, seed=1)
    hf = LlamaForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    spec = draft_spec(hidden=32, ids=(0, 2, 4))
    draft = checkpoint.save(spec, random_tensors(spec, seed=4), tmp_path / "d", "specforge")
    result = serving_layout(spec, 7, "0.5.10", "LlamaForCausalLM", cuda_graph=True)
    assert result.layout == (Tap(1), Tap(3), Tap(5))
    assert result.decode_layout == (Tap(2), Tap(3), Tap(4))
    prompt, n = [9, 8, 7, 6, 5], 8
    cfg = DoubleConfig(
        target, draft, "EAGLE3", sglang_version="0.5.10", enable_return_hidden_states=True
    )
    with start_double(cfg) as d:
        body = generate(
            d.url,
            input_ids=prompt,
            return_hidden_states=True,
            sampling_params={"temperature": 0, "max_new_tokens": n, "ignore_eos": True},
        ).json()
        info = httpx.get(d.url + "/server_info").json()
    assert info["version"] == "0.5.10"
    assert info["eagle3dash_double_capture"]["decode_layout"] == "2,3,4"
    out, hidden = body["output_ids"], body["meta_info"]["hidden_states"]
    assert out == greedy(hf, prompt, n)
    torch.testing.assert_close(
        torch.tensor(hidden[0]), expected_rows(hf, prompt, result.layout), atol=1e-5, rtol=1e-4
    )
    full = expected_rows(hf, prompt + out, result.decode_layout)
    torch.testing.assert_close(
        torch.tensor(hidden[1:]), full[len(prompt) : len(prompt) + n - 1], atol=1e-5, rtol=1e-4
    )
    eager = DoubleConfig(target, draft, "EAGLE3", sglang_version="0.5.10", cuda_graph=False)
    with start_double(eager) as d:
        info = httpx.get(d.url + "/server_info").json()
    assert info["eagle3dash_double_capture"]["decode_layout"] == "1,3,5"
    assert info["disable_cuda_graph"] is True


@pytest.mark.parametrize(
    ("version", "override", "needle"),
    [
        ("0.5.23", [0, 1, 2], "last block's output"),  # +1 -> index 3 = N, never captured
        ("0.5.21", None, "crashes before 0.5.22"),  # ids [-1, 0, 1] -> index 0 before 0.5.22
    ],
)
def test_invalid_capture_refuses_to_start(models, version, override, needle):
    spec = models["spec"]
    if override is not None:
        spec = dataclasses.replace(spec, aux_layer_ids=tuple(override))
    error = serving_layout(spec, 3, version, "LlamaForCausalLM").error
    assert error and needle in error
    cfg = DoubleConfig(
        models["target"],
        models["draft"],
        "EAGLE3",
        sglang_version=version,
        aux_layer_ids_override=override,
    )
    with pytest.raises(DoubleStartError, match="would fail to capture") as exc:
        start_double(cfg)
    assert error in str(exc.value)
    args = ["--target", str(models["target"]), "--draft", str(models["draft"]), "--port", "0"]
    args += ["--sglang-version", version]
    if override is not None:
        args += ["--aux-layer-ids", ",".join(map(str, override))]
    assert main(args) == 2


def test_override_applies_the_fix(models):
    """aux_layer_ids_override pretends nested ids: [1, 0, -1] +1, captured in layer order."""
    cfg = DoubleConfig(
        models["target"], models["draft"], "EAGLE3", aux_layer_ids_override=[1, 0, -1]
    )
    with start_double(cfg) as d:
        info = httpx.get(d.url + "/server_info").json()
    capture = info["eagle3dash_double_capture"]
    assert capture["prefill_layout"] == "0,1,2"  # ascending layer order whatever the list order
    assert any("not ascending" in note for note in capture["notes"])


# -- a world that disagrees with eagle3dash's model of SGLang -----------------------------------


@pytest.fixture(scope="module")
def demo_like(served_models) -> dict:
    """The demo's shape: a 4-block target, hidden 64, and a draft with nested ids [0, 1, 2] (the
    test world's)."""
    models = served_models
    hf = LlamaForCausalLM.from_pretrained(str(models["target"]), dtype=torch.float32).eval()
    return {**models, "hf": hf}


def stock_view(info: dict) -> dict:
    """server_info without the double's own keys and what differs between any two starts."""
    view = {k: v for k, v in copy.deepcopy(info).items() if not k.startswith("eagle3dash_double")}
    view["launch_command"] = view["launch_command"].replace(f"--port {info['port']}", "--port P")
    for where in (view, view["internal_states"][0]):
        where.pop("startup_time")
        where.pop("random_seed")  # drawn at each start, as SGLang draws it
        where["port"] = "P"
    return view


def served(url: str, prompt: list[int], n: int) -> dict:
    return generate(
        url,
        input_ids=prompt,
        return_hidden_states=True,
        sampling_params={"temperature": 0, "max_new_tokens": n, "ignore_eos": True},
    ).json()


def assert_slots(rows: torch.Tensor, hs: list[torch.Tensor], depths: list[int], lo: int) -> None:
    """Slot k of every row is transformers' hidden_states[depths[k]] at positions lo, lo+1, ..."""
    for k, depth in enumerate(depths):
        expected = hs[depth][lo : lo + len(rows)]
        torch.testing.assert_close(rows[:, 64 * k : 64 * (k + 1)], expected, atol=1e-5, rtol=1e-4)


def test_capture_taps_feed_what_the_server_chooses_and_server_info_stays_stock(demo_like):
    hf, prompt, n = demo_like["hf"], PROMPTS[1], 8
    stock = DoubleConfig(
        demo_like["target"], demo_like["draft"], "EAGLE3", enable_return_hidden_states=True
    )
    patched = dataclasses.replace(stock, capture_taps=[0, 1, 2])
    bodies, infos = {}, {}
    for name, cfg in (("stock", stock), ("patched", patched)):
        with start_double(cfg) as d:
            bodies[name] = served(d.url, prompt, n)
            infos[name] = httpx.get(d.url + "/server_info").json()
    for name, depths in (("stock", [1, 2, 3]), ("patched", [0, 1, 2])):
        # stock SGLang 0.5.23 reads ids [0, 1, 2] as outputs of layers 0..2: +1 -> Tap(1..3)
        out, hidden = bodies[name]["output_ids"], bodies[name]["meta_info"]["hidden_states"]
        assert out == greedy(hf, prompt, n)  # the target verifies: output is plain greedy
        block, rows = torch.tensor(hidden[0]), torch.tensor(hidden[1:])
        assert block.shape == (len(prompt), 3 * 64) and rows.shape == (n - 1, 3 * 64)
        assert_slots(block, states(hf, prompt), depths, 0)
        assert_slots(rows, states(hf, prompt + out), depths, len(prompt))
    assert stock_view(infos["patched"]) == stock_view(infos["stock"])
    assert infos["patched"]["eagle3dash_double_capture"]["capture_taps_override"] is True
    assert infos["patched"]["eagle3dash_double_capture"]["prefill_layout"] == "0,1,2"
    assert infos["stock"]["eagle3dash_double_capture"]["capture_taps_override"] is False


def test_reported_draft_path_is_what_server_info_names(models, tmp_path):
    elsewhere = str(tmp_path / "epoch-2")  # never loaded: it does not even exist
    stock = DoubleConfig(models["target"], models["draft"], "EAGLE3")
    restarted = dataclasses.replace(stock, reported_draft_path=elsewhere)
    metas, infos, reports = {}, {}, {}
    for name, cfg in (("stock", stock), ("restarted", restarted)):
        with start_double(cfg) as d, SGLangClient(d.url, timeout=30) as client:
            infos[name] = httpx.get(d.url + "/server_info").json()
            reports[name] = client.probe()
            metas[name] = client.generate(input_ids=PROMPTS[0], max_new_tokens=16)
    info = infos["restarted"]
    assert info["speculative_draft_model_path"] == elsewhere
    assert info["internal_states"][0]["speculative_draft_model_path"] == elsewhere
    assert f"--speculative-draft-model-path {elsewhere} " in info["launch_command"]
    assert reports["restarted"].speculative.draft_model_path == elsewhere
    assert info["eagle3dash_double_draft_path"] == str(models["draft"])
    assert info["eagle3dash_double_delay_s"] == 0.0  # no modelled cost configured
    assert infos["stock"]["speculative_draft_model_path"] == str(models["draft"])
    # the same draft really runs behind the other name: the same tokens in the same rounds
    assert metas["restarted"].output_ids == metas["stock"].output_ids
    assert metas["restarted"].spec_verify_ct == metas["stock"].spec_verify_ct


@pytest.mark.parametrize(
    ("algorithm", "knobs", "needle"),
    [
        (None, {"capture_taps": [0, 1, 2]}, "need a speculative algorithm"),
        (None, {"reported_draft_path": "/elsewhere"}, "need a speculative algorithm"),
        ("EAGLE", {"capture_taps": [0, 1, 2]}, "capture_taps need EAGLE3"),
        ("EAGLE3", {"capture_taps": [0, 1, 4]}, "give depths 0..3"),
        ("EAGLE3", {"capture_taps": [0, 1]}, "fc reads 192"),  # 2 taps are 128 wide
    ],
)
def test_world_knobs_that_cannot_serve_refuse_to_start(models, algorithm, knobs, needle):
    draft = models["draft"] if algorithm else None
    with pytest.raises(DoubleStartError, match=needle):
        start_double(DoubleConfig(models["target"], draft, algorithm, **knobs))


def test_the_command_line_passes_the_knobs_on(models, capsys):
    args = ["--target", str(models["target"]), "--draft", str(models["draft"]), "--port", "0"]
    assert main([*args, "--capture-taps", "0,1,4", "--reported-draft-path", "/x"]) == 2
    assert "capture_taps [0, 1, 4]: give depths 0..3" in capsys.readouterr().err


def test_eagle_algorithm_with_an_eagle3_draft_skips_capture(models):
    hf, prompt, n = models["hf"], PROMPTS[0], 12
    cfg = DoubleConfig(models["target"], models["draft"], "EAGLE", enable_return_hidden_states=True)
    with start_double(cfg) as d:
        info = httpx.get(d.url + "/server_info").json()
        body = generate(
            d.url,
            input_ids=prompt,
            return_hidden_states=True,
            sampling_params={"temperature": 0, "max_new_tokens": n, "ignore_eos": True},
        ).json()
    assert info["speculative_algorithm"] == "EAGLE"
    assert info["eagle3dash_double_capture"]["feed"] == "last"
    assert info["eagle3dash_double_capture"]["prefill_layout"] == ""
    assert body["output_ids"] == greedy(hf, prompt, n)
    check_spec_accounting(body["meta_info"], 3)
    block = torch.tensor(body["meta_info"]["hidden_states"][0])
    assert block.shape == (len(prompt), 64)  # the final-normed state, width H
    torch.testing.assert_close(block, states(hf, prompt)[3], atol=1e-5, rtol=1e-4)


def test_the_bench_measures_acceptance_per_position_on_the_double(models):
    hf, n = models["hf"], 24
    ref = {i: greedy(hf, p, n) for i, p in enumerate(PROMPTS[:2])}
    token = max(set(ref[0]), key=ref[0].count)
    expected = [simulated_rounds(ref[i], token, 3)[2] for i in ref]
    summed = [sum(h[k] if k < len(h) else 0 for h in expected) for k in range(4)]
    while summed and not summed[-1]:
        summed.pop()
    cfg = DoubleConfig(models["target"], constant_draft(models, token), "EAGLE3")
    prompts = [Prompt("", input_ids=tuple(p)) for p in PROMPTS[:2]]
    with start_double(cfg) as d:
        result = run_bench(SGLangEngine(d.url), prompts, concurrency=1, max_new_tokens=n, warmup=0)
    assert [r.correct_drafts_histogram for r in result.requests] == expected
    assert result.correct_drafts_histogram == summed and sum(summed[1:]) > 0
    rounds = sum(summed)
    assert result.per_position == [sum(summed[k:]) / rounds for k in range(1, len(summed))]
    # each request emits 1 + rounds + accepted drafts: 1 + sum(per_position) is the accept length
    # without the tokens sampled at prefill
    assert 1 + sum(result.per_position) == pytest.approx(result.accept_length - 2 / rounds)


def test_the_client_reads_the_double_like_a_real_server(models):
    """Contract: SGLangClient parses the double as it parses the recorded 0.5.23 responses."""
    cfg = DoubleConfig(
        models["target"], models["draft"], "EAGLE3", enable_return_hidden_states=True
    )
    with start_double(cfg) as d, SGLangClient(d.url, timeout=30) as client:
        report = client.probe()
        assert report.version == "0.5.23" and report.healthy
        assert report.model_path == str(models["target"])
        assert report.speculative.algorithm == "EAGLE3"
        assert report.speculative.draft_model_path == str(models["draft"])
        assert (report.speculative.num_steps, report.speculative.num_draft_tokens) == (3, 4)
        assert report.enable_return_hidden_states
        result = client.generate(input_ids=PROMPTS[0], max_new_tokens=12)
        assert result.output_ids == greedy(models["hf"], PROMPTS[0], 12)
        assert result.completion_tokens == 12 and result.spec_verify_ct >= 3
        assert result.spec_accept_length == pytest.approx(12 / result.spec_verify_ct)
        client.flush_cache()
        # SGLang's histogram: entry k counts the rounds that accepted exactly k drafts, grown
        # only to the largest k seen; each round emits its k drafts and one bonus token, after
        # the first token (sampled at prefill)
        hist = result.spec_correct_drafts_histogram
        assert hist is not None and 1 <= len(hist) <= 3 + 1 and hist[-1] > 0
        assert sum(hist) == result.spec_verify_ct
        assert sum(k * c for k, c in enumerate(hist)) == 12 - 1 - result.spec_verify_ct
        result = client.generate(input_ids=PROMPTS[0], max_new_tokens=1, return_hidden_states=True)
        assert result.prefill_shape == (len(PROMPTS[0]), 3 * 64)
        assert result.spec_correct_drafts_histogram is None  # no verify round: no spec fields
