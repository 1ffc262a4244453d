"""The four EAGLE-3 checkpoint formats as one table: how each is recognised (detect), where its
config keeps the decoder dims and what its keys mean (read), and how it names its tensors and
writes its config (write). `checkpoint.py` reads and saves through `FORMAT_TABLE` only.

- speculators: `speculators_model_type` in config.json, dims nested in `transformer_layer_config`,
  tensors named `layers.0.*` (speculators 0.9 models/eagle3).
- specforge: flat Llama-style config (`LlamaForCausalLMEagle3`), `midlayer.*` in safetensors.
- eagle: SafeAILab EAGLE-3, flat config and `pytorch_model.bin` with `midlayer.*`.
- export: SGLang/vLLM internal names, `model.` prefix and fused `qkv_proj` / `gate_up_proj`.
- nemo-automodel: NeMo AutoModel 0.7.0's consolidated export (`epoch_E_step_S/model/consolidated/`,
  recipes/llm/train_eagle3.py `setup`): the target's text config with
  `architectures: ["LlamaEagle3DraftModel"]`, `num_hidden_layers` left at the target's depth, no
  layer ids; unfused tensors under `model.` plus `lm_head`, `d2t`/`t2d` only when the vocabulary
  is compressed (components/speculative/eagle/draft_llama.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from eagle3dash.checkpoint_problems import CheckpointProblem, ProblemCode
from eagle3dash.spec import DraftSpec

if TYPE_CHECKING:
    import torch

Tensors = dict[str, "torch.Tensor"]
SERVED_ARCHITECTURE = "LlamaForCausalLMEagle3"  # what SGLang and vLLM load an EAGLE-3 draft as
_UNFUSED_NAMES = ("lm_head.weight", "d2t", "t2d")  # export: names that get no `model.` prefix


# ---------------------------------------------------------------------------------------------
# Config styles: a flat Llama-style config, or speculators' flags over a nested layer config.


class FlatConfig:
    """A flat Llama-style config (SpecForge, EAGLE, exports); `norm_output` in SpecForge's
    meaning: the final norm before lm_head (default true), feedback pre-norm."""

    where = "config"  # where the decoder dims are, for messages

    def layer_config(self, cfg: dict) -> dict | None:
        """The dict holding the decoder dims: the config itself."""
        return cfg

    def decoder_layers(self, configured: int, layer_indices: Collection[int]) -> int:
        """The draft's decoder layers: what the config says (`num_hidden_layers`)."""
        return configured

    def norm_flags(self, norm_output: object) -> tuple[bool, bool]:
        """(feedback_post_norm, norm_before_lm_head) from the config's norm_output."""
        return False, norm_output is not False

    def qk_norm(self, layer_cfg: dict) -> bool:
        """Whether the draft layer norms q and k (never in a flat config)."""
        return False

    def problems(self, spec: DraftSpec, cfg: dict) -> list[CheckpointProblem]:
        """What this config style leaves for a server to guess."""
        return []

    def cannot_express(self, spec: DraftSpec) -> str | None:
        """The spec's options this style has no key for, else None."""
        if spec.feedback_post_norm or spec.qk_norm:
            return "feedback_post_norm or qk_norm"
        return None

    def write(self, spec: DraftSpec, architectures: list[str]) -> dict:
        """The config.json of `spec` in this style."""
        cfg = {"architectures": architectures, "model_type": "llama", **_layer_fields(spec)}
        cfg.update(draft_vocab_size=spec.draft_vocab_size, tie_word_embeddings=False)
        cfg["torch_dtype"] = spec.dtype
        if spec.target_hidden_size != spec.hidden_size:
            cfg["target_hidden_size"] = spec.target_hidden_size
        for key in ("norm_before_residual", "norm_before_fc", "fc_norm"):
            if getattr(spec, key):
                cfg[key] = True
        if spec.norm_output_key is not None or not spec.norm_before_lm_head:
            cfg["norm_output"] = spec.norm_before_lm_head
        _put_aux_ids(cfg, spec)
        return cfg


class SpeculatorsConfig(FlatConfig):
    """A speculators config: flags at the top, decoder dims in transformer_layer_config;
    `norm_output` means feeding the post-norm state back to the next step (speculators/vLLM)."""

    where = "transformer_layer_config"

    def layer_config(self, cfg: dict) -> dict | None:
        """transformer_layer_config, None when it is not an object."""
        layer_cfg = cfg.get("transformer_layer_config")
        return layer_cfg if isinstance(layer_cfg, dict) else None

    def norm_flags(self, norm_output: object) -> tuple[bool, bool]:
        """(feedback_post_norm, norm_before_lm_head): the head always sees the normed state."""
        return bool(norm_output), True

    def qk_norm(self, layer_cfg: dict) -> bool:
        """A Qwen3 layer config norms q and k."""
        return layer_cfg.get("model_type") == "qwen3"

    def problems(self, spec: DraftSpec, cfg: dict) -> list[CheckpointProblem]:
        """vLLM assumes norm_before_residual true when a speculators config omits it."""
        if "norm_before_residual" in cfg:
            return []
        return [CheckpointProblem(ProblemCode.NORM_BEFORE_RESIDUAL_MISSING)]

    def cannot_express(self, spec: DraftSpec) -> str | None:
        """speculators always norms before lm_head."""
        return None if spec.norm_before_lm_head else "norm_before_lm_head=False"

    def write(self, spec: DraftSpec, architectures: list[str]) -> dict:
        """The config.json of `spec` as speculators writes it."""
        cfg = {
            "architectures": architectures,
            "speculators_model_type": "eagle3",
            "draft_vocab_size": spec.draft_vocab_size,
            "target_hidden_size": None
            if spec.target_hidden_size == spec.hidden_size
            else spec.target_hidden_size,
            "norm_before_residual": spec.norm_before_residual,
            "norm_before_fc": spec.norm_before_fc,
            "fc_norm": spec.fc_norm,
        }
        if spec.norm_output_key is not None or spec.feedback_post_norm:
            cfg["norm_output"] = spec.feedback_post_norm
        _put_aux_ids(cfg, spec)
        cfg["speculators_config"] = {
            "algorithm": "eagle3",
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3}],
            "verifier": {"name_or_path": spec.verifier, "architectures": []},
        }
        model_type = "qwen3" if spec.qk_norm else "llama"
        cfg["transformer_layer_config"] = {"model_type": model_type, **_layer_fields(spec)}
        cfg["torch_dtype"] = spec.dtype
        return cfg


NEMO_ARCHITECTURE = "LlamaEagle3DraftModel"  # NeMo AutoModel's class, which no engine registers


class NemoConfig(FlatConfig):
    """NeMo AutoModel's draft config: the target's text config plus its draft keys, where
    `num_hidden_layers` is the target's depth and `norm_output` feeds the post-norm state back and
    to lm_head (eagle/draft_llama.py compute_logits), so the head always sees the normed state."""

    def decoder_layers(self, configured: int, layer_indices: Collection[int]) -> int:
        """The decoder layers the weights hold: the config's count is the target's."""
        return max(layer_indices, default=0) + 1

    def norm_flags(self, norm_output: object) -> tuple[bool, bool]:
        """(feedback_post_norm, norm_before_lm_head): the head always sees the normed state."""
        return bool(norm_output), True

    def problems(self, spec: DraftSpec, cfg: dict) -> list[CheckpointProblem]:
        """What NeMo AutoModel's serve scripts rewrite before an engine can load the draft
        (components/speculative/serve_sglang.py, serve_vllm.py in nemo-automodel 0.7.0)."""
        out: list[CheckpointProblem] = []
        archs = list(cfg.get("architectures") or [])
        if NEMO_ARCHITECTURE in archs:
            data = {"architectures": archs, "name": NEMO_ARCHITECTURE, "fix": SERVED_ARCHITECTURE}
            out.append(CheckpointProblem(ProblemCode.UNREGISTERED_ARCHITECTURE, data))
        configured = cfg.get("num_hidden_layers")
        if isinstance(configured, int) and configured > spec.num_layers:
            untrained = configured - spec.num_layers
            depth = {"configured": configured, "layers": spec.num_layers, "untrained": untrained}
            out.append(CheckpointProblem(ProblemCode.TARGET_DEPTH_LAYERS, depth))
        return out

    def cannot_express(self, spec: DraftSpec) -> str | None:
        """NeMo's drafts always norm before lm_head and have no q/k norm."""
        if spec.qk_norm or not spec.norm_before_lm_head:
            return "qk_norm or norm_before_lm_head=False"
        return None

    def write(self, spec: DraftSpec, architectures: list[str]) -> dict:
        """The config.json of `spec` as NeMo AutoModel writes it (the target's depth kept when
        the spec was read from such a config)."""
        cfg = super().write(spec, architectures)
        cfg["num_hidden_layers"] = spec.extra.get("config_num_hidden_layers", spec.num_layers)
        cfg.update(
            target_hidden_size=spec.target_hidden_size,
            fc_norm=spec.fc_norm,
            norm_output=spec.feedback_post_norm,
            parallel_drafting=False,
        )
        return cfg


def _layer_fields(spec: DraftSpec) -> dict:
    """Llama decoder keys, shared by flat configs and speculators' transformer_layer_config."""
    d = {
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_attention_heads": spec.num_heads,
        "num_key_value_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "num_hidden_layers": spec.num_layers,
        "vocab_size": spec.vocab_size,
        "rms_norm_eps": spec.rms_norm_eps,
        "hidden_act": spec.hidden_act,
        "max_position_embeddings": spec.max_position_embeddings,
        "rope_theta": spec.rope_theta,
        "rope_scaling": spec.rope_scaling,
        "attention_bias": spec.attention_bias,
    }
    if spec.sliding_window is not None:
        d["sliding_window"] = spec.sliding_window
        d["layer_types"] = ["sliding_attention"] * spec.num_layers
    return d


def _put_aux_ids(cfg: dict, spec: DraftSpec) -> None:
    """Write the aux layer ids where the spec says they were (nested, top level, or nowhere)."""
    if spec.aux_ids_location == "eagle_config" or not spec.use_aux_hidden_state:
        nested: dict = {"use_aux_hidden_state": spec.use_aux_hidden_state}
        if spec.aux_ids_location == "eagle_config":
            nested["eagle_aux_hidden_state_layer_ids"] = list(spec.aux_layer_ids or ())
        cfg["eagle_config"] = nested
    if spec.aux_ids_location == "top-level":
        cfg["eagle_aux_hidden_state_layer_ids"] = list(spec.aux_layer_ids or ())
    elif spec.dual_top_level_ids is not None:
        cfg["eagle_aux_hidden_state_layer_ids"] = list(spec.dual_top_level_ids)


# ---------------------------------------------------------------------------------------------
# Tensor names on disk, from the canonical names (`spec.expected_shapes`).


def _canonical_names(tensors: Tensors) -> Tensors:
    """speculators stores the canonical names."""
    return dict(tensors)


def _midlayer_names(tensors: Tensors) -> Tensors:
    """SpecForge and EAGLE call the draft's decoder layer `midlayer`."""
    return {re.sub(r"^layers\.0\.", "midlayer.", n): t for n, t in tensors.items()}


def _prefixed_names(tensors: Tensors) -> Tensors:
    """NeMo AutoModel's: unfused, under `model.` except lm_head, d2t and t2d."""
    return {n if n in _UNFUSED_NAMES else "model." + n: t for n, t in tensors.items()}


def _export_names(tensors: Tensors) -> Tensors:
    """SGLang/vLLM's own: `model.` prefix, q/k/v fused into qkv_proj, gate/up into gate_up_proj."""
    import torch

    out = {}
    for name, t in tensors.items():
        if re.search(r"(self_attn\.[kv]_proj|mlp\.up_proj)\.", name):
            continue  # fused into qkv_proj / gate_up_proj below
        if re.search(r"self_attn\.q_proj\.", name):
            parts = [tensors[name.replace("q_proj", p)] for p in ("q_proj", "k_proj", "v_proj")]
            name, t = name.replace("q_proj", "qkv_proj"), torch.cat(parts)
        elif re.search(r"mlp\.gate_proj\.", name):
            parts = [t, tensors[name.replace("gate_proj", "up_proj")]]
            name, t = name.replace("gate_proj", "gate_up_proj"), torch.cat(parts)
        out[name if name in _UNFUSED_NAMES else "model." + name] = t
    return out


# ---------------------------------------------------------------------------------------------
# The table.

Recognises = Callable[[dict, Collection[str], list[Path]], bool]  # (config, tensor names, files)


@dataclass(frozen=True)
class CheckpointFormat:
    """One checkpoint format: how to recognise it, read its config, name and write its weights."""

    name: str  # a DraftSpec.format
    config: FlatConfig  # where its config keeps things, and how it is written
    architecture: str  # architectures[0] written for a draft read from another format
    recognises: Recognises  # detect: tried in FORMAT_TABLE order, the first that answers wins
    to_disk: Callable[[Tensors], Tensors]  # canonical names -> its names on disk
    single_bin: bool = False  # one pytorch_model.bin (SafeAILab EAGLE), else safetensors
    trained_on_three_ids: bool = False  # made by SpecForge: exactly three distinct aux ids

    def architectures(self, spec: DraftSpec) -> list[str]:
        """The spec's own architectures when it is of this format, else the format's usual one."""
        if spec.format == self.name and spec.architectures:
            return list(spec.architectures)
        return [self.architecture]


def _has_fused_or_prefixed_names(cfg: dict, names: Collection[str], files: list[Path]) -> bool:
    return any(n.startswith("model.") or "qkv_proj" in n or "gate_up_proj" in n for n in names)


# Detection order: speculators by its config key, NeMo AutoModel by its architecture; among flat
# configs, export by its names, eagle by its .bin; anything else is SpecForge's.
FORMAT_TABLE: dict[str, CheckpointFormat] = {
    f.name: f
    for f in (
        CheckpointFormat(
            "speculators",
            SpeculatorsConfig(),
            "Eagle3DraftModel",
            lambda cfg, names, files: "speculators_model_type" in cfg,
            _canonical_names,
        ),
        CheckpointFormat(
            "nemo-automodel",
            NemoConfig(),
            NEMO_ARCHITECTURE,
            lambda cfg, names, files: NEMO_ARCHITECTURE in (cfg.get("architectures") or []),
            _prefixed_names,
        ),
        CheckpointFormat(
            "export",
            FlatConfig(),
            SERVED_ARCHITECTURE,
            _has_fused_or_prefixed_names,
            _export_names,
            trained_on_three_ids=True,
        ),
        CheckpointFormat(
            "eagle",
            FlatConfig(),
            "LlamaForCausalLM",
            lambda cfg, names, files: any(f.suffix == ".bin" for f in files),
            _midlayer_names,
            single_bin=True,
        ),
        CheckpointFormat(
            "specforge",
            FlatConfig(),
            SERVED_ARCHITECTURE,
            lambda cfg, names, files: True,
            _midlayer_names,
            trained_on_three_ids=True,
        ),
    )
}


def norm_output_feeds_back(fmt: str) -> bool:
    """Whether `norm_output` in this format's config means SGLang's post-norm feedback
    (speculators, NeMo AutoModel), not SpecForge's final norm before lm_head."""
    return FORMAT_TABLE[fmt].config.norm_flags(True)[0]


def detect_format(cfg: dict, names: Collection[str], files: list[Path]) -> CheckpointFormat:
    """The format of a checkpoint from its config, tensor names and weight files."""
    return next(f for f in FORMAT_TABLE.values() if f.recognises(cfg, names, files))
