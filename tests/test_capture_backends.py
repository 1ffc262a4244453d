"""Capture backends: a local transformers target, its checkpoint on disk, and an SGLang endpoint.

The transformers tests run a real tiny Llama saved with save_pretrained. The SGLang tests run the
real SGLangClient against a tiny fake SGLang on 127.0.0.1 whose /generate is a known greedy rule
and whose prefill block holds known numbers, so the split into taps can be checked exactly.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest
import torch
from safetensors.torch import save_file

from eagle3dash.capture import (
    CaptureError,
    capture_with_transformers,
    load_capture,
    num_target_layers,
    read_target_embedding,
    save_capture,
)
from eagle3dash.draft import counted_rows
from eagle3dash.engines.seam import REFERENCE_TAIL, GenerateResult
from eagle3dash.engines.sglang.capture import capture_aux_layers_from_sglang, capture_from_sglang
from eagle3dash.engines.sglang.client import EndpointError, SGLangClient
from eagle3dash.layout import Tap
from tests.httpserver import Reply, Request, serve

V, H, N = 64, 32, 3


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=V,
        hidden_size=H,
        intermediate_size=64,
        num_hidden_layers=N,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    path = tmp_path_factory.mktemp("target")
    LlamaForCausalLM(cfg).eval().save_pretrained(path)
    return path


# --------------------------------------------------------------------------------------------
# transformers


def test_capture_with_transformers_taps_targets_embedding_round_trip(target_dir, tmp_path):
    from transformers import LlamaForCausalLM

    gen = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, V, (n,), generator=gen).tolist() for n in (5, 7, 5)]
    taps = (Tap(0), Tap(1), Tap(2), Tap(3), Tap(3, post_norm=True))
    calls = []
    cap = capture_with_transformers(
        target_dir, seqs, taps, progress=lambda i, n: calls.append((i, n))
    )
    assert cap.taps == taps and cap.hidden_size == H and len(cap.sequences) == 3
    assert cap.meta["num_hidden_layers"] == N
    assert cap.meta["architectures"] == ["LlamaForCausalLM"]
    assert cap.meta["target"] == str(target_dir)
    assert calls[-1] == (3, 3)  # the two length-5 sequences ran as one batch

    ref = LlamaForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    emb = ref.get_input_embeddings().weight.detach()
    torch.testing.assert_close(cap.embed_weight, emb, rtol=0, atol=0)
    with torch.no_grad():
        for ids, seq in zip(seqs, cap.sequences, strict=True):
            assert seq.input_ids.tolist() == ids
            out = ref(input_ids=torch.tensor([ids]), output_hidden_states=True)
            hs = [h[0] for h in out.hidden_states]
            torch.testing.assert_close(seq.states[Tap(0)], emb[torch.tensor(ids)])
            for d in (1, 2):
                torch.testing.assert_close(seq.states[Tap(d)], hs[d])
            # Tap(3) is the raw last-block output: the final norm of it is hidden_states[3]
            torch.testing.assert_close(ref.model.norm(seq.states[Tap(3)]), hs[3])
            torch.testing.assert_close(seq.states[Tap(3, post_norm=True)], hs[3])
            assert not torch.allclose(seq.states[Tap(3)], hs[3])
            # and it is the last block applied to Tap(2), recomputed without a hook
            pos = torch.arange(len(ids))[None]
            rope = ref.model.rotary_emb(hs[2][None], position_ids=pos)
            mask = torch.full((len(ids), len(ids)), float("-inf")).triu(1)[None, None]
            raw = ref.model.layers[2](
                hs[2][None], attention_mask=mask, position_ids=pos, position_embeddings=rope
            )
            raw = raw[0] if isinstance(raw, tuple) else raw
            torch.testing.assert_close(seq.states[Tap(3)], raw[0])
            assert torch.equal(seq.target_ids, out.logits[0].argmax(-1))

    back = load_capture(save_capture(cap, tmp_path / "cap"))
    assert back.taps == taps and back.meta == cap.meta
    torch.testing.assert_close(back.embed_weight, cap.embed_weight)
    for a, b in zip(cap.sequences, back.sequences, strict=True):
        assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.target_ids, b.target_ids)
        for t in taps:
            assert torch.equal(a.states[t], b.states[t])


def test_capture_with_transformers_options_and_errors(target_dir, tmp_path):
    cap = capture_with_transformers(
        target_dir,
        [torch.tensor([1, 2, 3])],
        (Tap(2),),
        with_target_ids=False,
        with_embedding=False,
    )
    assert cap.sequences[0].target_ids is None and cap.embed_weight is None
    assert set(cap.sequences[0].states) == {Tap(2)}

    with pytest.raises(CaptureError, match="no such target"):
        capture_with_transformers(tmp_path / "nope", [[1, 2]], (Tap(1),))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "llama"')
    with pytest.raises(CaptureError, match=f"{broken}: cannot load the target"):
        capture_with_transformers(broken, [[1, 2]], (Tap(1),))
    with pytest.raises(CaptureError, match="outside the target's taps 0..3"):
        capture_with_transformers(target_dir, [[1, 2]], (Tap(4),))
    with pytest.raises(CaptureError, match="post-norm"):
        capture_with_transformers(target_dir, [[1, 2]], (Tap(2, post_norm=True),))
    with pytest.raises(CaptureError, match="outside the target's vocabulary"):
        capture_with_transformers(target_dir, [[1, V]], (Tap(1),))


# --------------------------------------------------------------------------------------------
# The target checkpoint on disk


def test_num_target_layers(target_dir, tmp_path):
    assert num_target_layers(target_dir) == N
    assert num_target_layers(target_dir / "config.json") == N
    nested = tmp_path / "vlm"
    nested.mkdir()
    (nested / "config.json").write_text(json.dumps({"text_config": {"num_hidden_layers": 61}}))
    assert num_target_layers(nested) == 61
    (nested / "config.json").write_text("{}")
    with pytest.raises(CaptureError, match="num_hidden_layers"):
        num_target_layers(nested)
    with pytest.raises(CaptureError, match="no config.json"):
        num_target_layers(tmp_path / "missing")


def test_read_target_embedding_single_and_sharded(target_dir, tmp_path):
    from safetensors import safe_open

    with safe_open(str(target_dir / "model.safetensors"), framework="pt") as f:
        expected = f.get_tensor("model.embed_tokens.weight")
    assert torch.equal(read_target_embedding(target_dir), expected)
    assert torch.equal(read_target_embedding(target_dir / "model.safetensors"), expected)

    sharded = tmp_path / "sharded"
    sharded.mkdir()
    emb = torch.randn(10, 4)
    save_file(
        {"model.norm.weight": torch.ones(4)}, str(sharded / "model-00001-of-00002.safetensors")
    )
    save_file(
        {"model.language_model.embed_tokens.weight": emb, "lm_head.weight": torch.zeros(10, 4)},
        str(sharded / "model-00002-of-00002.safetensors"),
    )
    index = {
        "metadata": {},
        "weight_map": {
            "model.norm.weight": "model-00001-of-00002.safetensors",
            "model.language_model.embed_tokens.weight": "model-00002-of-00002.safetensors",
            "lm_head.weight": "model-00002-of-00002.safetensors",
        },
    }
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    assert torch.equal(read_target_embedding(sharded), emb)

    del index["weight_map"]["model.language_model.embed_tokens.weight"]
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CaptureError, match="weight_map has none of"):
        read_target_embedding(sharded)
    nothing = tmp_path / "empty"
    nothing.mkdir()
    with pytest.raises(CaptureError, match="no .safetensors"):
        read_target_embedding(nothing)


# --------------------------------------------------------------------------------------------
# A tiny fake SGLang


REFUSAL = (
    "The server is not configured to return the hidden states. "
    "Please set `--enable-return-hidden-states` to enable this feature."
)
REFUSAL_0_5_20 = (  # 0.5.20+ tokenizer_manager.py, without --return-hidden-states-mode
    "The server is not configured to return hidden states. "
    "Please set `--return-hidden-states-mode last`, `--return-hidden-states-mode full`, "
    "or the legacy `--enable-return-hidden-states` flag."
)
ABOVE_LAST = (  # 0.5.20+ tokenizer_manager.py under --return-hidden-states-mode last
    "The requested return_hidden_states mode exceeds the server maximum `last`. "
    "Please launch with `--return-hidden-states-mode full` to allow return_hidden_states=True."
)
HT, K = 8, 3


def greedy_next(prefix: list[int]) -> int:
    return (prefix[-1] * 5 + len(prefix)) % V


def cell(row: int, col: int) -> float:
    """The prefill block's known value at (row, col): exact in float32."""
    return float(row * 1000 + col)


@dataclass
class FakeSGLang:
    version: str = "0.5.23"
    algorithm: str | None = "EAGLE3"
    hidden_states: bool = True
    refusal: str = REFUSAL  # what /generate answers (400) when hidden states are off
    mode: str | None = None  # return_hidden_states_mode (0.5.20+)
    chunk: int | None = None  # chunked_prefill_size: longer prompts keep their last chunk's rows
    aux_only: bool = False
    aux_capture: str | None = None  # aux_hidden_state_capture (capture-only convention)
    aux_ids: list[int] | None = None
    flush_works: bool = True
    full_rows_on_hit: bool = False  # 0.5.4 slices len(input_ids) rows even on a cache hit
    width: int = K * HT  # aux block width with capture on
    cache: list[tuple[int, ...]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def server_info(self) -> dict:
        return {
            "model_path": "models/tiny",
            "version": self.version,
            "speculative_algorithm": self.algorithm,
            "speculative_draft_model_path": "drafts/tiny" if self.algorithm else None,
            "speculative_num_steps": 3 if self.algorithm else None,
            "speculative_eagle_topk": 1 if self.algorithm else None,
            "speculative_num_draft_tokens": 4 if self.algorithm else None,
            "enable_return_hidden_states": self.hidden_states,
            "return_hidden_states_mode": self.mode,
            "chunked_prefill_size": self.chunk,
            "enable_return_aux_hidden_states": self.aux_only,
            "aux_hidden_state_capture": self.aux_capture,
            "return_aux_hidden_state_layer_ids": self.aux_ids,
        }

    def generate(self, body: dict) -> tuple[int, dict]:
        ids = [int(t) for t in body["input_ids"]]
        params = body.get("sampling_params", {})
        if body.get("return_hidden_states") and self.mode == "last":
            return 400, {"error": {"message": ABOVE_LAST}}
        if body.get("return_hidden_states") and not self.hidden_states:
            return 400, {"error": {"message": self.refusal}}
        cached = 0
        for seq in self.cache:
            common = 0
            for a, b in zip(seq, ids, strict=False):
                if a != b:
                    break
                common += 1
            cached = max(cached, min(common, len(ids) - 1))
        out, seq = [], list(ids)
        for _ in range(int(params.get("max_new_tokens", 16))):
            seq.append(greedy_next(seq))
            out.append(seq[-1])
        self.cache.append(tuple(seq))
        meta = {
            "id": "x",
            "finish_reason": {"type": "length", "length": len(out)},
            "prompt_tokens": len(ids),
            "completion_tokens": len(out),
            "cached_tokens": cached,
        }
        if self.algorithm:
            meta["spec_verify_ct"] = (len(out) + 1) // 2
        if body.get("return_hidden_states"):
            aux = self.algorithm == "EAGLE3" or self.aux_only
            width = self.width if aux else HT
            # a radix-cache hit drops the cached rows of the prefill block (or, like 0.5.4,
            # keeps the row count with rows that belong to other positions)
            first = 0 if self.full_rows_on_hit else cached
            if self.chunk is not None and len(ids) > self.chunk:  # middle chunks store no rows
                first = max(first, (len(ids) - 1) // self.chunk * self.chunk)
            prefill = [[cell(r, c) for c in range(width)] for r in range(first, len(ids))]
            meta["hidden_states"] = [prefill, [0.0] * width]
        return 200, {"text": "", "output_ids": out, "meta_info": meta}

    def handle(self, method: str, path: str, body: dict | None) -> tuple[int, dict]:
        with self.lock:
            hs = " +hs" if body and body.get("return_hidden_states") else ""
            self.log.append(f"{method} {path}{hs}")
            if path == "/server_info":
                return 200, self.server_info()
            if path == "/model_info":
                return 200, {"model_path": "models/tiny", "architectures": ["LlamaForCausalLM"]}
            if path == "/health":
                return 200, {}
            if path == "/flush_cache":
                if self.flush_works:
                    self.cache.clear()
                return 200, {}
            if path == "/generate" and body is not None:
                return self.generate(body)
            return 404, {"detail": "Not Found"}


@contextmanager
def running(fake: FakeSGLang) -> Iterator[SGLangClient]:
    """Serve `fake` on 127.0.0.1 and yield a client for it."""

    def app(request: Request) -> Reply:
        status, obj = fake.handle(
            request.method, request.path, request.json() if request.body else None
        )
        return Reply(status, obj)

    with serve(app) as served, SGLangClient(served.url, timeout=10, retries=1) as client:
        yield client


def completion(prompt: list[int], n: int) -> list[int]:
    seq = list(prompt)
    for _ in range(n):
        seq.append(greedy_next(seq))
    return seq[len(prompt) :]


# --------------------------------------------------------------------------------------------
# SGLang serving capture


def test_capture_from_sglang_splits_taps_and_keeps_tokens(tmp_path):
    fake = FakeSGLang()
    prompts = [[3, 9, 27, 17], [5, 1]]
    layout = (Tap(3), Tap(1), Tap(2))  # SGLang concatenates in layer order whatever the order
    said: list[str] = []
    with running(fake) as client:
        cap = capture_from_sglang(client, prompts, layout, max_new_tokens=6, warn=said)
    assert said == [] and cap.meta["warnings"] == []
    assert cap.taps == (Tap(1), Tap(2), Tap(3)) and cap.hidden_size == HT
    # per prompt: completion, flush, then the hidden-state call
    gen = [e for e in fake.log if e.startswith("POST")]
    assert gen == ["POST /generate", "POST /flush_cache", "POST /generate +hs"] * 2

    for prompt, seq in zip(prompts, cap.sequences, strict=True):
        tokens = prompt + completion(prompt, 6 + REFERENCE_TAIL)
        P, L = len(prompt), len(tokens)
        assert seq.input_ids.tolist() == tokens
        for k, tap in enumerate(cap.taps):
            expected = torch.tensor([[cell(r, k * HT + c) for c in range(HT)] for r in range(L)])
            assert torch.equal(seq.states[tap], expected)
        # the taps are views of the one float32 buffer the reply was read into: no copies
        storages = {seq.states[t].untyped_storage().data_ptr() for t in cap.taps}
        assert len(storages) == 1 and seq.states[cap.taps[0]].dtype == torch.float32
        # the target's greedy token after every position, the last from the 1-token call
        assert seq.target_ids.tolist() == tokens[1:] + [greedy_next(tokens)]
        assert seq.loss_mask.tolist() == [0] * (P + 1) + [1] * (L - P - 1)
        # the evaluator counts rows t >= P-1: the positions serving drafts from
        _, rows = counted_rows(L, 3, True, seq.loss_mask)
        assert rows.tolist() == list(range(P - 1, L - 3))

    meta = cap.meta
    assert (
        meta["prompt_lengths"] == [4, 2] and meta["completion_lengths"] == [6 + REFERENCE_TAIL] * 2
    )
    assert meta["served_tokens"] == 6
    assert meta["speculative_algorithm"] == "EAGLE3" and meta["num_steps"] == 3
    assert meta["measured_accept_length"] == pytest.approx(12 / 6)
    assert meta["serving_layout"] == "1,2,3" and meta["aux_capture"] == "eagle3"

    back = load_capture(save_capture(cap, tmp_path / "cap"))
    assert back.taps == cap.taps and back.meta == cap.meta
    for a, b in zip(cap.sequences, back.sequences, strict=True):
        assert torch.equal(a.loss_mask, b.loss_mask) and torch.equal(a.target_ids, b.target_ids)
        assert all(torch.equal(a.states[t], b.states[t]) for t in cap.taps)


def _answered(output_ids: list[int], verify_ct: int) -> GenerateResult:
    """A benchmark's answer to one greedy request."""
    return GenerateResult(
        output_ids=output_ids,
        text="",
        prompt_tokens=None,
        completion_tokens=len(output_ids),
        spec_verify_ct=verify_ct,
        spec_accept_length=None,
        e2e_latency=None,
        finish_reason="length",
        spec_num_correct_drafts=None,
        spec_num_proposed_drafts=None,
        spec_accept_rate=None,
        spec_correct_drafts_histogram=None,
        meta_info={},
    )


def test_capture_from_sglang_keeps_the_benchmarks_completions():
    # The first prompt's benchmark answer is a completion this fake never generates (its greedy
    # rule gives others), so only a capture that keeps it holds these tokens; the second
    # prompt's request failed (None), so its completion is generated as without a benchmark.
    fake = FakeSGLang()
    prompts = [[3, 9, 27, 17], [5, 1]]
    kept = [11, 12, 13, 14, 15, 16]
    served = [_answered(kept, verify_ct=2), None]
    with running(fake) as client:
        cap = capture_from_sglang(client, prompts, (Tap(1), Tap(2), Tap(3)), 6, served=served)
    gen = [e for e in fake.log if e.startswith("POST")]
    assert gen == ["POST /generate", "POST /flush_cache", "POST /generate +hs"] * 2
    first = prompts[0] + kept
    assert cap.sequences[0].input_ids.tolist() == first + completion(first, REFERENCE_TAIL)
    second = prompts[1] + completion(prompts[1], 6 + REFERENCE_TAIL)
    assert cap.sequences[1].input_ids.tolist() == second
    # measured on the completions the rows come from: 6 tokens in the 2 rounds the benchmark
    # reported, 14 in the fake's (14 + 1) // 2 = 7: 20 / 9 (the tail's rounds are not counted)
    assert cap.meta["measured_accept_length"] == pytest.approx(20 / 9)
    assert cap.meta["completion_lengths"] == [6 + REFERENCE_TAIL] * 2
    # a benchmark answer shorter than the budget is not a whole completion: generated again
    with running(FakeSGLang()) as client:
        short = [_answered(kept[:5], verify_ct=2), None]
        again = capture_from_sglang(client, prompts, (Tap(1), Tap(2), Tap(3)), 6, served=short)
    assert again.sequences[0].input_ids.tolist() == prompts[0] + completion(prompts[0], 14)


def test_capture_from_sglang_takes_token_ids_and_says_so_for_text():
    with running(FakeSGLang()) as client:
        with pytest.raises(CaptureError, match="token ids"):
            capture_from_sglang(client, ["hello"], (Tap(1), Tap(2), Tap(3)), warn=[])
        ids = [ord("a") % V, ord("b") % V]
        cap = capture_from_sglang(client, [ids], (Tap(1), Tap(2), Tap(3)), 3, warn=[])
    assert cap.sequences[0].input_ids.tolist()[:2] == ids


def test_old_server_warns_about_truncation():
    said: list[str] = []
    with running(FakeSGLang(version="0.5.13")) as client:
        cap = capture_from_sglang(client, [[1, 2, 3]], (Tap(1), Tap(2), Tap(3)), 4, warn=said)
    assert said == [
        f"{client.url} runs SGLang 0.5.13: SGLang before 0.5.14 truncates or misattributes the "
        "per-token hidden states of decode steps under speculative decoding (issue #26163); the "
        "prefill block used here is still right"
    ]
    assert cap.meta["warnings"] == said
    assert len(cap.sequences[0]) == 3 + 4 + REFERENCE_TAIL  # the prefill block is still used

    calls: list[str] = []
    with running(FakeSGLang(version=None)) as client:  # type: ignore[arg-type]
        capture_from_sglang(client, [[1, 2]], (Tap(1), Tap(2), Tap(3)), 2, warn=calls.append)
    assert len(calls) == 1 and "version" in calls[0]


@pytest.mark.parametrize("version", ["0.5.14", "0.5.15.post1", "0.5.16"])
def test_per_token_rows_are_right_from_0_5_14(version):
    # batch_result_processor.py keeps one row per emitted token from 0.5.14 (issue #26163).
    said: list[str] = []
    with running(FakeSGLang(version=version)) as client:
        capture_from_sglang(client, [[1, 2, 3]], (Tap(1), Tap(2), Tap(3)), 4, warn=said)
    assert said == []


@pytest.mark.parametrize("algorithm", ["EAGLE", None])
def test_width_of_one_hidden_size_is_no_aux_capture(algorithm):
    with (
        running(FakeSGLang(algorithm=algorithm)) as client,
        pytest.raises(CaptureError, match="one hidden size") as err,
    ):
        capture_from_sglang(client, [[1, 2, 3]], (Tap(1), Tap(2), Tap(3)), 2, warn=[])
    assert "--speculative-algorithm EAGLE3" in str(err.value)


def test_width_checks():
    with running(FakeSGLang()) as client:
        with pytest.raises(CaptureError, match="not a multiple of the 5 taps"):
            capture_from_sglang(client, [[1, 2]], tuple(Tap(d) for d in range(5)), 2, warn=[])
        with pytest.raises(CaptureError, match="3 hidden sizes"):
            capture_from_sglang(client, [[1, 2]], (Tap(1), Tap(2)), 2, warn=[], hidden_size=HT)
        with pytest.raises(CaptureError, match="one hidden size"):
            capture_from_sglang(
                client, [[1, 2]], (Tap(1), Tap(2), Tap(3)), 2, warn=[], hidden_size=K * HT
            )


def test_a_reply_larger_than_the_taps_can_be_is_refused():
    # 3 + 2 + 8 tokens, + 1 new: 14 rows of at most 2 x 3 x 8 numbers, 32 bytes each, + 1 MiB
    fake = FakeSGLang(width=12000)  # 13 rows of 12,000 numbers like "12034.0, ": ~1.5 MB
    with running(fake) as client, pytest.raises(EndpointError) as err:
        capture_from_sglang(
            client, [[1, 2, 3]], (Tap(1), Tap(2), Tap(3)), 2, warn=[], hidden_size=HT
        )
    assert err.value.kind == EndpointError.TOO_LARGE
    assert "larger than 1.1 MB, the most 14 rows of 48 hidden-state numbers" in str(err.value)


def test_server_without_return_hidden_states_names_the_flag():
    fake = FakeSGLang(hidden_states=False)
    with (
        running(fake) as client,
        pytest.raises(EndpointError, match="--enable-return-hidden-states"),
    ):
        capture_from_sglang(client, [[1, 2]], (Tap(1), Tap(2), Tap(3)), 2, warn=[])
    assert not any(e.startswith("POST /generate") for e in fake.log)  # checked up front


@pytest.mark.parametrize(
    "refusal",
    [
        pytest.param(REFUSAL, id="0.5.16"),
        pytest.param(REFUSAL_0_5_20, id="0.5.20"),
    ],
)
def test_a_refusal_at_generate_is_no_hidden_states_not_a_capture(refusal):
    """A stale report (the server restarted without the flag since the probe): the refusal comes
    from /generate itself and must end the capture as NO_HIDDEN_STATES."""
    fake = FakeSGLang(hidden_states=False, refusal=refusal)
    with running(fake) as client:
        stale = dataclasses.replace(client.probe(), enable_return_hidden_states=True)
        with pytest.raises(EndpointError) as info:
            capture_from_sglang(
                client, [[1, 2]], (Tap(1), Tap(2), Tap(3)), 2, warn=[], report=stale
            )
    assert fake.log[-1] == "POST /generate +hs"  # refused by the server, not up front
    assert info.value.kind == EndpointError.NO_HIDDEN_STATES
    assert info.value.status == 400
    assert "--enable-return-hidden-states" in str(info.value)


@pytest.mark.parametrize(
    ("full_rows", "message"), [(False, "rows for 1 of 15 input tokens"), (True, "14 of 15 tokens")]
)
def test_a_cache_that_does_not_flush_is_caught(full_rows, message):
    with (
        running(FakeSGLang(flush_works=False, full_rows_on_hit=full_rows)) as client,
        pytest.raises(CaptureError, match=message) as err,
    ):
        capture_from_sglang(client, [[1, 2, 3]], (Tap(1), Tap(2), Tap(3)), 4, warn=[])
    assert "--disable-radix-cache" in str(err.value)


def test_capture_aux_layers_from_sglang_capture_only_mode():
    fake = FakeSGLang(
        algorithm=None, aux_only=True, aux_capture="eagle3", aux_ids=[0, 1], width=2 * HT
    )
    said: list[str] = []
    with running(fake) as client:
        cap = capture_aux_layers_from_sglang(client, [[4, 5, 6]], N, max_new_tokens=3, warn=said)
    # Llama rule (the same set_eagle3_layers_to_capture): id i = output of layer i -> Tap(i + 1)
    assert cap.taps == (Tap(1), Tap(2)) and cap.hidden_size == HT
    assert cap.meta["aux_layer_ids"] == [0, 1] and cap.meta["aux_capture"] == "aux-only"
    assert said == [] and cap.meta["warnings"] == []
    with (
        running(FakeSGLang()) as client,
        pytest.raises(CaptureError, match="--enable-return-aux-hidden-states"),
    ):
        capture_aux_layers_from_sglang(client, [[1, 2]], N, warn=[])


@pytest.mark.parametrize(
    "ids, problem",
    [
        ([-1, 1], "[-1, 1] has negative ids: layer ids count from 0"),
        ([1, 1], "[1, 1] repeats a layer: each layer is captured once"),
        ([1, N], f"[1, {N}]: [{N}] not below the target's {N} layers (ids 0..{N - 1})"),
        ([1, "2"], "[1, '2'] holds something other than integers"),
        ([], "[] is not a non-empty list of layer ids"),
    ],
)
def test_capture_only_ids_are_checked_before_any_request(ids, problem):
    fake = FakeSGLang(algorithm=None, aux_only=True, aux_ids=ids, width=2 * HT)
    with running(fake) as client, pytest.raises(CaptureError) as err:
        capture_aux_layers_from_sglang(client, [[4, 5, 6]], N, max_new_tokens=3, warn=[])
    assert str(err.value) == (
        f"{client.url}: server_info return_aux_hidden_state_layer_ids {problem}"
    )
    assert not any(e.startswith("POST /generate") for e in fake.log)


def test_capture_only_with_another_convention_is_refused():
    fake = FakeSGLang(algorithm=None, aux_only=True, aux_capture="dflash", aux_ids=[0, 1])
    with running(fake) as client, pytest.raises(CaptureError) as err:
        capture_aux_layers_from_sglang(client, [[4, 5, 6]], N, max_new_tokens=3, warn=[])
    assert str(err.value) == (
        f"{client.url} captures aux states with the dflash convention (server_info "
        "aux_hidden_state_capture), whose layer ids SGLang reads otherwise than EAGLE-3's: "
        "restart it with --speculative-algorithm EAGLE3"
    )


def test_mode_last_is_refused_up_front_with_the_restart_flag():
    fake = FakeSGLang(mode="last")
    with running(fake) as client, pytest.raises(EndpointError) as err:
        capture_from_sglang(client, [[1, 2]], (Tap(1), Tap(2), Tap(3)), 2, warn=[])
    assert err.value.kind == EndpointError.NO_HIDDEN_STATES
    assert "--return-hidden-states-mode full" in str(err.value)
    assert not any(e.startswith("POST /generate") for e in fake.log)
    with running(fake) as client:  # a stale report: /generate's own refusal says the same
        stale = dataclasses.replace(client.probe(), return_hidden_states_mode="full")
        with pytest.raises(EndpointError) as refused:
            capture_from_sglang(
                client, [[1, 2]], (Tap(1), Tap(2), Tap(3)), 2, warn=[], report=stale
            )
    assert refused.value.kind == EndpointError.NO_HIDDEN_STATES
    assert "--return-hidden-states-mode full" in str(refused.value)


def test_a_sequence_longer_than_a_prefill_chunk_names_chunked_prefill_size():
    fake = FakeSGLang(chunk=16)
    prompt = list(range(1, 8))  # 7 + 4 new + REFERENCE_TAIL = 19 > 16
    with running(fake) as client, pytest.raises(CaptureError) as err:
        capture_from_sglang(client, [[1, 2], prompt], (Tap(1), Tap(2), Tap(3)), 4, warn=[])
    assert str(err.value) == (
        f"{client.url}: prompt 1: the capture sequence would be 19 tokens (7 prompt + 12 "
        "generated), more than the server's chunked_prefill_size 16: SGLang prefills it in "
        "chunks and returns the hidden states of the last chunk only. Use prompts of at most 4 "
        "tokens (or fewer new tokens), or restart the server with --chunked-prefill-size 19 or "
        "more"
    )
    assert not any(e.startswith("POST /generate") for e in fake.log)
    with running(FakeSGLang(chunk=19)) as client:  # exactly one chunk: every row comes back
        cap = capture_from_sglang(client, [prompt], (Tap(1), Tap(2), Tap(3)), 4, warn=[])
    assert len(cap.sequences[0]) == 19
