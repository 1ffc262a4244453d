"""The EAGLE-3 draft as plain torch modules, and its batched chain (TTT) evaluation.

Written in the style of gpt-fast's `model.py`: a handful of small modules whose parameter names are
the canonical tensor names of `spec.expected_shapes`, so `build_draft(spec, tensors)` loads what
`checkpoint.load` returns directly. The computation is the unified one of
SpecForge 0.2 `specforge/modeling/draft/llama3_eagle.py` and speculators 0.9
`speculators/models/eagle3/core.py` (tests/test_draft.py checks it against a reference):

    g    = fc(fc_norm(input_norm(aux[t])))                        # [H], optional norms
    z    = cat(input_layernorm(embed(tok)), hidden_norm(g))       # [2H], embedding first
    res  = hidden_norm(g) if norm_before_residual else g
    h    = res + o_proj(attn(z)); h = h + mlp(post_attention_layernorm(h))
    (layers i > 0: standard pre-norm decoder layers over H)
    logits = lm_head(norm(h))  (lm_head(h) if not norm_before_lm_head)
    next g = norm(h) if feedback_post_norm else h

`evaluate` runs greedy chain drafting, as a serving engine does, for every position of a sequence
at once: step k of all rows is one batched forward whose attention covers the step-0 keys of
earlier rows (causal) plus the row's own keys of steps 1..k (the TTT "diagonal", i.e. the chain's
own KV cache).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .spec import OPTIONAL_TENSORS, DraftSpec, expected_shapes

if TYPE_CHECKING:
    from .capture import Capture
    from .checkpoint import InspectReport
    from .layout import Layout
    from .metrics import DraftEval

__all__ = [
    "Attention",
    "DecoderLayer",
    "Draft",
    "MLP",
    "RMSNorm",
    "RotaryEmbedding",
    "build_draft",
    "load_draft",
    "evaluate",
    "evaluate_capture",
    "counted_rows",
    "rope_parameters",
]

ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "silu": F.silu,
    "swish": F.silu,
    "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


# --------------------------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------------------------


# Serving gives a draft without embed_tokens the target's embedding (SGLang's set_embed).
NO_EMBEDDING = (
    "this draft has no embed_tokens (serving gives it the target's): pass the target's "
    "embedding (CLI: eval --target PATH, or a capture that stores it)"
)


class RMSNorm(nn.Module):
    """`w * (x.float() * rsqrt(mean(x^2) + eps)).to(dtype)`, as Llama/SpecForge/speculators."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rope_parameters(spec: DraftSpec) -> tuple[Tensor, float]:
    """(inv_freq [hd/2] float32, attention_scaling) for the draft's RoPE, as transformers computes.

    Supports no scaling ("default", and "dynamic"/"mrope", which equal it for text positions below
    max_position_embeddings), "linear", "llama3" and "yarn"; accepts `rope_type` or the legacy
    `type` key. Mirrors transformers 5 `modeling_rope_utils` (`_compute_*_parameters`).
    """
    scaling = dict(spec.rope_scaling or {})
    rope_type = scaling.get("rope_type") or scaling.get("type") or "default"
    base = float(scaling.get("rope_theta") or spec.rope_theta)
    dim = spec.head_dim
    exponents = torch.arange(0, dim, 2, dtype=torch.int64, device="cpu").float() / dim  # [hd/2]
    inv_freq = 1.0 / (base**exponents)
    if rope_type in ("default", "dynamic", "mrope"):
        return inv_freq, 1.0
    if rope_type == "linear":
        return inv_freq / float(scaling["factor"]), 1.0
    if rope_type == "llama3":
        factor = float(scaling["factor"])
        low_ff = float(scaling.get("low_freq_factor", 1.0))
        high_ff = float(scaling.get("high_freq_factor", 4.0))
        old_ctx = float(
            scaling.get("original_max_position_embeddings") or spec.max_position_embeddings
        )
        low_wl, high_wl = old_ctx / low_ff, old_ctx / high_ff
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wl, inv_freq / factor, inv_freq)
        smooth = (old_ctx / wavelen - low_ff) / (high_ff - low_ff)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
        return torch.where(medium, smoothed, scaled), 1.0
    if rope_type == "yarn":
        orig = scaling.get("original_max_position_embeddings") or spec.max_position_embeddings
        given = scaling.get("factor")
        factor = float(given) if given is not None else spec.max_position_embeddings / orig

        def mscale_of(scale: float, m: float = 1.0) -> float:
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        attention_factor = scaling.get("attention_factor")
        mscale, mscale_all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
        if attention_factor is None:
            if mscale and mscale_all_dim:
                attention_factor = mscale_of(factor, mscale) / mscale_of(factor, mscale_all_dim)
            else:
                attention_factor = mscale_of(factor)
        beta_fast = scaling.get("beta_fast") or 32
        beta_slow = scaling.get("beta_slow") or 1

        def correction_dim(rotations: float) -> float:
            return (dim * math.log(orig / (rotations * 2 * math.pi))) / (2 * math.log(base))

        low, high = correction_dim(beta_fast), correction_dim(beta_slow)
        if scaling.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = (
            (torch.arange(dim // 2, dtype=torch.float32, device="cpu") - low) / (high - low)
        ).clamp(0, 1)
        extrapolation = 1 - ramp
        pos_freqs = base ** (torch.arange(0, dim, 2, device="cpu").float() / dim)
        inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
        return inv, float(attention_factor)
    raise ValueError(
        f"unsupported rope_scaling type {rope_type!r} (supported: linear, llama3, yarn)"
    )


class RotaryEmbedding(nn.Module):
    """cos/sin tables for integer positions; holds no state_dict entries."""

    def __init__(self, spec: DraftSpec):
        super().__init__()
        inv_freq, self.attention_scaling = rope_parameters(spec)
        self._inv_freq = inv_freq  # [hd/2] float32, kept out of the state_dict
        self._cache: dict[torch.device, Tensor] = {}

    def inv_freq(self, device: torch.device) -> Tensor:
        if device not in self._cache:
            self._cache[device] = self._inv_freq.to(device)
        return self._cache[device]

    def forward(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        freqs = positions.float()[:, None] * self.inv_freq(positions.device)[None, :]  # [T, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [T, hd]
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype), sin.to(dtype)


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [T, n, hd], cos/sin [T, hd]."""
    return x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]


@dataclass
class LayerKV:
    """One layer's keys/values in a chain evaluation: step 0 of every row, and the diagonal."""

    k0: Tensor | None = None  # [nkv, R, hd]
    v0: Tensor | None = None  # [nkv, R, hd]
    diag_k: list[Tensor] = field(default_factory=list)  # steps 1..k, each [R, nkv, hd]
    diag_v: list[Tensor] = field(default_factory=list)


def attend_chain(
    q: Tensor, kv: LayerKV, step: int, window: int | None, chunk: int, scale: float
) -> Tensor:
    """TTT attention of step `step` for all rows at once. q [R, nh, hd] -> [R, nh, hd].

    Row t, step k (RoPE position t+k) sees step-0 keys of rows s <= t (position s) and its own
    keys of steps 1..k (positions t+1..t+k); with a sliding window W only keys at positions
    p > (t+k) - W. Softmax runs in float32 over the union. Rows are processed in chunks so the
    score block is [nkv, g, chunk, keys]. When q holds fewer rows than the step-0 keys, they are
    the last rows (a chain rooted at the last rows only).
    """
    assert kv.k0 is not None and kv.v0 is not None
    R, nh, hd = q.shape
    nkv = kv.k0.shape[0]
    row0 = kv.k0.shape[1] - R  # the position of q's first row
    g = nh // nkv
    qh = q.reshape(R, nkv, g, hd).permute(1, 2, 0, 3)  # [nkv, g, R, hd]
    out = torch.empty_like(q)  # [R, nh, hd]
    diag_k = [d.permute(1, 0, 2)[:, None] for d in kv.diag_k]  # each [nkv, 1, R, hd]
    diag_v = [d.permute(1, 0, 2)[:, None] for d in kv.diag_v]
    # diagonal key j sits at position t+j: visible iff k - j < W
    diag_ok = [window is None or step - j < window for j in range(1, step + 1)]
    for c0 in range(0, R, chunk):
        c1 = min(R, c0 + chunk)
        C = c1 - c0
        p0, p1 = row0 + c0, row0 + c1  # the chunk's rows as positions of the step-0 keys
        lo = 0 if window is None else max(0, p0 + step - window + 1)
        qc = qh[:, :, c0:c1]  # [nkv, g, C, hd]
        kc = kv.k0[:, lo:p1]  # [nkv, K, hd]
        vc = kv.v0[:, lo:p1]
        K = kc.shape[1]
        # one matmul per kv head over all its g query heads: no copies of K for GQA
        scores = torch.matmul(qc.reshape(nkv, g * C, hd), kc.transpose(-1, -2))  # [nkv, gC, K]
        scores = scores.view(nkv, g, C, K).float() * scale
        rows = torch.arange(p0, p1, device=q.device)[:, None]  # [C, 1]
        keys = torch.arange(lo, p1, device=q.device)[None, :]  # [1, K]
        allowed = keys <= rows
        if window is not None:
            allowed = allowed & (rows + step - keys < window)
        scores = scores.masked_fill(~allowed, float("-inf"))
        if step:
            diag = [
                (qc.float() * dk[:, :, c0:c1].float()).sum(-1) * scale
                if ok
                else torch.full(qc.shape[:-1], float("-inf"), device=q.device)
                for dk, ok in zip(diag_k, diag_ok, strict=True)
            ]  # each [nkv, g, C]
            scores = torch.cat([scores, torch.stack(diag, dim=-1)], dim=-1)  # [nkv,g,C,K+k]
        probs = scores.softmax(dim=-1).to(q.dtype)
        o = torch.matmul(probs[..., :K].reshape(nkv, g * C, K), vc).view(nkv, g, C, hd)
        for j, dv in enumerate(diag_v):
            o = o + probs[..., K + j, None] * dv[:, :, c0:c1]
        out[c0:c1] = o.permute(2, 0, 1, 3).reshape(C, nh, hd)
    return out


class Attention(nn.Module):
    """GQA self-attention over a width `in_dim` input (2H in layer 0, H after)."""

    def __init__(self, spec: DraftSpec, in_dim: int):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = (
            spec.num_heads,
            spec.num_kv_heads,
            spec.head_dim,
        )
        q_out, kv_out = spec.num_heads * spec.head_dim, spec.num_kv_heads * spec.head_dim
        bias = spec.attention_bias
        self.q_proj = nn.Linear(in_dim, q_out, bias=bias)
        self.k_proj = nn.Linear(in_dim, kv_out, bias=bias)
        self.v_proj = nn.Linear(in_dim, kv_out, bias=bias)
        self.o_proj = nn.Linear(q_out, spec.hidden_size, bias=False)
        self.q_norm = RMSNorm(spec.head_dim, spec.rms_norm_eps) if spec.qk_norm else None
        self.k_norm = RMSNorm(spec.head_dim, spec.rms_norm_eps) if spec.qk_norm else None
        self.scale = spec.head_dim**-0.5
        self.window = spec.sliding_window

    def qkv(self, z: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """z [T, in] -> q [T, nh, hd], k [T, nkv, hd], v [T, nkv, hd], RoPE applied."""
        T = z.shape[0]
        q = self.q_proj(z).view(T, self.num_heads, self.head_dim)
        k = self.k_proj(z).view(T, self.num_kv_heads, self.head_dim)
        v = self.v_proj(z).view(T, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:  # qwen3: per-head norm pre-RoPE
            q, k = self.q_norm(q), self.k_norm(k)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def forward(
        self, z: Tensor, cos: Tensor, sin: Tensor, kv: LayerKV, step: int, chunk: int
    ) -> Tensor:
        """One chain step for all rows; appends this step's keys/values to `kv`. -> [T, H]."""
        q, k, v = self.qkv(z, cos, sin)
        if step == 0:
            kv.k0, kv.v0 = k.transpose(0, 1).contiguous(), v.transpose(0, 1).contiguous()
        else:
            kv.diag_k.append(k)
            kv.diag_v.append(v)
        o = attend_chain(q, kv, step, self.window, chunk, self.scale)  # [T, nh, hd]
        return self.o_proj(o.reshape(z.shape[0], -1))


class MLP(nn.Module):
    """SwiGLU: down(act(gate(x)) * up(x))."""

    def __init__(self, spec: DraftSpec):
        super().__init__()
        if spec.hidden_act not in ACTIVATIONS:
            raise ValueError(f"unsupported hidden_act {spec.hidden_act!r}")
        self.act = ACTIVATIONS[spec.hidden_act]
        self.gate_proj = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=False)
        self.up_proj = nn.Linear(spec.hidden_size, spec.intermediate_size, bias=False)
        self.down_proj = nn.Linear(spec.intermediate_size, spec.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Layer 0 reads cat(input_layernorm(embed), hidden_norm(g)) [2H]; layers > 0 are pre-norm."""

    def __init__(self, spec: DraftSpec, index: int):
        super().__init__()
        H = spec.hidden_size
        self.index = index
        self.norm_before_residual = spec.norm_before_residual
        self.input_layernorm = RMSNorm(H, spec.rms_norm_eps)
        self.hidden_norm = RMSNorm(H, spec.rms_norm_eps) if index == 0 else None
        self.self_attn = Attention(spec, 2 * H if index == 0 else H)
        self.post_attention_layernorm = RMSNorm(H, spec.rms_norm_eps)
        self.mlp = MLP(spec)

    def attn_input(self, h: Tensor, emb: Tensor | None) -> tuple[Tensor, Tensor]:
        """(attention input z, residual). Layer 0: h is the fed hidden g, emb the embedding."""
        if self.hidden_norm is None:
            return self.input_layernorm(h), h
        assert emb is not None
        hn = self.hidden_norm(h)  # [T, H]
        z = torch.cat([self.input_layernorm(emb), hn], dim=-1)  # [T, 2H], embedding first
        return z, (hn if self.norm_before_residual else h)

    def forward(
        self,
        h: Tensor,
        cos: Tensor,
        sin: Tensor,
        kv: LayerKV,
        step: int,
        emb: Tensor | None = None,
        chunk: int = 256,
    ) -> Tensor:
        z, residual = self.attn_input(h, emb)
        h = residual + self.self_attn(z, cos, sin, kv, step, chunk)  # [T, H]
        return h + self.mlp(self.post_attention_layernorm(h))


class Draft(nn.Module):
    """An EAGLE-3 draft. Parameter names equal `spec.expected_shapes` names."""

    def __init__(
        self,
        spec: DraftSpec,
        *,
        has_embed: bool | None = None,
        has_d2t: bool | None = None,
        has_t2d: bool | None = None,
    ):
        super().__init__()
        self.spec = spec
        H, Ht, A = spec.hidden_size, spec.target_hidden_size, spec.num_aux
        eps = spec.rms_norm_eps
        self.input_norm = RMSNorm(A * Ht, eps) if spec.norm_before_fc else None
        self.fc_norm = nn.ModuleList(RMSNorm(Ht, eps) for _ in range(A)) if spec.fc_norm else None
        self.fc = nn.Linear(A * Ht, H, bias=False)
        self.layers = nn.ModuleList(DecoderLayer(spec, i) for i in range(spec.num_layers))
        self.norm = RMSNorm(H, eps)
        self.lm_head = nn.Linear(H, spec.draft_vocab_size, bias=False)
        embed = spec.has_embed if has_embed is None else has_embed
        self.embed_tokens = nn.Embedding(spec.vocab_size, H) if embed else None
        if spec.has_d2t if has_d2t is None else has_d2t:
            self.register_buffer("d2t", torch.zeros(spec.draft_vocab_size, dtype=torch.int64))
        else:
            self.d2t = None
        if spec.has_t2d if has_t2d is None else has_t2d:
            self.register_buffer("t2d", torch.zeros(spec.vocab_size, dtype=torch.bool))
        else:
            self.t2d = None
        self.rotary = RotaryEmbedding(spec)

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    def project(self, aux: Tensor) -> Tensor:
        """aux [T, A*Ht] -> g [T, H]: input_norm (norm_before_fc), per-slot fc_norm, fc."""
        x = aux
        if self.input_norm is not None:
            x = self.input_norm(x)
        if self.fc_norm is not None:
            chunks = x.chunk(len(self.fc_norm), dim=-1)
            x = torch.cat([n(c) for n, c in zip(self.fc_norm, chunks, strict=True)], dim=-1)
        return self.fc(x)

    def embed(self, ids: Tensor, embed_weight: Tensor | None = None) -> Tensor:
        """Target-vocab ids [T] -> [T, H], from embed_tokens or else the target's embedding."""
        if self.embed_tokens is not None:
            return self.embed_tokens(ids.to(self.device))
        if embed_weight is None:
            raise ValueError(NO_EMBEDDING)
        return embed_weight[ids.to(embed_weight.device)].to(self.device, self.dtype)

    def logits(self, h: Tensor) -> Tensor:
        """Layer output [T, H] -> draft-vocab logits [T, Vd]."""
        return self.lm_head(self.norm(h) if self.spec.norm_before_lm_head else h)

    def feedback(self, h: Tensor) -> Tensor:
        """The hidden fed to the next chain step: post-norm if feedback_post_norm else pre-norm."""
        return self.norm(h) if self.spec.feedback_post_norm else h

    def to_target(self, draft_ids: Tensor) -> Tensor:
        """Draft-vocab ids -> target-vocab ids: i + d2t[i] (identity without d2t)."""
        return draft_ids if self.d2t is None else draft_ids + self.d2t[draft_ids]

    def chain(
        self,
        g: Tensor,
        tokens: Tensor,
        steps: int,
        embed_weight: Tensor | None = None,
        chunk: int = 256,
        return_logits: bool = False,
        last_only: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Greedy chain drafting rooted at every row at once.

        g [R, H] fed hiddens (fc output), tokens [R] the step-0 input tokens (tok[t+1]); row t
        has RoPE position t at step 0. Returns (predicted target ids [R, S], logits [R, S, Vd] or
        None). `last_only`: the chain rooted at the last row alone ([1, S]), as a server drafts
        one round: every row's step 0 (their keys), the later steps for the last row only.
        """
        positions = torch.arange(g.shape[0], device=self.device)
        kvs = [LayerKV() for _ in self.layers]
        columns: list[Tensor] = []
        all_logits: list[Tensor] = []
        h_in, tok = g, tokens
        for k in range(steps):
            cos, sin = self.rotary(positions + k, self.dtype)  # [R, hd]
            emb = self.embed(tok, embed_weight)  # [R, H]
            h = h_in
            for layer, kv in zip(self.layers, kvs, strict=True):
                h = layer(h, cos, sin, kv, k, emb=emb if layer.index == 0 else None, chunk=chunk)
            logits = self.logits(h)  # [R, Vd]
            tok = self.to_target(logits.argmax(dim=-1))  # [R] target ids
            columns.append(tok)
            if return_logits:
                all_logits.append(logits.float())
            h_in = self.feedback(h)
            if last_only and k == 0:
                h_in, tok, positions = h_in[-1:], tok[-1:], positions[-1:]
        rows = tok.shape[0] if columns else g.shape[0]
        preds = (
            torch.stack([c[-rows:] for c in columns], dim=1)
            if columns
            else torch.empty(rows, 0, dtype=torch.int64, device=self.device)
        )
        logits_out = torch.stack([x[-rows:] for x in all_logits], dim=1) if return_logits else None
        return preds, logits_out


def build_draft(
    spec: DraftSpec,
    tensors: dict[str, Tensor],
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> Draft:
    """A Draft in eval mode holding `tensors` (canonical names; embed_tokens, d2t, t2d optional)."""
    shapes = expected_shapes(spec)
    required = {n for n in shapes if n not in OPTIONAL_TENSORS}
    missing = sorted(required - set(tensors))
    unexpected = sorted(set(tensors) - set(shapes))
    wrong = sorted(
        f"{n} {tuple(t.shape)} != {shapes[n]}"
        for n, t in tensors.items()
        if n in shapes and tuple(t.shape) != shapes[n]
    )
    if missing or unexpected or wrong:
        raise ValueError(
            "tensors do not match the draft spec: "
            + "; ".join(
                part
                for part in (
                    f"missing {missing}" if missing else "",
                    f"unexpected {unexpected}" if unexpected else "",
                    f"wrong shapes {wrong}" if wrong else "",
                )
                if part
            )
        )
    with torch.device("meta"):
        draft = Draft(
            spec,
            has_embed="embed_tokens.weight" in tensors,
            has_d2t="d2t" in tensors,
            has_t2d="t2d" in tensors,
        )
    state = {
        n: t.to(device=device, dtype=dtype if t.is_floating_point() else t.dtype)
        for n, t in tensors.items()
    }
    if "d2t" in state:
        state["d2t"] = state["d2t"].to(torch.int64)
    if "t2d" in state:
        state["t2d"] = state["t2d"].to(torch.bool)
    draft.load_state_dict(state, strict=True, assign=True)
    return draft.eval().requires_grad_(False)


def load_draft_reported(
    path: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    target_embedding: Tensor | None = None,
) -> tuple[Draft, InspectReport]:
    """A draft checkpoint built the way SGLang runs it, and the load's report (NaN/Inf tensors,
    d2t problems: what only reading the tensor data finds).

    SGLang replaces the draft's own embedding with the target's (set_embed) when the widths match,
    so with the target's embedding at hand the draft's own is dropped and evaluations pass the
    target's instead.
    """
    from .checkpoint import load

    spec, tensors, report = load(path)
    if target_embedding is not None and spec.target_hidden_size == spec.hidden_size:
        tensors.pop("embed_tokens.weight", None)
        spec = replace(spec, has_embed=False)
    return build_draft(spec, tensors, device=device, dtype=dtype), report


def load_draft(
    path: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    target_embedding: Tensor | None = None,
) -> Draft:
    """`load_draft_reported` without the report."""
    return load_draft_reported(path, device, dtype, target_embedding)[0]


# --------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------


def counted_rows(
    length: int, steps: int, has_target_ids: bool, loss_mask: Tensor | None = None
) -> tuple[int, Tensor]:
    """(R, rows): R = rows to compute (0..R-1), rows = indices counted in the metrics.

    ref[j] exists for j <= L-1 with target_ids, else j <= L-2 (ref[j] = tok[j+1]). Row t needs
    ref[t+1..t+S], so t <= last_ref - S. With a loss mask, row t counts only if
    loss_mask[t+2] (the token its step 0 predicts) is on; out of range counts as off.
    """
    last_ref = length - 1 if has_target_ids else length - 2
    R = max(0, last_ref - steps + 1)
    rows = torch.arange(R)
    if loss_mask is not None and R:
        lm = loss_mask.reshape(-1).to("cpu").bool()
        idx = rows + 2
        on = torch.zeros(R, dtype=torch.bool)
        inside = idx < lm.shape[0]
        on[inside] = lm[idx[inside]]
        rows = rows[on]
    return R, rows


@torch.inference_mode()
def evaluate(
    draft: Draft,
    states: Tensor,
    input_ids: Tensor,
    steps: int = 5,
    embed_weight: Tensor | None = None,
    target_ids: Tensor | None = None,
    loss_mask: Tensor | None = None,
    chunk: int = 256,
    return_logits: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Greedy chain drafting at every position of ONE sequence, batched TTT-style.

    states [L, A*Ht] aux (taps concatenated in layout order), input_ids [L] target-vocab ids,
    target_ids [L] the target's greedy next token after each position (default: the data's own
    next token), loss_mask [L]. Row t: step 0 feeds fc(aux[t]) and tok[t+1] at position t and
    predicts ref[t+1]; step k feeds the step k-1 feedback and the draft's own step k-1 token
    (mapped to target ids) at position t+k and predicts ref[t+1+k].

    Returns matches [P, S] bool over the counted rows (see `counted_rows`), and with
    return_logits also their draft-vocab logits [P, S, Vd] (float32).
    """
    if steps < 1:
        raise ValueError("steps must be >= 1")
    if draft.embed_tokens is None and embed_weight is None:
        raise ValueError(NO_EMBEDDING)
    ids = input_ids.reshape(-1).to(torch.int64)
    L = ids.shape[0]
    if states.shape[0] != L:
        raise ValueError(f"states have {states.shape[0]} rows but input_ids has {L}")
    width = draft.fc.weight.shape[1]
    if states.shape[-1] != width:
        raise ValueError(f"states are {states.shape[-1]} wide but the draft's fc reads {width}")
    R, rows = counted_rows(L, steps, target_ids is not None, loss_mask)
    vd = draft.lm_head.weight.shape[0]
    if R == 0:
        empty = torch.zeros(0, steps, dtype=torch.bool)
        return (empty, torch.zeros(0, steps, vd)) if return_logits else empty
    device = draft.device
    ref = (target_ids.reshape(-1).to(torch.int64) if target_ids is not None else ids[1:]).to(device)
    g = draft.project(states[:R].to(device, draft.dtype))  # [R, H]
    preds, logits = draft.chain(
        g, ids[1 : R + 1].to(device), steps, embed_weight, chunk, return_logits
    )  # [R, S]
    ref_idx = torch.arange(R, device=device)[:, None] + 1 + torch.arange(steps, device=device)
    matches = (preds == ref[ref_idx]).cpu()[rows]  # [P, S]
    if return_logits:
        assert logits is not None
        return matches, logits.cpu()[rows]
    return matches


@torch.inference_mode()
def _check_token_ids(capture: Capture, draft: Draft, embed_weight: Tensor | None) -> None:
    """Every token id of the capture inside the embedding the draft reads: a capture made with
    another tokenizer or model is one message, not an IndexError."""
    from .capture import CaptureError

    table = draft.embed_tokens.weight if draft.embed_tokens is not None else embed_weight
    if table is None:
        return
    vocab = int(table.shape[0])
    for i, seq in enumerate(capture.sequences):
        ids = seq.input_ids
        bad = ids[(ids < 0) | (ids >= vocab)]
        if bad.numel():
            raise CaptureError(
                f"{capture.source}: sequence {i} has token ids {bad[:5].tolist()} outside the "
                f"vocabulary of {vocab} tokens: the capture was made with another tokenizer or "
                "target than this draft's"
            )


def evaluate_capture(
    draft: Draft,
    capture: Capture,
    layout: Layout,
    steps: int = 5,
    embed_weight: Tensor | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    chunk: int = 256,
    progress: Callable[[int, int], None] | None = None,
) -> DraftEval:
    """`evaluate` over every sequence of a capture fed with `layout`'s taps -> DraftEval.

    The embedding comes from the draft, else `embed_weight`, else the capture's stored target
    embedding. `device`/`dtype` move the draft (default: leave it where it is).
    """
    from .metrics import build_eval

    if device is not None or dtype is not None:
        draft = draft.to(device=device or draft.device, dtype=dtype or draft.dtype)
    layout = tuple(layout)
    spec = draft.spec
    if len(layout) != spec.num_aux:
        raise ValueError(
            f"layout has {len(layout)} taps but the draft's fc has {spec.num_aux} slots"
        )
    if capture.hidden_size != spec.target_hidden_size:
        raise ValueError(
            f"capture hidden size {capture.hidden_size} != draft target_hidden_size "
            f"{spec.target_hidden_size}"
        )
    if embed_weight is None and draft.embed_tokens is None:
        embed_weight = capture.embed_weight
    if embed_weight is not None and embed_weight.device.type != "cpu":
        embed_weight = embed_weight.to(draft.device)
    _check_token_ids(capture, draft, embed_weight)
    per_sequence: list[Tensor] = []
    rows_per_sequence = []
    n = len(capture.sequences)
    for i, seq in enumerate(capture.sequences):
        _, rows = counted_rows(len(seq.input_ids), steps, seq.target_ids is not None, seq.loss_mask)
        rows_per_sequence.append(rows)
        m = evaluate(
            draft,
            capture.aux(i, layout),
            seq.input_ids,
            steps=steps,
            embed_weight=embed_weight,
            target_ids=seq.target_ids,
            loss_mask=seq.loss_mask,
            chunk=chunk,
        )
        assert isinstance(m, Tensor)  # without return_logits: the matches alone
        per_sequence.append(m)
        if progress is not None:
            progress(i + 1, n)
    budget = capture.meta.get("served_tokens")
    return build_eval(layout, per_sequence, steps, rows_per_sequence, budget)
