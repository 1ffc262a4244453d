"""Training for the demo: the tiny target, its no-op 4th block, and EAGLE-3 drafts with TTT.

The drafts are the package's own `draft.Draft` modules: `ttt_forward` is a batched,
differentiable version of `Draft.chain` (the evaluator's forward, which runs one sequence at a
time under inference mode) that calls the same submodules with the same math, and takes the step
k >= 1 input tokens from the caller (teacher forcing) instead of the draft's own argmax. With the
draft's own argmax as those tokens it reproduces `Draft.chain` (tests/test_demo.py checks it).

TTT, SpecForge layout, S unrolled steps: row t (the position whose aux states are fed) at step 0
reads fc(aux[t]) and token t+1 at RoPE position t; step k >= 1 reads the layer's own pre-norm
output of step k-1 and the step-k input token at position t+k, and attends to the causal step-0
keys (rows s <= t) plus its own keys of steps 1..k. Step k predicts the target's token after
position t+1+k; the loss is a soft cross-entropy against the target's distribution there, with
step weights 0.8^k.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..draft import DecoderLayer, Draft, rotate_half
from ..spec import DraftSpec
from .language import LENGTH, VOCAB, Stream, gen_batch

__all__ = [
    "TARGET",
    "DRAFT",
    "append_noop_block",
    "draft_spec",
    "lr_lambda",
    "step_tokens",
    "target_config",
    "train_draft",
    "train_target",
    "ttt_forward",
    "ttt_loss",
]

# Hyperparameters of the demo's recipe (build.py's docstring says what it builds); the target and
# the drafts share the optimizer's
OPTIMIZER: dict[str, Any] = {
    "lr": 3e-3,
    "betas": (0.9, 0.95),
    "weight_decay": 0.01,
    "warmup": 0.05,
    "min_lr_ratio": 0.1,
    "clip": 1.0,
}
TARGET: dict[str, Any] = {
    "num_layers": 3,
    "hidden_size": 128,
    "num_heads": 4,
    "intermediate_size": 256,
    "vocab_size": VOCAB,
    "rms_norm_eps": 1e-5,
    "init_seed": 0,
    "steps": 1000,
    "batch": 32,
    "length": LENGTH,
    **OPTIMIZER,
    "monitor_every": 100,
    "monitor_batch": 64,
}
DRAFT: dict[str, Any] = {
    "intermediate_size": 512,
    "init_seed": 1,
    "ttt_steps": 4,
    "step_weight": 0.8,
    "steps": 500,  # the recipe's 250 left draft B at 65% top-1 here (see build.py)
    "batch": 32,
    "length": LENGTH,
    **OPTIMIZER,
    "monitor_every": 50,
    "monitor_batch": 16,
}

Progress = Callable[[str], None]


def _optimizer_step(loss: Tensor, opt, sched, params, hp: dict[str, Any], step: int) -> int:
    """One step of the recipe's optimizer (gradients clipped, then the schedule); the steps done."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, hp["clip"])
    opt.step()
    sched.step()
    return step + 1


def lr_lambda(total: int, warmup: float, min_ratio: float) -> Callable[[int], float]:
    """Linear warmup over `warmup` of the steps, then cosine from 1 to `min_ratio`."""
    n_warm = max(1, round(warmup * total))

    def f(step: int) -> float:
        if step < n_warm:
            return (step + 1) / n_warm
        frac = (step - n_warm) / max(1, total - n_warm)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))

    return f


def _adamw(params: list[torch.nn.Parameter], hp: dict) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on norm gains)."""
    decay = [p for p in params if p.dim() >= 2]
    other = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": hp["weight_decay"]}]
    if other:
        groups.append({"params": other, "weight_decay": 0.0})
    return torch.optim.AdamW(groups, lr=hp["lr"], betas=hp["betas"])


def _quiet_transformers() -> None:
    """No weight-loading progress bars in build logs."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


# ---------------------------------------------------------------------------------------------
# The target


def target_config(num_layers: int = TARGET["num_layers"]):
    """The demo target's LlamaConfig: untied, BOS 0, no EOS (the language has none)."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=TARGET["vocab_size"],
        hidden_size=TARGET["hidden_size"],
        intermediate_size=TARGET["intermediate_size"],
        num_hidden_layers=num_layers,
        num_attention_heads=TARGET["num_heads"],
        num_key_value_heads=TARGET["num_heads"],
        max_position_embeddings=2048,
        rms_norm_eps=TARGET["rms_norm_eps"],
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=None,
        pad_token_id=None,
        architectures=["LlamaForCausalLM"],
    )


@torch.no_grad()
def target_accuracy(model, tokens: np.ndarray, copy: np.ndarray) -> dict:
    """Next-token accuracy of `model` overall, on copy positions and on fresh positions."""
    ids = torch.from_numpy(tokens)
    pred = model(input_ids=ids, use_cache=False).logits[:, :-1].argmax(-1)
    hit = (pred == ids[:, 1:]).numpy()
    cp = copy[:, 1:]
    return {
        "accuracy": float(hit.mean()),
        "copy_accuracy": float(hit[cp].mean()),
        "fresh_accuracy": float(hit[~cp].mean()),
    }


def train_target(progress: Progress = print, steps: int | None = None) -> tuple[object, dict]:
    """Train the 3-layer target (recipe hyperparameters) -> (model in eval mode, log dict)."""
    from transformers import LlamaForCausalLM

    hp = dict(TARGET)
    if steps is not None:
        hp["steps"] = steps
    torch.manual_seed(hp["init_seed"])
    model = LlamaForCausalLM(target_config())
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = _adamw(params, hp)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lr_lambda(hp["steps"], hp["warmup"], hp["min_lr_ratio"])
    )
    from .language import STREAMS

    stream = Stream(STREAMS["target_train"], hp["batch"], hp["length"])
    monitor = gen_batch(np.random.default_rng(STREAMS["target_monitor"]), hp["monitor_batch"])
    history = []
    t0 = time.perf_counter()
    for step in range(hp["steps"]):
        ids = torch.from_numpy(stream.next()[0])
        logits = model(input_ids=ids, use_cache=False).logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        done = _optimizer_step(loss, opt, sched, params, hp, step)
        if done % hp["monitor_every"] == 0 or done == hp["steps"]:
            model.eval()
            acc = target_accuracy(model, *monitor)
            model.train()
            entry = {"step": done, "loss": loss.item(), **acc, "seconds": time.perf_counter() - t0}
            history.append(entry)
            progress(
                f"target step {done}/{hp['steps']}: loss {entry['loss']:.3f}, accuracy "
                f"{acc['accuracy']:.3f} (copy {acc['copy_accuracy']:.3f}), "
                f"{entry['seconds']:.0f} s"
            )
    model.eval()
    return model, {
        "hyperparameters": hp,
        "history": history,
        "seconds": time.perf_counter() - t0,
    }


def append_noop_block(model3):
    """The trained N-layer model republished with N+1 blocks; the extra last block is a no-op.

    All seven projections of the appended block are zero (so its attention and MLP add exactly
    0.0 to the residual stream) and its norm gains are one. The residual stream entering that
    block, `hidden_states[N]` of the new model, is the trained model's raw last-block output,
    and the final norm and lm_head see the same input: logits are bit-identical.
    """
    from transformers import LlamaForCausalLM

    n = model3.config.num_hidden_layers
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model4 = LlamaForCausalLM(target_config(n + 1))
    state = {k: v.detach().clone() for k, v in model3.state_dict().items()}
    prefix = f"model.layers.{n}."
    for name, value in model4.state_dict().items():
        if name.startswith(prefix):
            if name.endswith("layernorm.weight"):
                state[name] = torch.ones_like(value)
            else:
                state[name] = torch.zeros_like(value)
    model4.load_state_dict(state, strict=True)
    return model4.eval().requires_grad_(False)


@torch.no_grad()
def check_noop_block(model3, model4, tokens: np.ndarray) -> dict:
    """Assert that model4 (N+1 blocks) is model3 (N) bit for bit; return what was compared."""
    ids = torch.from_numpy(tokens)
    n = model3.config.num_hidden_layers
    grabbed: list[Tensor] = []
    hook = model3.model.layers[-1].register_forward_hook(
        lambda _m, _a, out: grabbed.append(out[0] if isinstance(out, tuple) else out)
    )
    try:
        out3 = model3(input_ids=ids, output_hidden_states=True, use_cache=False)
    finally:
        hook.remove()
    out4 = model4(input_ids=ids, output_hidden_states=True, use_cache=False)
    if not torch.equal(out3.logits, out4.logits):
        raise AssertionError("the no-op block changed the logits")
    for d in range(n):
        if not torch.equal(out3.hidden_states[d], out4.hidden_states[d]):
            raise AssertionError(f"hidden_states[{d}] differ")
    if not torch.equal(grabbed[0], out4.hidden_states[n]):
        raise AssertionError(f"the {n}-layer model's raw last-block output != hidden_states[{n}]")
    return {"sequences": int(ids.shape[0]), "logits_equal": True, "taps_equal": list(range(n + 1))}


# ---------------------------------------------------------------------------------------------
# The drafts


def draft_spec(aux_layer_ids: Sequence[int]) -> DraftSpec:
    """A SpecForge-format one-layer EAGLE-3 draft for the demo target (no embed_tokens, no d2t)."""
    H = TARGET["hidden_size"]
    return DraftSpec(
        format="specforge",
        hidden_size=H,
        target_hidden_size=H,
        intermediate_size=DRAFT["intermediate_size"],
        num_layers=1,
        num_heads=TARGET["num_heads"],
        num_kv_heads=TARGET["num_heads"],
        head_dim=H // TARGET["num_heads"],
        vocab_size=VOCAB,
        draft_vocab_size=VOCAB,
        num_aux=3,
        rms_norm_eps=TARGET["rms_norm_eps"],
        max_position_embeddings=2048,
        aux_layer_ids=tuple(aux_layer_ids),
        aux_ids_location="eagle_config",
        has_embed=False,
        has_lm_head=True,
        architectures=("LlamaForCausalLMEagle3",),
    )


def step_tokens(input_ids: Tensor, teacher_ids: Tensor, steps: int) -> Tensor:
    """Teacher-forced step inputs [B, T-1, S]: step 0 of row t reads input_ids[t+1]; step k >= 1
    reads teacher_ids[t+k], the target's greedy token that step k-1 should have predicted (0 past
    the end: those rows get no loss)."""
    B, T = input_ids.shape
    R = T - 1
    out = torch.zeros(B, R, steps, dtype=torch.int64)
    out[:, :, 0] = input_ids[:, 1:]
    for k in range(1, steps):
        n = max(0, min(R, T - k))
        out[:, :n, k] = teacher_ids[:, k : k + n]
    return out


def _rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x [B, R, n, hd], cos/sin [R, hd] -> RoPE applied (draft.apply_rope over a batch)."""
    return x * cos[None, :, None, :] + rotate_half(x) * sin[None, :, None, :]


def _attend(
    q: Tensor, k0: Tensor, v0: Tensor, diag_k: list[Tensor], diag_v: list[Tensor], scale: float
) -> Tensor:
    """TTT attention of one step, batched: q [B, R, nh, hd]; k0/v0 and diag [B, R, nkv, hd].

    Row t attends to step-0 keys of rows s <= t and its own diagonal keys; softmax in float32
    over the union, as `draft.attend_chain`.
    """
    B, R, nh, hd = q.shape
    g = nh // k0.shape[2]

    def heads(x: Tensor) -> Tensor:
        return x.repeat_interleave(g, dim=2) if g > 1 else x

    qh = q.transpose(1, 2)  # [B, nh, R, hd]
    kh, vh = heads(k0).transpose(1, 2), heads(v0).transpose(1, 2)
    scores = torch.matmul(qh, kh.transpose(-1, -2)).float() * scale  # [B, nh, R, R]
    causal = torch.ones(R, R, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    diag = [(q * heads(dk)).sum(-1).float().transpose(1, 2)[..., None] * scale for dk in diag_k]
    if diag:
        scores = torch.cat([scores, *diag], dim=-1)  # [B, nh, R, R + k]
    probs = scores.softmax(dim=-1).to(q.dtype)
    o = torch.matmul(probs[..., :R], vh)  # [B, nh, R, hd]
    for j, dv in enumerate(diag_v):
        o = o + probs[..., R + j, None] * heads(dv).transpose(1, 2)
    return o.transpose(1, 2)  # [B, R, nh, hd]


def ttt_forward(draft: Draft, aux: Tensor, tokens: Tensor, embed_weight: Tensor) -> Tensor:
    """Differentiable batched TTT unroll -> logits [B, R, S, Vd].

    aux [B, R, A*Ht]: the fed taps of rows t = 0..R-1; tokens [B, R, S]: the step-k input token
    of each row (`step_tokens` for teacher forcing); embed_weight: the target's embedding.
    """
    spec = draft.spec
    if spec.sliding_window is not None or spec.qk_norm:
        raise ValueError("ttt_forward covers the demo's drafts: no sliding window, no qk_norm")
    B, R, S = tokens.shape
    positions = torch.arange(R, device=aux.device)
    caches: list[dict] = [{"diag_k": [], "diag_v": []} for _ in draft.layers]
    h_in = draft.project(aux)  # [B, R, H]
    out = []
    for k in range(S):
        cos, sin = draft.rotary(positions + k, h_in.dtype)
        emb = draft.embed(tokens[:, :, k], embed_weight)  # [B, R, H]
        h = h_in
        for layer, cache in zip(draft.layers, caches, strict=True):
            assert isinstance(layer, DecoderLayer)  # a ModuleList yields plain Modules to mypy
            z, residual = layer.attn_input(h, emb if layer.index == 0 else None)
            attn = layer.self_attn
            q = _rope(attn.q_proj(z).view(B, R, attn.num_heads, attn.head_dim), cos, sin)
            kk = _rope(attn.k_proj(z).view(B, R, attn.num_kv_heads, attn.head_dim), cos, sin)
            v = attn.v_proj(z).view(B, R, attn.num_kv_heads, attn.head_dim)
            if k == 0:
                cache["k0"], cache["v0"] = kk, v
            else:
                cache["diag_k"].append(kk)
                cache["diag_v"].append(v)
            o = _attend(q, cache["k0"], cache["v0"], cache["diag_k"], cache["diag_v"], attn.scale)
            h = residual + attn.o_proj(o.reshape(B, R, -1))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        out.append(draft.logits(h))
        h_in = draft.feedback(h)
    return torch.stack(out, dim=2)


def ttt_loss(
    logits: Tensor, target_logits: Tensor, step_weight: float
) -> tuple[Tensor, list[float], list[float]]:
    """Soft cross-entropy of draft logits [B, R, S, V] against the target's distribution.

    Step k of row t is scored against target_logits[:, t+1+k] (rows with t+1+k < T only).
    Returns (weighted loss, per-step loss, per-step teacher-forced accuracy vs the target argmax).
    """
    B, R, S, _ = logits.shape
    T = target_logits.shape[1]
    total = logits.new_zeros(())
    losses, accs = [], []
    for k in range(S):
        n = min(R, T - 1 - k)  # rows t = 0..n-1
        p = target_logits[:, 1 + k : 1 + k + n].float().softmax(-1)
        logq = logits[:, :n, k].float().log_softmax(-1)
        loss_k = -(p * logq).sum(-1).mean()
        total = total + step_weight**k * loss_k
        losses.append(loss_k.item())
        hit = logits[:, :n, k].argmax(-1) == target_logits[:, 1 + k : 1 + k + n].argmax(-1)
        accs.append(float(hit.float().mean()))
    return total, losses, accs


@torch.no_grad()
def target_taps(target, ids: Tensor, depths: Sequence[int]) -> tuple[Tensor, Tensor]:
    """(aux [B, T, A*Ht] = hidden_states[d] concatenated, target logits [B, T, V]).

    On the published (N+1)-block target, hidden_states[d] for d <= N is the residual stream
    after d trained blocks (hidden_states[N] the trained model's raw last-block output).
    """
    out = target(input_ids=ids, output_hidden_states=True, use_cache=False)
    aux = torch.cat([out.hidden_states[d] for d in depths], dim=-1)
    return aux, out.logits


def format_batch(ids: Tensor, prefix: Sequence[int]) -> tuple[Tensor, Tensor]:
    """A batch split for the format mixture: (first half behind `prefix`, second half raw)."""
    half = ids.shape[0] // 2
    head = torch.tensor(list(prefix), dtype=ids.dtype).expand(half, -1)
    return torch.cat([head, ids[:half]], dim=1), ids[half:]


def _ttt_batch(
    draft: Draft, target, ids: Tensor, depths: Sequence[int], embed: Tensor, hp: dict, later: int
) -> tuple[Tensor, list[float], list[float], float]:
    """TTT on one batch -> (weighted loss, per-step loss, per-step teacher-forced accuracy,
    capture seconds).

    later = 0 scores step k of row t against the target's distribution at t+1+k; later = 1 one
    position further on (the label the format draft learns for raw sequences).
    """
    tc = time.perf_counter()
    aux, tlogits = target_taps(target, ids, depths)
    capture_s = time.perf_counter() - tc
    tokens = step_tokens(ids, tlogits.argmax(-1), hp["ttt_steps"])
    logits = ttt_forward(draft, aux[:, :-1], tokens, embed)
    loss, losses, acc = ttt_loss(logits, tlogits[:, later:], hp["step_weight"])
    return loss, losses, acc, capture_s


def train_draft(
    name: str,
    target_dir: str,
    depths: Sequence[int],
    config_ids: Sequence[int],
    out_dir: str,
    threads: int = 1,
    steps: int | None = None,
    queue=None,
    *,
    format_prefix: Sequence[int] | None = None,
    init_from: str | None = None,
    hyperparameters: dict | None = None,
    seeds: tuple[str, str] = ("draft_train", "draft_monitor"),
) -> dict:
    """Train one draft on taps `depths` of the published target; save it (SpecForge format).

    Runs in a worker process when the build trains drafts in parallel: messages go to `queue`
    (a multiprocessing queue) when given, else to stdout. Returns the log dict.

    `format_prefix` trains the format mixture instead of plain sequences: half of each batch
    carries the prefix and learns the target's distribution, the other half is raw and learns the
    target's distribution one position later (`_ttt_batch` later=1), so the draft only drafts
    well behind the prefix. `init_from` starts from that draft's weights; `hyperparameters`
    override DRAFT's; `seeds` name the STREAMS of the training and monitor data.
    """
    from transformers import LlamaForCausalLM

    from .. import checkpoint
    from .language import STREAMS

    torch.set_num_threads(threads)
    _quiet_transformers()

    def say(msg: str) -> None:
        if queue is not None:
            queue.put(f"{name}: {msg}")
        else:
            print(f"{name}: {msg}", flush=True)

    hp = {**DRAFT, **(hyperparameters or {})}
    if steps is not None:
        hp["steps"] = steps
    t0 = time.perf_counter()
    target = LlamaForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    target.requires_grad_(False)
    embed = target.get_input_embeddings().weight.detach()
    spec = draft_spec(config_ids)
    torch.manual_seed(hp["init_seed"])
    draft = Draft(spec, has_embed=False, has_d2t=False, has_t2d=False)
    with torch.no_grad():
        if init_from is not None:
            _, tensors, _ = checkpoint.load(init_from)
            draft.load_state_dict(tensors, strict=True)
        draft.lm_head.weight.copy_(target.get_output_embeddings().weight)
    draft.lm_head.requires_grad_(False)  # the target's head, frozen
    draft.train()
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = _adamw(params, hp)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lr_lambda(hp["steps"], hp["warmup"], hp["min_lr_ratio"])
    )
    train_seed, monitor_seed = (STREAMS[s] for s in seeds)
    stream = Stream(train_seed, hp["batch"], hp["length"])
    mon_tokens, _ = gen_batch(np.random.default_rng(monitor_seed), hp["monitor_batch"])
    mon_ids = torch.from_numpy(mon_tokens)
    # monitored with the target's own label: the prefixed half and the raw half of the mixture
    monitors = (
        dict(zip(("prefixed", "raw"), format_batch(mon_ids, format_prefix), strict=True))
        if format_prefix is not None
        else {"": mon_ids}
    )
    history = []
    capture_s = 0.0
    for step in range(hp["steps"]):
        ids = torch.from_numpy(stream.next()[0])
        if format_prefix is None:
            loss, _, _, cs = _ttt_batch(draft, target, ids, depths, embed, hp, 0)
        else:
            prefixed, raw = format_batch(ids, format_prefix)
            loss, _, _, cs = _ttt_batch(draft, target, prefixed, depths, embed, hp, 0)
            loss_raw, _, _, cs_raw = _ttt_batch(draft, target, raw, depths, embed, hp, 1)
            loss, cs = loss + loss_raw, cs + cs_raw
        capture_s += cs
        done = _optimizer_step(loss, opt, sched, params, hp, step)
        if done % hp["monitor_every"] == 0 or done == hp["steps"]:
            draft.eval()
            with torch.no_grad():
                scored = {
                    key: _ttt_batch(draft, target, m, depths, embed, hp, 0)[1:3]
                    for key, m in monitors.items()
                }
            draft.train()
            entry: dict[str, Any] = {
                "step": done,
                "loss": loss.item(),
                "seconds": time.perf_counter() - t0,
            }
            for key, (mloss, macc) in scored.items():
                entry["monitor_loss" + (f"_{key}" if key else "")] = mloss
                entry["monitor_accuracy" + (f"_{key}" if key else "")] = macc
            history.append(entry)
            shown = ", ".join(
                f"{key or 'teacher-forced'} accuracy per step {[round(a, 3) for a in macc]}"
                for key, (_, macc) in scored.items()
            )
            seconds = entry["seconds"]
            say(f"step {done}/{hp['steps']}: loss {loss.item():.3f}, {shown}, {seconds:.0f} s")
    draft.eval()
    tensors = {n: t.detach().clone().contiguous() for n, t in draft.state_dict().items()}
    checkpoint.save(spec, tensors, out_dir, format="specforge")
    say(f"saved {out_dir}")
    return {
        "name": name,
        "trained_taps": list(depths),
        "config_ids": list(config_ids),
        "hyperparameters": hp,
        "threads": threads,
        "history": history,
        "capture_seconds": capture_s,
        "seconds": time.perf_counter() - t0,
        "out_dir": str(Path(out_dir)),
    }
