"""The double's verification under sampling: SGLang's target-only rule by hand, then over HTTP.

The rule (`verify_chain`, `sample_from`, `target_probs`) is checked on a 4-token vocabulary with
the outcomes worked out by hand from speculative_sampling.cuh. Over HTTP the demo's "correct"
deployment shows the effect: accept length falls with temperature; temperature 0 stays plain
greedy decoding (transformers' argmax), a seed reproduces outputs, and the CPU rule verifies
greedily.
"""

from __future__ import annotations

import httpx
import pytest
import torch
from transformers import LlamaForCausalLM

from eagle3dash.demo import FIXTURES, deployments
from eagle3dash.engines.sglang.adapter import SGLangEngine
from eagle3dash.servebench import load_prompts, run_bench
from eagle3dash.testing.double_maths import (
    TOP_K_ALL,
    Sampling,
    parse_sampling,
    sample_from,
    target_probs,
    verify_chain,
)
from eagle3dash.testing.sglang_double import start_double

# target distributions after 0, 1 and 2 accepted drafts, over a vocabulary of 4
ROWS = torch.tensor(
    [[0.1, 0.6, 0.2, 0.1], [0.5, 0.1, 0.1, 0.3], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64
)
DRAFTS = [1, 3]  # p_target 0.6, then 0.3


# -- the rule by hand --------------------------------------------------------------------------


def test_a_draft_is_accepted_when_its_coin_is_at_most_its_target_probability():
    # 0.59 <= 0.6 accepts draft 1; 0.31 > 0.3 rejects draft 3. Row 1 without token 3 is
    # [0.5, 0.1, 0.1, 0] (sum 0.7): the final coin 0.8 -> u = 0.56, running sums 0.5, 0.6 -> id 1
    assert verify_chain(ROWS, DRAFTS, [0.59, 0.31, 0.9], 0.8) == (1, 1)
    # coin == p accepts (<=); both accepted, the bonus comes from row 2: u = 0.8 -> id 3
    assert verify_chain(ROWS, DRAFTS, [0.6, 0.3, 0.9], 0.8) == (2, 3)
    # 0.61 > 0.6 rejects at once; row 0 without token 1 is [0.1, 0, 0.2, 0.1] (sum 0.4):
    # u = 0.5 * 0.4 = 0.2, running sums 0.1, 0.1, 0.3 -> id 2
    assert verify_chain(ROWS, DRAFTS, [0.61, 0.0, 0.0], 0.5) == (0, 2)


def test_the_rejected_draft_is_never_the_token_drawn_in_its_place():
    drawn = {verify_chain(ROWS, DRAFTS, [0.99, 0, 0], c / 100)[1] for c in range(100)}
    assert drawn == {0, 2, 3}  # row 0 renormalised without token 1: 0.25, 0, 0.5, 0.25


def test_accept_thresholds_relax_the_rule_like_the_kernel():
    # threshold_single 0.5: p = 0.6 >= 0.5 accepts whatever the coin; p = 0.3 does not, and
    # the coin 0.99 > 0.3 rejects; final coin 0 -> the first id of positive weight, 0
    assert verify_chain(ROWS, DRAFTS, [0.99, 0.99, 0], 0.0, threshold_single=0.5) == (1, 0)
    # threshold_acc 0.5: accept when coin <= p / 0.5: 0.99 <= 1.2 yes, 0.61 <= 0.6 no, 0.6 yes
    assert verify_chain(ROWS, DRAFTS, [0.99, 0.61, 0], 0.0, threshold_acc=0.5) == (1, 0)
    assert verify_chain(ROWS, DRAFTS, [0.99, 0.6, 0], 0.0, threshold_acc=0.5) == (2, 0)
    # threshold_acc 0 is capped at 1e-9, not a division by zero: any p > 0 is accepted
    assert verify_chain(ROWS, DRAFTS, [0.99, 0.99, 0], 0.0, threshold_acc=0.0) == (2, 0)


def test_sample_from_is_the_kernels_inverse_cdf_with_its_fallbacks():
    w = torch.tensor([0.2, 0.3, 0.0])
    assert sample_from(w, 0.0) == 0
    assert sample_from(w, 0.5) == 1  # u = 0.25: 0.2 is not past it, 0.5 is
    assert sample_from(w, 1.0) == 1  # u = 0.5 = the total: none is past it -> last positive id
    assert sample_from(torch.tensor([0.0, 0.5, 0.5]), 0.0) == 1  # weight 0 is never drawn
    assert sample_from(torch.zeros(3), 0.3) == 2  # no weight at all: the last id


def test_target_probs_scale_by_temperature_then_renormalise_top_k_and_top_p():
    logits = torch.log(torch.tensor([[1.0, 2.0, 3.0, 4.0]]))

    def probs(**kw) -> list[float]:
        return target_probs(logits, Sampling(**kw))[0].tolist()

    assert probs() == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert probs(temperature=0.5) == pytest.approx([1 / 30, 4 / 30, 9 / 30, 16 / 30])
    assert probs(top_k=2) == pytest.approx([0, 0, 3 / 7, 4 / 7])
    assert probs(top_p=0.35) == pytest.approx([0, 0, 0, 1])  # 0.4 alone reaches 0.35
    assert probs(top_p=0.6) == pytest.approx([0, 0, 3 / 7, 4 / 7])  # 0.4 + 0.3 reach 0.6
    # top-k first: [0, 2/9, 3/9, 4/9]; then 4/9 + 3/9 reach 0.5
    assert probs(top_k=3, top_p=0.5) == pytest.approx([0, 0, 3 / 7, 4 / 7])


def test_sampling_params_defaults_and_checks_are_sglangs():
    assert parse_sampling({}) == Sampling(1.0, 1.0, TOP_K_ALL, None)  # SGLang samples unless told
    assert not parse_sampling({}).greedy
    zero = parse_sampling({"temperature": 0})
    assert zero.greedy and (zero.temperature, zero.top_k) == (1.0, 1)
    assert parse_sampling({"temperature": 0.8, "top_k": 1}).greedy
    given = {"temperature": 0.7, "top_p": 0.9, "top_k": -1, "sampling_seed": 3}
    assert parse_sampling(given) == Sampling(0.7, 0.9, TOP_K_ALL, 3)
    for bad, text in (
        ({"temperature": -1}, "temperature must be a non-negative finite number, got -1.0."),
        ({"top_p": 0}, "top_p must be in (0, 1], got 0.0."),
        ({"top_k": 0}, "top_k must be -1 (disable) or at least 1, got 0."),
        ({"sampling_seed": -2}, "sampling_seed must be a non-negative integer, got -2."),
    ):
        with pytest.raises(ValueError) as info:
            parse_sampling(bad)
        assert str(info.value) == text


# -- over HTTP on the demo ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf() -> LlamaForCausalLM:
    return LlamaForCausalLM.from_pretrained(str(FIXTURES / "target"), dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    return [list(p.input_ids or ()) for p in load_prompts(FIXTURES / "prompts.jsonl")]


def greedy(hf: LlamaForCausalLM, prompt: list[int], n: int) -> list[int]:
    """The target's argmax continuation, one full forward per token."""
    seq = list(prompt)
    with torch.inference_mode():
        for _ in range(n):
            seq.append(int(hf(input_ids=torch.tensor([seq])).logits[0, -1].argmax()))
    return seq[len(prompt) :]


def generate(url: str, prompt: list[int], n: int, **sampling) -> dict:
    body = {
        "input_ids": prompt,
        "sampling_params": {"max_new_tokens": n, "ignore_eos": True, **sampling},
    }
    r = httpx.post(url + "/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def correct(**overrides):
    return deployments()["correct"].double_config(**overrides)


def test_accept_length_falls_with_temperature_and_the_histograms_still_add_up():
    # the copy-heavy prompts: greedy, the draft accepts nearly every token there
    demo = load_prompts(FIXTURES / "prompts.jsonl")
    bench_prompts = [p for p in demo if p.category == "copy-heavy"]
    assert len(bench_prompts) == 8
    accept = {}
    with start_double(correct(random_seed=1)) as d:
        for t in (0.0, 0.7, 1.0):
            r = run_bench(
                SGLangEngine(d.url),
                bench_prompts,
                concurrency=1,
                max_new_tokens=24,
                warmup=0,
                temperature=t,
            )
            assert r.errors == 0 and r.temperature == t
            accept[t] = r.accept_length
            for s in r.requests:  # SGLang's invariants hold however the rounds were decided
                h, ct = s.correct_drafts_histogram, s.spec_verify_ct
                assert h is not None and ct is not None and s.completion_tokens == 24
                assert sum(h) == ct
                assert sum(k * c for k, c in enumerate(h)) == s.completion_tokens - 1 - ct
    # the draft proposes the target's argmax; sampling accepts it with probability p < 1
    assert accept[0.0] >= accept[0.7] + 0.5
    assert accept[0.7] > accept[1.0]
    assert accept[0.0] >= accept[1.0] + 1.0


def test_temperature_zero_and_top_k_one_stay_plain_greedy(hf, prompts):
    with start_double(correct(random_seed=1)) as d:
        for prompt in prompts[:3]:
            ref = greedy(hf, prompt, 16)
            assert generate(d.url, prompt, 16, temperature=0)["output_ids"] == ref
            # top_k 1 is greedy at any temperature (sampling_batch_info: is_all_greedy)
            assert generate(d.url, prompt, 16, temperature=1.0, top_k=1)["output_ids"] == ref


def test_a_seed_reproduces_the_outputs(prompts):
    def outputs(seed: int, **sampling) -> list[list[int]]:
        with start_double(correct(random_seed=seed)) as d:
            return [
                generate(d.url, p, 12, temperature=1.0, **sampling)["output_ids"]
                for p in prompts[:2]
            ]

    first = outputs(11)
    assert outputs(11) == first  # the same --random-seed and requests: the same outputs
    assert outputs(12) != first
    # a request's sampling_seed gives it its own stream, whatever the server's seed
    assert outputs(11, sampling_seed=5) == outputs(12, sampling_seed=5)


def test_sampling_keeps_to_top_k_in_plain_and_speculative_decoding(hf, prompts):
    """Every token emitted at top_k 2 is one of the target's 2 most likely at its position."""
    plain = correct(speculative_algorithm=None, draft_path=None, random_seed=3)
    for cfg in (plain, correct(random_seed=3)):
        not_argmax = 0
        with start_double(cfg) as d:
            for prompt in prompts[:3]:
                out = generate(d.url, prompt, 16, temperature=1.5, top_k=2)["output_ids"]
                with torch.inference_mode():
                    logits = hf(input_ids=torch.tensor([prompt + out])).logits[0]
                top2 = logits[len(prompt) - 1 : -1].topk(2, dim=-1).indices.tolist()
                assert all(t in pair for t, pair in zip(out, top2, strict=True))
                not_argmax += sum(t != pair[0] for t, pair in zip(out, top2, strict=True))
        assert not_argmax > 0  # it sampled: some tokens are not the argmax


def test_the_cpu_rule_verifies_greedily_after_a_sampled_first_token(hf, prompts):
    with start_double(correct(random_seed=4, cpu_greedy_verify=True)) as d:
        info = httpx.get(d.url + "/server_info").json()
        for prompt in prompts[:3]:
            out = generate(d.url, prompt, 13, temperature=1.0)["output_ids"]
            # the prefill token is sampled (SGLang's sampler); every verify round commits argmax
            assert out[1:] == greedy(hf, prompt + out[:1], 12)
    assert info["eagle3dash_double_verification"] == "greedy at any temperature (SGLang's CPU rule)"


def test_thresholds_and_seed_are_reported_and_applied(prompts):
    cfg = correct(random_seed=9, speculative_accept_threshold_single=0.0)
    with start_double(cfg) as d:
        info = httpx.get(d.url + "/server_info").json()
        meta = generate(d.url, prompts[0], 21, temperature=1.0)["meta_info"]
        bad = httpx.post(
            d.url + "/generate",
            json={"input_ids": prompts[0], "sampling_params": {"temperature": -1}},
            timeout=60,
        )
    assert info["random_seed"] == 9 and info["internal_states"][0]["random_seed"] == 9
    assert info["speculative_accept_threshold_single"] == 0.0
    assert info["speculative_accept_threshold_acc"] == 1.0
    assert "--random-seed 9" in info["launch_command"]
    assert "--speculative-accept-threshold-single 0.0" in info["launch_command"]
    # p >= 0 always holds: every draft is accepted, 1 + 4 rounds of 4 drafts + 1 = 21 tokens
    assert meta["spec_correct_drafts_histogram"] == [0, 0, 0, 0, 4]
    assert meta["spec_verify_ct"] == 4
    assert bad.status_code == 400
    assert bad.json()["error"]["message"] == (
        "temperature must be a non-negative finite number, got -1.0."
    )
