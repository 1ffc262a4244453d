"""The batched draft evaluation against a naive serving-style loop, RoPE against transformers."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from eagle3dash.capture import Capture, Sequence
from eagle3dash.draft import build_draft, evaluate, evaluate_capture, rope_parameters
from eagle3dash.layout import Tap
from eagle3dash.metrics import accept_length, build_eval, summarize
from eagle3dash.spec import DraftSpec, expected_shapes
from tests.reference import naive_matches
from tests.specs import tiny_spec

LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}


def make_spec(**kw) -> DraftSpec:
    """A tiny draft with its own embedding, MHA and a 40-token vocab; override any field."""
    base = dict(
        num_kv_heads=4,
        vocab_size=40,
        draft_vocab_size=40,
        max_position_embeddings=256,
        has_embed=True,
    )
    return tiny_spec(**{**base, **kw})


def random_tensors(spec: DraftSpec, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights of the spec's shapes: linears ~ N(0, 1/fan_in), norms near 1."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in expected_shapes(spec).items():
        if name in ("d2t", "t2d") or (name == "embed_tokens.weight" and not spec.has_embed):
            continue
        x = torch.randn(shape, generator=gen)
        if "norm" in name:
            x = 1.0 + 0.1 * x
        elif name.endswith(".bias"):
            x = 0.1 * x
        elif name != "embed_tokens.weight":
            x = x / math.sqrt(shape[-1])
        out[name] = x
    if spec.has_d2t:
        hot = torch.randperm(spec.vocab_size, generator=gen)[: spec.draft_vocab_size].sort().values
        out["d2t"] = hot - torch.arange(spec.draft_vocab_size)
        t2d = torch.zeros(spec.vocab_size, dtype=torch.bool)
        t2d[hot] = True
        out["t2d"] = t2d
    return out


def random_inputs(spec: DraftSpec, length: int, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    aux = torch.randn(length, spec.num_aux * spec.target_hidden_size, generator=gen)
    ids = torch.randint(0, spec.vocab_size, (length,), generator=gen)
    return aux, ids


VARIANTS = {
    "base": {},
    "norm_before_residual": {"norm_before_residual": True},
    "norm_before_fc": {"norm_before_fc": True},
    "fc_norm": {"fc_norm": True},
    "feedback_post_norm": {"feedback_post_norm": True},
    "no_norm_before_lm_head": {"norm_before_lm_head": False},
    "d2t": {"draft_vocab_size": 24, "has_d2t": True, "has_t2d": True},
    "gqa": {"num_kv_heads": 2},
    "ht_ne_h": {"target_hidden_size": 24},
    "qk_norm": {"qk_norm": True},
    "attention_bias": {"attention_bias": True},
    "two_layers": {"num_layers": 2},
    "llama3_rope": {"rope_scaling": LLAMA3, "rope_theta": 10000.0},
    "yarn_rope": {"rope_scaling": YARN},
    "sliding_window": {"sliding_window": 7},
    "no_embed": {"has_embed": False},
    "everything": {
        "norm_before_residual": True,
        "norm_before_fc": True,
        "fc_norm": True,
        "feedback_post_norm": True,
        "draft_vocab_size": 24,
        "has_d2t": True,
        "has_t2d": True,
        "num_kv_heads": 1,
        "target_hidden_size": 20,
        "qk_norm": True,
        "attention_bias": True,
        "num_layers": 2,
        "rope_scaling": {**YARN, "type": "yarn"},
        "sliding_window": 5,
    },
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_batched_matches_naive(name):
    spec = make_spec(**VARIANTS[name])
    tensors = random_tensors(spec)
    draft = build_draft(spec, tensors)
    aux, ids = random_inputs(spec, 40)
    embed = None if spec.has_embed else torch.randn(spec.vocab_size, spec.hidden_size)
    steps = 4
    # First pass: reference tokens = the draft's own step-0 predictions, so that step 0 always
    # matches and deeper steps match partly (random tokens would give almost no matches).
    _, logits0 = naive_matches(draft, aux, ids, steps, embed, ids, return_logits=True)
    pred0 = logits0[:, 0].argmax(-1)
    if "d2t" in tensors:
        pred0 = pred0 + tensors["d2t"][pred0]
    target = ids.clone()
    target[1 : 1 + pred0.shape[0]] = pred0
    m_ref, lg_ref = naive_matches(draft, aux, ids, steps, embed, target, return_logits=True)
    m, lg = evaluate(draft, aux, ids, steps, embed, target_ids=target, chunk=16, return_logits=True)
    assert m.shape == m_ref.shape == (40 - 1 - steps + 1, steps)
    assert torch.equal(m, m_ref)
    assert m[:, 0].all() and not m[:, 1:].all()
    torch.testing.assert_close(lg, lg_ref, rtol=1e-4, atol=1e-4)


def test_loss_mask_and_default_refs():
    spec = make_spec(num_kv_heads=2, sliding_window=9, draft_vocab_size=8, has_d2t=True)
    draft = build_draft(spec, random_tensors(spec, seed=3))
    aux, ids = random_inputs(spec, 33, seed=4)
    mask = torch.rand(33, generator=torch.Generator().manual_seed(5)) > 0.4
    m_ref, lg_ref = naive_matches(draft, aux, ids, 3, loss_mask=mask, return_logits=True)
    m, lg = evaluate(draft, aux, ids, 3, loss_mask=mask, chunk=5, return_logits=True)
    assert torch.equal(m, m_ref)
    torch.testing.assert_close(lg, lg_ref, rtol=1e-4, atol=1e-4)
    # without target_ids the last row is L-2-S (its chain predicts up to tok[L-1])
    assert evaluate(draft, aux, ids, 3).shape == (33 - 1 - 3, 3)
    assert evaluate(draft, aux[:3], ids[:3], 3).shape == (0, 3)


def test_chunk_size_does_not_change_result():
    spec = make_spec(num_layers=2, num_kv_heads=2)
    draft = build_draft(spec, random_tensors(spec))
    aux, ids = random_inputs(spec, 50)
    _, a = evaluate(draft, aux, ids, 5, chunk=7, return_logits=True)
    _, b = evaluate(draft, aux, ids, 5, chunk=1000, return_logits=True)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def _rms(x, w, eps=1e-5):
    return w * x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)


def test_layer0_step0_by_hand():
    """draft.py's computation written out for row t=3, step 0 of a SpecForge-style draft
    (residual = g)."""
    spec = make_spec(num_heads=2, num_kv_heads=2, head_dim=16)
    W = random_tensors(spec, seed=7)
    draft = build_draft(spec, W)
    aux, ids = random_inputs(spec, 10, seed=8)
    t = 3
    g = aux @ W["fc.weight"].T  # [L, H]
    e = W["embed_tokens.weight"][ids[1:]]  # row s reads tok[s+1]
    z = torch.cat(
        [
            _rms(e, W["layers.0.input_layernorm.weight"]),
            _rms(g[:-1], W["layers.0.hidden_norm.weight"]),
        ],
        dim=-1,
    )  # [L-1, 2H]
    p = "layers.0.self_attn."
    q = (z @ W[p + "q_proj.weight"].T).view(-1, 2, 16)
    k = (z @ W[p + "k_proj.weight"].T).view(-1, 2, 16)
    v = (z @ W[p + "v_proj.weight"].T).view(-1, 2, 16)

    def rot(x, pos):  # rotate pairs (i, i+8) by angle pos * 10000^(-2i/16)
        inv = 10000.0 ** (-torch.arange(0, 16, 2).float() / 16)
        c, s = torch.cos(pos * inv), torch.sin(pos * inv)
        a, b = x[..., :8], x[..., 8:]
        return torch.cat([a * c - b * s, b * c + a * s], dim=-1)

    qt = rot(q[t], t)  # [2, 16]
    ks = torch.stack([rot(k[s], s) for s in range(t + 1)])  # [t+1, 2, 16]
    att = torch.softmax(torch.einsum("hd,shd->hs", qt, ks) / 4.0, dim=-1)
    o = torch.einsum("hs,shd->hd", att, v[: t + 1]).reshape(-1)
    h = g[t] + o @ W[p + "o_proj.weight"].T
    x = _rms(h, W["layers.0.post_attention_layernorm.weight"])
    mlp = (
        torch.nn.functional.silu(x @ W["layers.0.mlp.gate_proj.weight"].T)
        * (x @ W["layers.0.mlp.up_proj.weight"].T)
    ) @ W["layers.0.mlp.down_proj.weight"].T
    logits = _rms(h + mlp, W["norm.weight"]) @ W["lm_head.weight"].T
    _, lg = evaluate(draft, aux, ids, 1, return_logits=True)
    torch.testing.assert_close(lg[t, 0], logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "scaling",
    [
        LLAMA3,
        {**LLAMA3, "rope_type": None, "type": "llama3"},
        YARN,
        {**YARN, "mscale": 1.0, "mscale_all_dim": 0.5, "beta_fast": 16},
        {**YARN, "attention_factor": 0.9, "truncate": False},
        {"rope_type": "linear", "factor": 2.0},
    ],
)
def test_rope_matches_transformers(scaling):
    scaling = {k: v for k, v in scaling.items() if v is not None}
    spec = make_spec(head_dim=32, num_heads=4, rope_theta=50000.0, rope_scaling=scaling)
    inv, att = rope_parameters(spec)
    cfg = LlamaConfig(
        hidden_size=128,
        num_attention_heads=4,
        head_dim=32,
        max_position_embeddings=256,
        rope_theta=50000.0,
        rope_scaling=dict(scaling),
    )
    kind = scaling.get("rope_type", scaling.get("type"))
    inv_hf, att_hf = ROPE_INIT_FUNCTIONS[kind](cfg, None)
    torch.testing.assert_close(inv, inv_hf.float(), rtol=1e-6, atol=0)
    assert att == pytest.approx(att_hf)
    rope = LlamaRotaryEmbedding(cfg)
    pos = torch.arange(300)
    cos_hf, sin_hf = rope(torch.zeros(1, 300, 32), pos[None])
    draft = build_draft(spec, random_tensors(spec))
    cos, sin = draft.rotary(pos, torch.float32)
    torch.testing.assert_close(cos, cos_hf[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sin, sin_hf[0], rtol=1e-5, atol=1e-5)


def test_build_draft_errors_and_missing_embedding():
    spec = make_spec(has_embed=False)
    tensors = random_tensors(spec)
    with pytest.raises(ValueError, match="missing.*lm_head.weight"):
        build_draft(spec, {k: v for k, v in tensors.items() if k != "lm_head.weight"})
    with pytest.raises(ValueError, match="wrong shapes"):
        build_draft(spec, {**tensors, "fc.weight": torch.zeros(3, 3)})
    draft = build_draft(spec, tensors)
    aux, ids = random_inputs(spec, 12)
    with pytest.raises(ValueError, match="no embed_tokens .* pass the target's embedding"):
        evaluate(draft, aux, ids)
    assert {n for n, _ in draft.named_parameters()} | {n for n, _ in draft.named_buffers()} == set(
        tensors
    )


def _leading(row: list[bool]) -> int:
    """Leading correct steps of one chain, counted one step at a time."""
    n = 0
    for ok in row:
        if not ok:
            break
        n += 1
    return n


def test_evaluate_capture_pools_sequences():
    """Pooled and served numbers of hand-made matches, through the real draft and evaluation.

    With lm_head all zeros every logit ties and argmax takes the first: the draft predicts token
    0 at every step, whatever it is fed. Row t step k then matches iff ref[t+1+k] == 0, and with
    no target_ids ref[j] = ids[j+1], so row t reads (ids[t+2] == 0, ids[t+3] == 0, ids[t+4] == 0).
    """
    spec = make_spec(has_embed=False, num_aux=2)
    tensors = random_tensors(spec)
    tensors["lm_head.weight"] = torch.zeros_like(tensors["lm_head.weight"])
    draft = build_draft(spec, tensors)
    embed = torch.randn(spec.vocab_size, spec.hidden_size)
    taps = (Tap(0), Tap(1), Tap(2))
    layout = (Tap(1), Tap(2))

    def seq(ids: list[int], loss_mask: list[int] | None = None) -> Sequence:
        gen = torch.Generator().manual_seed(len(ids))
        states = {tap: torch.randn(len(ids), 32, generator=gen) for tap in taps}
        mask = None if loss_mask is None else torch.tensor(loss_mask)
        return Sequence(input_ids=torch.tensor(ids), states=states, loss_mask=mask)

    seqs = [
        # L=8, rows 0..3: [1,0,1] [0,1,1] [1,1,1] [1,1,0], leading 1 0 3 2
        seq([5, 7, 0, 3, 0, 0, 0, 9]),
        # L=7, rows 0..2: [1,1,0] [1,0,1] [0,1,1]; loss_mask[3] = 0 drops row 1: leading 2 _ 0
        seq([4, 6, 0, 0, 8, 0, 0], loss_mask=[1, 1, 1, 0, 1, 1, 1]),
        # L=4: no row has 3 references
        seq([1, 2, 0, 0]),
    ]
    cap = Capture(taps=taps, sequences=seqs, hidden_size=32, embed_weight=embed)
    ev = evaluate_capture(draft, cap, layout, steps=3)
    assert ev.num_positions == 4 + 2
    # pooled rows: [1,0,1] [0,1,1] [1,1,1] [1,1,0] [1,1,0] [0,1,1]
    assert ev.accuracy == pytest.approx([4 / 6, 5 / 6, 4 / 6])
    assert ev.acceptance == pytest.approx([4 / 6, 3 / 6, 1 / 6])
    assert ev.accept_length == pytest.approx(1 + (1 + 0 + 3 + 2 + 2 + 0) / 6)
    assert ev.accept_length_per_sequence[:2] == pytest.approx([1 + 6 / 4, 1 + 2 / 2])
    assert math.isnan(ev.accept_length_per_sequence[2])
    # Served rounds. Sequence 0: row 0 emits 2, row 2 emits 4, row 6 is past the end -> 1+6
    # tokens in 2 rounds. Sequence 1: row 0 emits 3, row 3 is not counted -> 1+3 in 1 round.
    assert ev.served_accept_length == pytest.approx((7 + 4) / (2 + 1))
    # One draft token a round: rows 0, 2 (2 + 2) and rows 0, 2 (2 + 1).
    assert ev.served_accept_length_at(1) == pytest.approx((5 + 4) / (2 + 2))
    assert ev.layout == (Tap(1), Tap(2))
    assert ev.to_dict()["accept_length_per_sequence"][2] is None
    # The requests' budget (5 tokens) cuts sequence 0's second round to 2 tokens.
    cap.meta["served_tokens"] = 5
    assert evaluate_capture(draft, cap, layout, steps=3).served_accept_length == pytest.approx(
        (5 + 4) / (2 + 1)
    )
    with pytest.raises(ValueError, match="3 taps but the draft's fc has 2"):
        evaluate_capture(draft, cap, taps)


def test_evaluate_capture_feeds_the_layouts_taps_in_layout_order():
    """A random draft against the naive per-position reference fed by hand with Tap(2), Tap(1)."""
    spec = make_spec(has_embed=False, num_aux=2)
    draft = build_draft(spec, random_tensors(spec))
    embed = torch.randn(spec.vocab_size, spec.hidden_size)
    layout = (Tap(2), Tap(1))  # not sorted: the fc reads the taps in the layout's order
    seqs, refs = [], []
    for i, n in enumerate((20, 15)):
        gen = torch.Generator().manual_seed(i)
        states = {tap: torch.randn(n, 32, generator=gen) for tap in (Tap(0), Tap(1), Tap(2))}
        ids = torch.randint(0, 40, (n,), generator=gen)
        aux = torch.cat([states[Tap(2)], states[Tap(1)]], -1)
        # references = the reference draft's own step-0 tokens: step 0 always right
        _, logits = naive_matches(draft, aux, ids, 3, embed, ids, return_logits=True)
        target = ids.clone()
        target[1 : 1 + logits.shape[0]] = logits[:, 0].argmax(-1)
        refs.append(naive_matches(draft, aux, ids, 3, embed, target))
        seqs.append(Sequence(input_ids=ids, states=states, target_ids=target))
    cap = Capture(taps=(Tap(0), Tap(1), Tap(2)), sequences=seqs, hidden_size=32, embed_weight=embed)
    ev = evaluate_capture(draft, cap, layout, steps=3)
    assert ev.num_positions == (20 - 3) + (15 - 3)
    assert ev.accuracy[0] == ev.acceptance[0] == 1.0
    rows = [[bool(x) for x in row] for ref in refs for row in ref.tolist()]
    assert ev.accuracy == pytest.approx([sum(r[k] for r in rows) / len(rows) for k in range(3)])
    per_seq = [1 + sum(_leading(r) for r in ref.tolist()) / ref.shape[0] for ref in refs]
    assert ev.accept_length_per_sequence == pytest.approx(per_seq)
    assert ev.layout == (Tap(2), Tap(1))


def test_summarize_by_hand():
    m = torch.tensor([[1, 1, 0], [1, 0, 1], [0, 1, 1], [1, 1, 1]], dtype=torch.bool)
    s = summarize(m)
    assert s["num_positions"] == 4
    assert s["accuracy"] == pytest.approx([0.75, 0.75, 0.75])
    assert s["acceptance"] == pytest.approx([0.75, 0.5, 0.25])
    assert s["accept_length"] == pytest.approx(1 + (2 + 1 + 0 + 3) / 4)
    assert accept_length(s["acceptance"], 1) == pytest.approx(1.75)
    assert accept_length(s["acceptance"], 2) == pytest.approx(2.25)
    full = summarize(torch.ones(5, 3, dtype=torch.bool))
    assert full["accept_length"] == 4.0  # the maximum, S + 1
    assert summarize(torch.zeros(0, 3, dtype=torch.bool))["accept_length"] == 1.0


def test_served_rounds_replay_serving_not_every_position() -> None:
    from eagle3dash.metrics import served_rounds

    rows = torch.arange(5, 11)  # counted rows 5..10
    leading = torch.tensor([2, 0, 1, 3, 0, 0])  # leading correct steps at rows 5..10
    # Round at row 5 emits 1+2 tokens, the next drafts at row 8 and emits 1+3; row 12 is past
    # the end. Tokens count the one sampled at prefill.
    assert served_rounds(leading, rows, steps=3) == (1 + 3 + 4, 2)
    assert served_rounds(leading, rows, steps=2) == (1 + 3 + 3, 2)  # chains cut to 2 drafts
    assert served_rounds(leading[:0], rows[:0], steps=3) == (0, 0)


def test_served_histogram_counts_the_replayed_rounds_by_drafts_accepted() -> None:
    from eagle3dash.metrics import served_histogram

    rows = torch.arange(5, 11)
    leading = torch.tensor([2, 0, 1, 3, 0, 0])
    # the rounds above: 2 drafts accepted at row 5, 3 at row 8
    assert served_histogram(leading, rows, steps=3) == [0, 0, 1, 1]
    assert served_histogram(leading, rows, steps=2) == [0, 0, 2]  # 2 and min(3, 2)
    # a budget of 5 tokens: 1 + 3, then the round at row 8 cut to 1 token (no draft kept)
    assert served_histogram(leading, rows, steps=3, budget=5) == [1, 0, 1, 0]


def test_draft_eval_reports_served_accept_length_at_fewer_steps() -> None:
    from eagle3dash.metrics import build_eval

    matches = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    ev = build_eval([Tap(1)], [matches], steps=3, rows_per_sequence=[torch.arange(4)])
    # rows 0 (2 correct -> 3 tokens), 3 (1 correct -> 2 tokens): (1 + 3 + 2) / 2 rounds
    assert ev.served_accept_length == pytest.approx(3.0)
    assert ev.simulated_accept_length() == pytest.approx(3.0)
    assert ev.accept_length == pytest.approx(1 + (2 + 0 + 3 + 1) / 4)
    assert ev.served_accept_length_at(1) == pytest.approx((1 + 2 + 2) / 2)  # rows 0, 2
    assert ev.served_histogram_at(3) == [0, 1, 1, 0]  # the rounds at rows 0 and 3
    assert "chains" not in ev.to_dict()


def test_served_rounds_stop_at_the_budget_like_the_server() -> None:
    from eagle3dash.metrics import served_rounds

    rows = torch.arange(0, 20)
    leading = torch.full((20,), 3)  # every chain fully right: 4 tokens a round
    # 10 tokens: the prefill token, then rounds of 4, 4 and a last one cut to 1.
    assert served_rounds(leading, rows, steps=3, budget=10) == (10, 3)


def test_load_draft_takes_the_targets_embedding_as_sglang_does(tmp_path) -> None:
    from eagle3dash.checkpoint import save
    from eagle3dash.draft import load_draft
    from eagle3dash.testing.tensors import random_tensors

    spec = make_spec()
    path = save(spec, random_tensors(spec, seed=0, with_embed=True), tmp_path / "d", "specforge")
    assert load_draft(path).embed_tokens is not None  # nothing better at hand: its own
    target_embedding = torch.randn(spec.vocab_size, spec.hidden_size)
    assert load_draft(path, target_embedding=target_embedding).embed_tokens is None


# Rows with a correct step after a wrong one: only the leading run counts. Row by row, the
# leading correct steps are A 1, B 0, C 2, D 3, E 0, F 0 (a plain count of matches would give
# 2, 2, 2, 3, 0, 1).
SKIPPY = torch.tensor(
    [
        [1, 0, 1],  # A
        [0, 1, 1],  # B
        [1, 1, 0],  # C
        [1, 1, 1],  # D
        [0, 0, 0],  # E
        [0, 0, 1],  # F
    ],
    dtype=torch.bool,
)


def test_leading_correct_stops_at_the_first_wrong_step() -> None:
    from eagle3dash.metrics import leading_correct

    assert leading_correct(SKIPPY).tolist() == [1, 0, 2, 3, 0, 0]
    assert leading_correct(torch.zeros(0, 3, dtype=torch.bool)).tolist() == []


def test_summarize_counts_only_the_leading_run_for_acceptance() -> None:
    s = summarize(SKIPPY)
    assert s["num_positions"] == 6
    # step 0 right in A C D; step 1 in B C D; step 2 in A B D F
    assert s["accuracy"] == pytest.approx([3 / 6, 3 / 6, 4 / 6])
    # steps 0..k all right: k=0 A C D; k=1 C D; k=2 D
    assert s["acceptance"] == pytest.approx([3 / 6, 2 / 6, 1 / 6])
    assert s["accept_length"] == pytest.approx(2.0)  # 1 + (1+0+2+3+0+0)/6
    assert accept_length(s["acceptance"], 1) == pytest.approx(1.5)
    assert accept_length(s["acceptance"], 2) == pytest.approx(11 / 6)


def test_served_rounds_of_rows_right_after_a_wrong_step() -> None:
    from eagle3dash.metrics import leading_correct, served_rounds

    leading = leading_correct(SKIPPY)
    rows = torch.arange(6)
    # Row 0 (A) emits 1+1, the next round drafts at row 2 (C): 1+2, then row 5 (F): 1+0; row 6
    # is past the end. 1 prefill token + 2 + 3 + 1 over 3 rounds.
    assert served_rounds(leading, rows, steps=3) == (7, 3)
    # One draft token a round: rows 0 (2 tokens), 2 (2), 4 (1), 5 (1).
    assert served_rounds(leading, rows, steps=1) == (7, 4)
    # Budget 5: row 0 gives 2 (3 tokens), row 2 would give 3 but only 2 fit.
    assert served_rounds(leading, rows, steps=3, budget=5) == (5, 2)
    assert served_rounds(leading, rows, steps=3, budget=6) == (6, 2)


def test_build_eval_of_rows_right_after_a_wrong_step() -> None:
    ev = build_eval([Tap(1)], [SKIPPY], steps=3, rows_per_sequence=[torch.arange(6)])
    assert ev.accept_length_per_sequence == pytest.approx([2.0])
    assert ev.accept_length == pytest.approx(2.0)
    assert ev.served_accept_length == pytest.approx(7 / 3)
    assert ev.served_accept_length_at(1) == pytest.approx(7 / 4)
    capped = build_eval([Tap(1)], [SKIPPY], 3, rows_per_sequence=[torch.arange(6)], budget=5)
    assert capped.served_accept_length == pytest.approx(5 / 2)


@pytest.mark.parametrize("window", [None, 3])
def test_a_chain_rooted_at_the_last_row_alone_is_that_rows_chain(window):
    # The double drafts one round from the last row only; a bug in the row offset (keys of the
    # wrong positions, a window measured from row 0) changes its logits from the full chain's.
    spec = make_spec(num_layers=2, num_kv_heads=2, sliding_window=window)
    draft = build_draft(spec, random_tensors(spec, seed=5))
    aux, ids = random_inputs(spec, 23)
    g = draft.project(aux)
    every, every_logits = draft.chain(g, ids, 4, return_logits=True)
    last, last_logits = draft.chain(g, ids, 4, return_logits=True, last_only=True)
    assert last.shape == (1, 4) and last_logits is not None and every_logits is not None
    assert last.tolist() == every[-1:].tolist()
    torch.testing.assert_close(last_logits, every_logits[-1:], rtol=1e-5, atol=1e-5)
