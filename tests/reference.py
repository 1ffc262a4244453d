"""A naive, per-position reference for draft evaluation: a serving engine with an explicit KV cache.

Written independently of `eagle3dash.draft` (it only reads the draft's spec and state_dict):
for each root row t it extends the prefix KV cache with row t (step 0: fc(aux[t]) and tok[t+1] at
position t, one query over the cache), then decodes the chain steps 1..S-1 one token at a time,
each time writing its key/value into the cache slot of its position (scratch slots beyond the
prefix, as a serving engine's draft cache does; the next row's extend overwrites them). RoPE
inv_freq and scaling come from transformers' own ROPE_INIT_FUNCTIONS.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS


def _rms(x, w, eps):
    var = (x.float() ** 2).mean(-1, keepdim=True)
    return w * (x.float() / torch.sqrt(var + eps)).to(x.dtype)


def _rope_tables(spec):
    scaling = dict(spec.rope_scaling or {})
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind in ("default", "dynamic", "mrope"):
        base = scaling.get("rope_theta", spec.rope_theta)
        inv = 1.0 / base ** (torch.arange(0, spec.head_dim, 2).float() / spec.head_dim)
        return inv, 1.0
    cfg = LlamaConfig(
        hidden_size=spec.num_heads * spec.head_dim,
        num_attention_heads=spec.num_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings,
        rope_theta=spec.rope_theta,
        rope_scaling=scaling,
    )
    inv, scale = ROPE_INIT_FUNCTIONS[kind](cfg, None)
    return inv.float(), float(scale)


def _rope(x, pos, inv, scale):
    """x [n, hd] at integer position pos."""
    ang = pos * inv
    ang = torch.cat([ang, ang])
    cos, sin = torch.cos(ang) * scale, torch.sin(ang) * scale
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos.to(x.dtype) + rot * sin.to(x.dtype)


class _Engine:
    def __init__(self, draft, embed_weight, max_len):
        self.spec = spec = draft.spec
        self.w = {k: v for k, v in draft.state_dict().items()}
        if "embed_tokens.weight" in self.w:
            self.embed = self.w["embed_tokens.weight"]
        elif embed_weight is not None:
            self.embed = embed_weight.to(self.w["fc.weight"].dtype)
        else:
            raise ValueError("no embedding")
        self.inv, self.scale = _rope_tables(spec)
        nkv, hd = spec.num_kv_heads, spec.head_dim
        dt = self.w["fc.weight"].dtype
        self.K = [torch.zeros(max_len, nkv, hd, dtype=dt) for _ in range(spec.num_layers)]
        self.V = [torch.zeros(max_len, nkv, hd, dtype=dt) for _ in range(spec.num_layers)]

    def lin(self, name, x):
        y = x @ self.w[name + ".weight"].T
        if name + ".bias" in self.w:
            y = y + self.w[name + ".bias"]
        return y

    def fc(self, aux):
        s, w = self.spec, self.w
        x = aux
        if s.norm_before_fc:
            x = _rms(x, w["input_norm.weight"], s.rms_norm_eps)
        if s.fc_norm:
            ht = s.target_hidden_size
            x = torch.cat(
                [
                    _rms(x[i * ht : (i + 1) * ht], w[f"fc_norm.{i}.weight"], s.rms_norm_eps)
                    for i in range(s.num_aux)
                ]
            )
        return x @ w["fc.weight"].T

    def attention(self, layer, z, pos):
        """One query token at `pos`; writes its k/v at cache slot `pos`, attends to slots <= pos."""
        s = self.spec
        p = f"layers.{layer}.self_attn."
        q = self.lin(p + "q_proj", z).view(s.num_heads, s.head_dim)
        k = self.lin(p + "k_proj", z).view(s.num_kv_heads, s.head_dim)
        v = self.lin(p + "v_proj", z).view(s.num_kv_heads, s.head_dim)
        if s.qk_norm:
            q = _rms(q, self.w[p + "q_norm.weight"], s.rms_norm_eps)
            k = _rms(k, self.w[p + "k_norm.weight"], s.rms_norm_eps)
        q = _rope(q, pos, self.inv, self.scale)
        k = _rope(k, pos, self.inv, self.scale)
        self.K[layer][pos] = k
        self.V[layer][pos] = v
        first = 0
        if s.sliding_window is not None:
            first = max(0, pos - s.sliding_window + 1)
        keys = self.K[layer][first : pos + 1]  # [n, nkv, hd]
        vals = self.V[layer][first : pos + 1]
        group = s.num_heads // s.num_kv_heads
        keys = keys.repeat_interleave(group, dim=1)  # [n, nh, hd]
        vals = vals.repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,nhd->hn", q, keys).float() / math.sqrt(s.head_dim)
        probs = torch.softmax(scores, dim=-1).to(q.dtype)
        out = torch.einsum("hn,nhd->hd", probs, vals).reshape(-1)
        return out @ self.w[p + "o_proj.weight"].T

    def mlp(self, layer, x):
        p = f"layers.{layer}.mlp."
        act = {"silu": F.silu, "gelu": F.gelu}[self.spec.hidden_act]
        return self.lin(
            p + "down_proj", act(self.lin(p + "gate_proj", x)) * self.lin(p + "up_proj", x)
        )

    def token(self, hidden, tok, pos):
        """Run all layers for one token at `pos`: returns (logits [Vd], fed-back hidden [H])."""
        s, w, eps = self.spec, self.w, self.spec.rms_norm_eps
        e = self.embed[tok]
        hn = _rms(hidden, w["layers.0.hidden_norm.weight"], eps)
        z = torch.cat([_rms(e, w["layers.0.input_layernorm.weight"], eps), hn])
        h = (hn if s.norm_before_residual else hidden) + self.attention(0, z, pos)
        h = h + self.mlp(0, _rms(h, w["layers.0.post_attention_layernorm.weight"], eps))
        for i in range(1, s.num_layers):
            a = self.attention(i, _rms(h, w[f"layers.{i}.input_layernorm.weight"], eps), pos)
            h = h + a
            h = h + self.mlp(i, _rms(h, w[f"layers.{i}.post_attention_layernorm.weight"], eps))
        hn = _rms(h, w["norm.weight"], eps)
        logits = (hn if s.norm_before_lm_head else h) @ w["lm_head.weight"].T
        return logits, (hn if s.feedback_post_norm else h)

    def to_target(self, draft_id):
        if "d2t" in self.w:
            return draft_id + int(self.w["d2t"][draft_id])
        return draft_id


@torch.inference_mode()
def naive_matches(
    draft,
    aux,
    input_ids,
    steps=5,
    embed_weight=None,
    target_ids=None,
    loss_mask=None,
    return_logits=False,
):
    """matches [P, S] (and logits [P, S, Vd]) by running chains one row and one token at a time."""
    ids = [int(x) for x in input_ids.reshape(-1)]
    n = len(ids)
    ref = [int(x) for x in target_ids.reshape(-1)] if target_ids is not None else ids[1:]
    last_row = len(ref) - 1 - steps  # row t needs ref[t+1 .. t+steps]
    eng = _Engine(draft, embed_weight, max(n, 1) + steps + 1)
    aux = aux.to(eng.w["fc.weight"].dtype)
    mask = None if loss_mask is None else [bool(x) for x in loss_mask.reshape(-1)]
    rows, out_logits = [], []
    for t in range(last_row + 1):
        # extend: the prefix cache now holds rows 0..t (step 0 keys at positions 0..t)
        logits, hidden = eng.token(eng.fc(aux[t]), ids[t + 1], t)
        chain_logits = [logits]
        # the chain: each step feeds the previous draft token (as a target id)
        for k in range(1, steps):
            tok = eng.to_target(int(torch.argmax(logits)))
            logits, hidden = eng.token(hidden, tok, t + k)
            chain_logits.append(logits)
        counted = mask is None or (t + 2 < len(mask) and mask[t + 2])
        if not counted:
            continue
        preds = [eng.to_target(int(torch.argmax(lg))) for lg in chain_logits]
        rows.append([preds[k] == ref[t + 1 + k] for k in range(steps)])
        out_logits.append(torch.stack(chain_logits).float())
    matches = torch.tensor(rows, dtype=torch.bool).reshape(-1, steps)
    if return_logits:
        vd = eng.w["lm_head.weight"].shape[0]
        logits_t = torch.stack(out_logits) if out_logits else torch.zeros(0, steps, vd)
        return matches, logits_t
    return matches
