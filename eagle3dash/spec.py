"""DraftSpec: an EAGLE-3 draft's shape and options, normalized across checkpoint formats.

This module imports no torch so that `inspect` stays fast. Every format's tensor names are
mapped onto one canonical naming (the names of `draft.Draft`'s parameters), listed by
`expected_shapes`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

FORMATS = ("specforge", "speculators", "eagle", "export", "nemo-automodel")
AUX_IDS_LOCATIONS = ("eagle_config", "top-level", "missing")
# Layer-id keys besides eagle_aux_hidden_state_layer_ids (top-level and nested) that vLLM 0.33
# reads (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py, v1/worker/gpu_model_runner.py); a dot
# names a key inside an object.
OTHER_ID_KEYS = (
    "dflash_config.target_layer_ids",
    "dspark_target_layer_ids",
    "target_layer_ids",
    "dflash_config.layer_ids",
    "eagle_config.layer_ids",
)


@dataclass(frozen=True)
class DraftSpec:
    """Dims, vocab sizes and norm options of one EAGLE-3 draft, whatever format it came in."""

    format: str  # one of FORMATS
    hidden_size: int  # H, the draft's width
    target_hidden_size: int  # Ht, the width of each aux state fed to fc
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int  # target vocab V
    draft_vocab_size: int  # Vd
    num_aux: int = 3  # A, fc slots; fc.weight is [H, A*Ht]
    rms_norm_eps: float = 1e-5
    hidden_act: str = "silu"
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # {"rope_type": "llama3"|"yarn"|"linear", ...} or None
    max_position_embeddings: int = 2048
    sliding_window: int | None = None  # speculators drafts default to 2048-token windows
    attention_bias: bool = False
    qk_norm: bool = False  # qwen3-style q_norm/k_norm in the attention
    # The layer ids exactly as the config stores them (their meaning depends on the format's
    # convention, see layout.py) and where they were found.
    aux_layer_ids: tuple[int, ...] | None = None
    aux_ids_location: str = "missing"  # one of AUX_IDS_LOCATIONS
    use_aux_hidden_state: bool = True  # eagle_config.use_aux_hidden_state
    # A dual-key config: top-level eagle_aux_hidden_state_layer_ids stored beside the nested ids
    # (aux_ids_location "eagle_config"); vLLM reads these first, SGLang never (vllm_rules).
    dual_top_level_ids: tuple[int, ...] | None = None
    # The other keys vLLM reads layer ids from (OTHER_ID_KEYS), with the ids as stored.
    other_id_keys: tuple[tuple[str, tuple[int, ...]], ...] = ()
    num_aux_hidden_states: int | None = None  # the config's key: vLLM's fc width when set
    # The raw norm_before_residual value, None when the key is absent (what a written config says
    # is norm_before_residual; so two specs that differ only here are the same draft).
    norm_before_residual_key: bool | None = field(default=None, compare=False)
    # speculators/vLLM: residual taken after hidden_norm. SpecForge/EAGLE/SGLang: always False.
    norm_before_residual: bool = False
    norm_before_fc: bool = False  # RMSNorm over the whole A*Ht input (input_norm.weight)
    fc_norm: bool = False  # one RMSNorm per aux chunk (fc_norm.{i}.weight), Eagle 3.1
    # `norm_output` has two meanings. vLLM/SGLang/speculators: feed the post-norm state back to
    # the next draft step (feedback_post_norm). SpecForge: apply the final norm before lm_head
    # (norm_before_lm_head; its default True is what every other stack always does).
    feedback_post_norm: bool = False
    norm_before_lm_head: bool = True
    norm_output_key: bool | None = None  # the raw `norm_output` value in the config, if any
    has_d2t: bool = False
    has_t2d: bool = False
    has_embed: bool = False
    has_lm_head: bool = True
    dtype: str = "float32"
    architectures: tuple[str, ...] = ()
    verifier: str | None = None  # speculators_config.verifier.name_or_path
    extra: dict = field(default_factory=dict, compare=False)  # format-specific leftovers

    def to_dict(self) -> dict:
        """Plain JSON-ready dict of every field."""
        d = asdict(self)
        d["aux_layer_ids"] = list(self.aux_layer_ids) if self.aux_layer_ids is not None else None
        d["architectures"] = list(self.architectures)
        d["dual_top_level_ids"] = (
            list(self.dual_top_level_ids) if self.dual_top_level_ids is not None else None
        )
        d["other_id_keys"] = [[key, list(ids)] for key, ids in self.other_id_keys]
        return d


def expected_shapes(spec: DraftSpec) -> dict[str, tuple[int, ...]]:
    """Canonical tensor name -> shape for every tensor a draft with this spec may hold.

    Optional tensors (embed_tokens, d2t, t2d) are included; callers decide which are required.
    """
    H, Ht, A = spec.hidden_size, spec.target_hidden_size, spec.num_aux
    q_out = spec.num_heads * spec.head_dim
    kv_out = spec.num_kv_heads * spec.head_dim
    shapes: dict[str, tuple[int, ...]] = {"fc.weight": (H, A * Ht)}
    if spec.norm_before_fc:
        shapes["input_norm.weight"] = (A * Ht,)
    if spec.fc_norm:
        for i in range(A):
            shapes[f"fc_norm.{i}.weight"] = (Ht,)
    for layer in range(spec.num_layers):
        p = f"layers.{layer}."
        width = 2 * H if layer == 0 else H  # layer 0 reads cat(embedding, hidden)
        shapes[p + "input_layernorm.weight"] = (H,)
        if layer == 0:
            shapes[p + "hidden_norm.weight"] = (H,)
        shapes[p + "self_attn.q_proj.weight"] = (q_out, width)
        shapes[p + "self_attn.k_proj.weight"] = (kv_out, width)
        shapes[p + "self_attn.v_proj.weight"] = (kv_out, width)
        shapes[p + "self_attn.o_proj.weight"] = (H, q_out)
        if spec.attention_bias:
            shapes[p + "self_attn.q_proj.bias"] = (q_out,)
            shapes[p + "self_attn.k_proj.bias"] = (kv_out,)
            shapes[p + "self_attn.v_proj.bias"] = (kv_out,)
        if spec.qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = (spec.head_dim,)
            shapes[p + "self_attn.k_norm.weight"] = (spec.head_dim,)
        shapes[p + "post_attention_layernorm.weight"] = (H,)
        shapes[p + "mlp.gate_proj.weight"] = (spec.intermediate_size, H)
        shapes[p + "mlp.up_proj.weight"] = (spec.intermediate_size, H)
        shapes[p + "mlp.down_proj.weight"] = (H, spec.intermediate_size)
    shapes["norm.weight"] = (H,)
    shapes["lm_head.weight"] = (spec.draft_vocab_size, H)
    shapes["embed_tokens.weight"] = (spec.vocab_size, H)
    shapes["d2t"] = (spec.draft_vocab_size,)
    shapes["t2d"] = (spec.vocab_size,)
    return shapes


OPTIONAL_TENSORS = ("embed_tokens.weight", "d2t", "t2d")
