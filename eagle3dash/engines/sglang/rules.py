"""SGLang's facts, by version and target architecture: which taps a server feeds an EAGLE-3 draft.

Every rule cites the SGLang source file (inside the `sglang` package) and the release it was read
in; the releases read are KNOWN_SGLANG_VERSIONS. The one fix search, `find_fix`, answers "which
eagle_config ids make SGLang V feed these taps, or why none do, and which version would", for the
findings and the layout detective alike.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from eagle3dash.engines.facts import FALLBACK_ARCH, ObservedMapping, Version, ids_from_observed
from eagle3dash.layout import (
    Layout,
    LayoutResult,
    Tap,
    bracketed,
    default_aux_indices,
    ids_text,
    slots_mismatch,
)
from eagle3dash.spec import DraftSpec

# Releases read for the rules below (sglang wheels 0.5.4 .. 0.5.23); the fix search looks for
# upgrades among them. DEFAULT_SGLANG_VERSION is assumed when a server does not say.
KNOWN_SGLANG_VERSIONS = (
    "0.5.4",
    "0.5.5",
    "0.5.6",
    "0.5.8",
    "0.5.9",
    "0.5.10",
    "0.5.11",
    "0.5.12",
    "0.5.13",
    "0.5.14",
    "0.5.15",
    "0.5.16",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
)
DEFAULT_SGLANG_VERSION = KNOWN_SGLANG_VERSIONS[-1]

# ---------------------------------------------------------------------------------------------
# Versions and architectures.

FIRST_KNOWN_SGLANG: Version = (0, 5, 4)
LAST_KNOWN_SGLANG: Version = (0, 5, 23)  # the newest release read
_VERSION_RE = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(?:\.?(?:post|rc|dev|a|b)\d*)?(?:\+[\w.]+)?")


def parse_version(text: str) -> Version:
    """'0.5.21', '0.5.15.post1', 'v0.5.4' -> (0, 5, 21); ValueError when unparseable or too old."""
    m = _VERSION_RE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"unparseable SGLang version {text!r} (expected e.g. '0.5.21')")
    version = (int(m[1]), int(m[2]), int(m[3]))
    if version < FIRST_KNOWN_SGLANG:
        raise ValueError(
            f"unknown SGLang version {text!r}: capture rules are known from "
            f"{KNOWN_SGLANG_VERSIONS[0]} to {DEFAULT_SGLANG_VERSION}"
        )
    return version


def stand_in_note(text: str) -> str | None:
    """Why the newest release read stands in for this version (None when it was read, or lies
    between releases read, whose version thresholds cover it)."""
    version = try_parse_version(text)
    if version is None or version <= LAST_KNOWN_SGLANG:
        return None
    return (
        f"SGLang {text} is newer than {DEFAULT_SGLANG_VERSION}, the newest release read: "
        f"{DEFAULT_SGLANG_VERSION}'s rules stand in, so what it feeds the draft is predicted at "
        "best."
    )


def version_text(version: Version) -> str:
    """(0, 5, 21) -> '0.5.21'."""
    return ".".join(map(str, version))


def try_parse_version(text: str | None) -> Version | None:
    """The parsed version, None when missing or unparseable."""
    if not text:
        return None
    try:
        return parse_version(text)
    except ValueError:
        return None


# SGLang refuses EAGLE3 at start when the target model has no set_eagle3_layers_to_capture:
# model_executor/model_runner_components/attention_backend_setup.py,
# configure_aux_hidden_state_capture, `hasattr(model, "set_eagle3_layers_to_capture")` else
# ValueError (0.5.23). The architectures registered in 0.5.23 (each models/*.py EntryClass) that
# have it, defined or inherited, by the models/ file whose method they run. 29 files define it:
# these 28 and qwen3_5.py, whose inner model the qwen3_5_text.py classes call.
ARCH_TABLE_VERSION = "0.5.23"
EAGLE3_CAPTURE_ARCHS: dict[str, tuple[str, ...]] = {
    "apertus.py": ("ApertusForCausalLM",),
    "bailing_moe.py": (
        "BailingMoEForCausalLM",
        "BailingMoeForCausalLM",
        "BailingMoeV2ForCausalLM",
        "SarvamMoEForCausalLM",
    ),
    "deepseek_v2.py": (
        "DeepseekV2ForCausalLM",
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLM",
        "DeepseekV3ForCausalLMNextN",
        "Glm5NextForConditionalGenerationNextN",
        "GlmMoeDsaForCausalLM",
        "GlmMoeDsaForCausalLMNextN",
        "MistralLarge3ForCausalLM",
        "MistralLarge3ForCausalLMEagle",
    ),
    "exaone_moe.py": ("ExaoneMoEForCausalLM", "ExaoneMoEForCausalLMMTP", "ExaoneMoeForCausalLM"),
    "gemma3_causal.py": ("EmbeddingGemmaModel", "Gemma3ForCausalLM"),
    "gemma3_mm.py": ("Gemma3ForConditionalGeneration",),
    "gemma4_causal.py": (
        "Gemma4AssistantForCausalLM",
        "Gemma4ForCausalLM",
        "Gemma4UnifiedAssistantForCausalLM",
    ),
    "gemma4_mm.py": ("Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration"),
    "glm4_moe.py": ("Glm4MoeForCausalLM", "Glm4MoeForCausalLMNextN"),
    "glm4_moe_lite.py": ("Glm4MoeLiteForCausalLM", "Glm4MoeLiteForCausalLMNextN"),
    "glm5_next.py": ("Glm5NextForConditionalGeneration",),
    "gpt_oss.py": ("GptOssForCausalLM",),
    "kimi_k25.py": ("KimiK25ForConditionalGeneration",),
    "llama.py": (
        "IQuestCoderForCausalLM",
        "InternLM3ForCausalLM",
        "Llama4ForCausalLM",
        "LlamaForCausalLM",
        "LlamaForCausalLMEagle",
        "LlamaForCausalLMEagle3",
        "Ministral3ForCausalLM",
        "MistralForCausalLM",
        "MistralForCausalLMEagle",
        "Phi3ForCausalLM",
        "TeleFLMForCausalLM",
    ),
    "longcat_flash.py": ("LongcatFlashForCausalLM", "LongcatFlashForCausalLMNextN"),
    "mindspore.py": ("MindSporeForCausalLM",),
    "minimax_m2.py": ("MiniMaxM2ForCausalLM",),
    "minimax_m3.py": ("MiniMaxM3SparseForCausalLM",),
    "minimax_m3_vl.py": ("MiniMaxM3SparseForConditionalGeneration",),
    "mllama4.py": ("Llama4ForConditionalGeneration",),
    "qwen2.py": ("Qwen2ForCausalLM", "Qwen2ForCausalLMEagle"),
    "qwen2_5_vl.py": ("Qwen2_5_VLForConditionalGeneration",),
    "qwen2_moe.py": ("Qwen2MoeForCausalLM",),
    "qwen3.py": ("Qwen3ForCausalLM",),
    "qwen3_5_text.py": ("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM"),
    "qwen3_moe.py": ("MellumForCausalLM", "Qwen3MoeForCausalLM", "Qwen3MoeForCausalLMMTP"),
    "qwen3_next.py": ("Qwen3NextForCausalLM", "Qwen3NextForCausalLMMTP"),
    "qwen3_vl.py": (
        "Cosmos3ForConditionalGeneration",
        "InternS1ProForConditionalGeneration",
        "InternS2MobiusForConditionalGeneration",
        "InternS2PreviewForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
        "Qwen3VLMoeForConditionalGeneration",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen4ExpForConditionalGeneration",
    ),
}
# The architectures registered in 0.5.23 without set_eagle3_layers_to_capture, which SGLang
# refuses EAGLE3 for (KimiK3, DeepseekV4, KimiLinear, KimiVL among them).
NO_EAGLE3_CAPTURE_ARCHS = frozenset(
    """
AfmoeForCausalLM ArceeForCausalLM BaichuanForCausalLM BailingMM2NativeForConditionalGeneration
BailingMMNativeForConditionalGeneration BailingMoeForCausalLMNextN BailingMoeV2_5ForCausalLM
BailingMoeV3ForCausalLM BailingMoeV3VLForConditionalGeneration BeamForCausalLM
BertForSequenceClassification BertModel CLIPModel ChatGLMModel Cohere2ForCausalLM
Cohere2MoeForCausalLM Cohere2VisionForConditionalGeneration CohereForCausalLM Contriever
Cosmos3EdgeForConditionalGeneration DFlash2BeamDraftModel DFlash2DraftModel DFlashDraftModel
DFlashLagunaForCausalLM DSparkDraftModel DSparkMiniMaxDraftModel DbrxForCausalLM
DeciLMForCausalLM DeepseekForCausalLM DeepseekOCRForCausalLM DeepseekV4ForCausalLM
DeepseekV4ForCausalLMDSpark DeepseekV4ForCausalLMNextN DeepseekVL2ForCausalLM
DiffusionGemmaForBlockDiffusion Dots3NoteForCausalLM Dots3NoteForCausalLMNextN
DotsOCRForCausalLM DotsVLMForCausalLM Eagle3DeepseekV2ForCausalLM EmbeddingGemma2Model
Ernie4_5_ForCausalLM Ernie4_5_MoeForCausalLM Ernie4_5_MoeForCausalLMMTP
Ernie4_5_VLMoeForConditionalGeneration Exaone4ForCausalLM ExaoneForCausalLM FalconH1ForCausalLM
FalconMambaForCausalLM GPT2LMHeadModel GPTBigCodeForCausalLM GPTJForCausalLM Gemma2ForCausalLM
Gemma2ForSequenceClassification Gemma3nForCausalLM Gemma3nForConditionalGeneration
GemmaForCausalLM GigaChat35ForCausalLM GigaChat35ForCausalLMNextN Glm4ForCausalLM
Glm4vForConditionalGeneration Glm4vMoeForConditionalGeneration GlmAsrForConditionalGeneration
GlmImageForConditionalGeneration GlmOcrForConditionalGeneration
GlmOcrForConditionalGenerationNextN GraniteForCausalLM GraniteMoeForCausalLM
GraniteMoeHybridForCausalLM GraniteMoeSWAForCausalLM GraniteMoeSharedForCausalLM
GraniteSWAForCausalLM Grok1ForCausalLM Grok1ModelForCausalLM HYV3ForCausalLM
HYV3ForCausalLMNextN HYV4ForCausalLM HYV4ForCausalLMNextN HrmTextForCausalLM
HunYuanDenseV1ForCausalLM HunYuanMoEV1ForCausalLM IQuestLoopCoderForCausalLM
IQuestQ1ForCausalLM IQuestQ1MTP InklingForConditionalGeneration
InklingForConditionalGenerationMTP InternLM2ForCausalLM InternLM2ForRewardModel
InternS1ForConditionalGeneration InternVLChatModel JetNemotronForCausalLM
JetVLMForConditionalGeneration K2HorizonForCausalLM KimiK3ForConditionalGeneration
KimiK3LinearForCausalLM KimiLinearForCausalLM KimiVLForConditionalGeneration LLaDA2MoeModelLM
LagunaForCausalLM Lfm2BidirectionalModel Lfm2DSparkDraftModel Lfm2ForCausalLM
Lfm2MoeForCausalLM Lfm2VlForConditionalGeneration LiLiCorrDraftModel
LightOnOCRForConditionalGeneration LingDSparkModel LlamaEmbeddingModel LlamaForClassification
LlamaForSequenceClassification LlamaForSequenceClassificationWithNormal_Weights
LlavaForConditionalGeneration LlavaLlamaForCausalLM LlavaMistralForCausalLM
LlavaQwenForCausalLM LlavaVidForCausalLM LocateAnythingForConditionalGeneration
Mamba2ForCausalLM MambaForCausalLM MiDashengLMModel MiMoForCausalLM MiMoMTP
MiMoV2ASRForCausalLM MiMoV2FlashForCausalLM MiMoV2ForCausalLM MiMoV2MTP MiniCPM3ForCausalLM
MiniCPMForCausalLM MiniCPMO MiniCPMSALAForCausalLM MiniCPMV MiniCPMV4_6ForConditionalGeneration
MiniCPMV4_7ForConditionalGeneration MiniMaxDFlash2DraftModel Mistral3ForConditionalGeneration
MistralModel MixtralForCausalLM MllamaForConditionalGeneration MossVLForConditionalGeneration
MultiModalityCausalLM MuseGlimmerAssistantModel MuseGlimmerForCausalLM
MuseGlimmerForConditionalGeneration MuseSparkForConditionalGeneration
NVILAForConditionalGeneration NVILALiteForConditionalGeneration NanbeigeForCausalLM
NanbeigeForSequenceClassification NemotronHForCausalLM NemotronHForCausalLMMTP
NemotronHPuzzleForCausalLM NemotronH_Nano_Omni_Reasoning_V3 NemotronH_Nano_VL_V2
NemotronH_Omni_Reasoning_V3 OPTForCausalLM Olmo2ForCausalLM OlmoForCausalLM OlmoeForCausalLM
OrionForCausalLM POINTSV15ChatModel PaddleOCRVLForConditionalGeneration PersimmonForCausalLM
Phi3SmallForCausalLM Phi4MMForCausalLM PhiForCausalLM PhiMoEForCausalLM
PixtralForConditionalGeneration PixtralVisionModel QWenLMHeadModel QuantMixtralForCausalLM
Qwen2AudioForConditionalGeneration Qwen2ForRewardModel Qwen2ForSequenceClassification
Qwen2VLForConditionalGeneration Qwen3ASRForConditionalGeneration Qwen3DSparkModel
Qwen3ForRewardModel Qwen3ForSequenceClassification Qwen3Model
Qwen3OmniMoeForConditionalGeneration Qwen3_5ForCausalLMMTP Qwen4ExpForCausalLMMTP
SDARForCausalLM SDARMoeForCausalLM Sarashina2VisionForCausalLM SarvamMLAForCausalLM
SolarForCausalLM Spark2_5ForCausalLM StableLmForCausalLM Starcoder2ForCausalLM
Step3VLForConditionalGeneration Step3p5ForCausalLM Step3p5MTP Step3p7ForConditionalGeneration
StepVLForConditionalGeneration TorchNativeLlamaForCausalLM TorchNativePhi3ForCausalLM
TransformersEmbeddingModel TransformersForCausalLM TransformersForSequenceClassification
TransformersMoEEmbeddingModel TransformersMoEForCausalLM
TransformersMoEForSequenceClassification TransformersMultiModalEmbeddingModel
TransformersMultiModalForCausalLM TransformersMultiModalForSequenceClassification
TransformersMultiModalMoEEmbeddingModel TransformersMultiModalMoEForCausalLM
TransformersMultiModalMoEForSequenceClassification UnlimitedOCRForCausalLM
VoxtralForConditionalGeneration WhisperForConditionalGeneration
XLMRobertaForSequenceClassification XLMRobertaModel XllmForCausalLM XverseForCausalLM
XverseMoeForCausalLM YiVLForCausalLM ZayaForCausalLM
""".split()  # noqa: SIM905 - 219 names, as listed; one a line would be 219 lines
)
# Whose id rule and capture limits apply, by the file of the method; any other file: "llama"
# (its text is llama.py's: [2, N//2, N-3] by default, else ids + 1).
_FILE_FAMILY = {
    "deepseek_v2.py": "deepseek",  # the first-id rule (0.5.13+)
    "glm4_moe_lite.py": "deepseek",  # the same first-id rule
    "kimi_k25.py": "deepseek",  # forwards to its DeepseekV3ForCausalLM language model
    "gpt_oss.py": "gpt-oss",
    "gemma3_causal.py": "gemma",  # the last block is capturable
    "gemma3_mm.py": "gemma",  # forwards to its Gemma3ForCausalLM language model
    "gemma4_causal.py": "gemma",
    "gemma4_mm.py": "gemma",  # sets its Gemma4TextModel's layers_to_capture, ids + 1
    "minimax_m3.py": "minimax-m3",
    "minimax_m3_vl.py": "minimax-m3-vl",
}
FAMILIES = ("llama", "deepseek", "gpt-oss", "gemma", "minimax-m3", "minimax-m3-vl")
# Short names taken as given: the family names, and "kimi" for Kimi-K2 (DeepseekV3ForCausalLM)
# and Kimi-K2.5/K2.6 (KimiK25ForConditionalGeneration).
_SHORT_NAMES = {**{f: f for f in FAMILIES}, "kimi": "deepseek"}


def _key(name: str) -> str:
    return re.sub(r"[-_.\s]", "", name.lower())


_ARCH_FILES = {_key(a): (a, f) for f, archs in EAGLE3_CAPTURE_ARCHS.items() for a in archs}
_NO_CAPTURE = {_key(a): a for a in NO_EAGLE3_CAPTURE_ARCHS}
_SHORT = {_key(k): v for k, v in _SHORT_NAMES.items()}


@dataclass(frozen=True)
class Arch:
    """A target architecture as SGLang's EAGLE-3 capture sees it."""

    name: str  # as given
    family: str  # whose id rule and capture limits apply; "none" when it has no EAGLE-3 capture
    model_file: str | None  # the models/ file whose set_eagle3_layers_to_capture it runs (0.5.23)
    known: bool  # an architecture registered in ARCH_TABLE_VERSION, or a short family name

    @property
    def eagle3(self) -> bool:
        """Whether SGLang can capture aux states for it (else EAGLE3 is refused at start)."""
        return self.family != "none"


def lookup_arch(name: str) -> Arch:
    """An HF architecture string (config.json architectures[0]) or a short family name ('llama',
    'kimi', 'gpt-oss', ...) -> its Arch; any other name is assumed to follow the Llama rule."""
    key = _key(name)
    if key in _ARCH_FILES:
        arch, file = _ARCH_FILES[key]
        return Arch(arch, _FILE_FAMILY.get(file, "llama"), file, True)
    if key in _NO_CAPTURE:
        return Arch(_NO_CAPTURE[key], "none", None, True)
    if key in _SHORT:
        return Arch(name, _SHORT[key], None, True)
    return Arch(name, "llama", None, False)


def arch_family(name: str) -> str:
    """The family of an architecture: one of FAMILIES, or 'none' (no EAGLE-3 capture)."""
    return lookup_arch(name).family


@dataclass(frozen=True)
class IdRule:
    """How one SGLang target family turns explicit config ids into capture indices."""

    family: str
    since: tuple[int, int, int]
    until: tuple[int, int, int] | None  # first version no longer covered, None = still current
    mode: str  # "plus-one" | "first-id" | "boundary" | "unsupported"
    source: str


SGLANG_ID_RULES = (
    # models/llama.py set_eagle3_layers_to_capture: identical text 0.5.4 (l.730) .. 0.5.23 (l.929)
    IdRule("llama", (0, 0, 0), None, "plus-one", "models/llama.py, every version"),
    # deepseek_v2.py has no set_eagle3_layers_to_capture in 0.5.4; PR #12319 ships in 0.5.5
    IdRule("deepseek", (0, 0, 0), (0, 5, 5), "unsupported", "deepseek_v2.py, PR #12319"),
    # deepseek_v2.py 0.5.5 l.3822-3834: same as Llama
    IdRule("deepseek", (0, 5, 5), (0, 5, 13), "plus-one", "deepseek_v2.py 0.5.5-0.5.12"),
    # deepseek_v2.py:3458-3473 (0.5.23), glm4_moe_lite.py:817: +1 only if ids[0] == 1, PR #25454
    IdRule("deepseek", (0, 5, 13), None, "first-id", "deepseek_v2.py 0.5.13+, PR #25454"),
    # gpt_oss.py before PR #32334: the generic +1
    IdRule("gpt-oss", (0, 0, 0), (0, 5, 17), "plus-one", "gpt_oss.py before 0.5.17"),
    # gpt_oss.py 0.5.17+ (read in 0.5.17, 0.5.18, 0.5.19, 0.5.20; absent in 0.5.16): ids kept when
    # max(ids) == N ("final hidden-state boundary"), PR #32334
    IdRule("gpt-oss", (0, 5, 17), None, "boundary", "gpt_oss.py 0.5.17+, PR #32334"),
    # gemma3_causal.py / gemma4_causal.py: no set_eagle3_layers_to_capture in 0.5.10 and 0.5.11;
    # from 0.5.12 (l.897 in 0.5.12, l.917 / l.1495 in 0.5.23) llama.py's text
    IdRule("gemma", (0, 0, 0), (0, 5, 12), "unsupported", "gemma3_causal.py, before 0.5.12"),
    IdRule("gemma", (0, 5, 12), None, "plus-one", "gemma3_causal.py / gemma4_causal.py"),
    # minimax_m3.py: absent in 0.5.13-0.5.15; from 0.5.16 (l.1491; l.2056 in 0.5.23) ids + 1
    IdRule("minimax-m3", (0, 0, 0), (0, 5, 16), "unsupported", "minimax_m3.py, before 0.5.16"),
    IdRule("minimax-m3", (0, 5, 16), None, "plus-one", "minimax_m3.py 0.5.16+"),
    # minimax_m3_vl.py: no set_eagle3_layers_to_capture in 0.5.16; from 0.5.20 (l.208; l.246 in
    # 0.5.23) ids + 1, and its defaults + 1 too (DEFAULT_IDS_PLUS_ONE)
    IdRule("minimax-m3-vl", (0, 0, 0), (0, 5, 20), "unsupported", "minimax_m3_vl.py, < 0.5.20"),
    IdRule("minimax-m3-vl", (0, 5, 20), None, "plus-one", "minimax_m3_vl.py 0.5.20+"),
    # an architecture whose model has no set_eagle3_layers_to_capture (lookup_arch)
    IdRule("none", (0, 0, 0), None, "unsupported", "its models/ file, read in 0.5.23"),
)

# First version where capture index 0 yields the embedding output instead of `hidden_states +
# None` (TypeError). Llama: layer_boundary/stage.py refactor in 0.5.22. DeepSeek: communicator
# prepare_attn sets residual = hidden_states in 0.5.16 (layers/communicator.py:494-522).
# gpt-oss: gpt_oss.py captures boundary 0 (the embedding) before its layer loop from 0.5.17
# (`hidden_states + residual` before layer i, a None residual at layer 0, in 0.5.16). Gemma:
# gemma3_causal.py and gemma4_causal.py append the layer input, no residual added, from their
# first EAGLE-3 release (0.5.12). MiniMax-M3: minimax_m3.py captures through
# attn_boundary.prepare (the layer-boundary code that captures the embedding at layer 0) in
# 0.5.23; earlier releases not read for this.
EMBEDDING_CAPTURE_SINCE = {
    "llama": (0, 5, 22),
    "deepseek": (0, 5, 16),
    "gpt-oss": (0, 5, 17),
    "gemma": (0, 5, 12),
    "minimax-m3": (0, 5, 23),
    "minimax-m3-vl": (0, 5, 23),
}
# Capture index N, the last block's output: gpt_oss.py 0.5.17+ (after block i it captures
# boundary i + 1; PR #32334 / issue #32226, ids used verbatim when max(ids) == N);
# gemma3_causal.py and gemma4_causal.py from 0.5.12 (after the layer loop, `if num_layers in
# self.layers_to_capture`); minimax_m3.py in 0.5.23 (final_norm's capture when end_layer is in
# layers_to_capture; not in 0.5.22), which MiniMax-M3-VL's inner model runs. Other families
# never: nothing follows the last layer (logits_processor._check_aux_hidden_states).
BOUNDARY_CAPTURE_SINCE = {
    "gpt-oss": (0, 5, 17),
    "gemma": (0, 5, 12),
    "minimax-m3": (0, 5, 23),
    "minimax-m3-vl": (0, 5, 23),
}
# models/minimax_m3_vl.py (0.5.20-0.5.23) adds 1 to its defaults as well: without eagle_config ids
# it captures before layers [3, N//2+1, N-2] (N = text_config.num_hidden_layers).
DEFAULT_IDS_PLUS_ONE = ("minimax-m3-vl",)
# cuda_graph_runner.py called set_eagle3_layers_to_capture() with no ids before the config ids
# were set, 0.5.4-0.5.10; fixed in 0.5.11 by PR #22836.
CUDA_GRAPH_FIX = (0, 5, 11)
# eagle_config.use_aux_hidden_state: false turns capture off from 0.5.8 (spec_aux_hidden_state.py).
USE_AUX_FLAG_SINCE = (0, 5, 8)
# fc_norm / norm_output (post-norm feedback) read by models/llama_eagle3.py from 0.5.12.
EAGLE31_SINCE = (0, 5, 12)
# eagle_config.norm_before_fc (input_norm.weight over the joined aux states) read by
# models/llama_eagle3.py from 0.5.17 (absent in 0.5.16; PR #32334).
NORM_BEFORE_FC_SINCE = (0, 5, 17)
# --speculative-draft-model-quantization exists from 0.5.8 (server_args.py); before, the draft is
# quantized like the target.
DRAFT_QUANT_FLAG_SINCE = (0, 5, 8)
# Spec v2 (the overlap worker) and EAGLE-3 trees, read in the wheels: 0.5.6 server_args.py turns
# spec v2 on with SGLANG_ENABLE_SPEC_V2 without checking topk (issue #14077); 0.5.9 raises "Spec v2
# currently only supports topk = 1"; 0.5.11 and 0.5.12 fall back to the v1 worker for topk > 1;
# 0.5.13 arg_groups/speculative_hook.py runs every EAGLE server on the v2 worker (0.5.14 drops the
# variable), trees with page size > 1 on flashinfer, fa3 and triton only.
SPEC_V2_TOPK_REFUSED_SINCE = (0, 5, 9)
SPEC_V2_TOPK_FALLBACK_SINCE = (0, 5, 11)
SPEC_V2_WORKER_ONLY_SINCE = (0, 5, 13)
# --speculative-draft-window-size, the draft's attention window (server_args.py 0.5.12+; absent in
# 0.5.11): models/llama_eagle3.py sets every draft layer's window from it, never from layer_types.
DRAFT_WINDOW_FLAG_SINCE = (0, 5, 12)
# Per-accepted-token hidden-state rows under speculative decoding (sglang issue #26163): from 0.5.14
# managers/scheduler_components/batch_result_processor.py extends req.hidden_states with one row
# per emitted token of a verify round (0.5.13 appended one row per request and round); the prefill
# block is right in every version.
HIDDEN_STATES_FIX = (0, 5, 14)
# --return-hidden-states-mode (0.5.20+): "last" or "full" turns enable_return_hidden_states on,
# and --enable-return-hidden-states (or --enable-return-aux-hidden-states) alone resolves the mode
# to "full" (arg_groups/serving_hook.py handle_return_hidden_states_mode). The server's mode is
# LAST for "last", FULL for "full" or the enable flag, else none
# (model_executor/forward_batch_info.py get_server_return_hidden_states_mode), and
# tokenizer_manager.py refuses return_hidden_states=true above it: "The requested
# return_hidden_states mode exceeds the server maximum `last`" (0.5.23).


def hidden_states_mode(enabled: bool, mode: str | None) -> str | None:
    """What return_hidden_states=true gets from a server with these settings: 'full' (a row per
    token), 'last' (refused) or None (refused: not configured)."""
    if mode == "last":
        return "last"
    return "full" if mode == "full" or enabled else None


# models/deepseek_v2.py first-id rule (PR #25454).
FIRST_ID_RULE_SINCE = (0, 5, 13)


def _id_rule(family: str, version: tuple[int, int, int]) -> IdRule:
    return next(
        r
        for r in SGLANG_ID_RULES
        if r.family == family and r.since <= version and (r.until is None or version < r.until)
    )


def eagle_config_json(ids: Sequence[int] | None, *, aux_on: bool = False) -> str:
    """The config.json entry SGLang reads the ids from, to copy: '"eagle_config":
    {"eagle_aux_hidden_state_layer_ids": [1, 15, 28]}' ('[...]' for None; `aux_on` also turns
    use_aux_hidden_state on)."""
    listed = "[...]" if ids is None else json.dumps(list(ids))
    on = ', "use_aux_hidden_state": true' if aux_on else ""
    return f'"eagle_config": {{"eagle_aux_hidden_state_layer_ids": {listed}{on}}}'


def nested_ids(spec: DraftSpec) -> tuple[int, ...] | None:
    """The ids SGLang and SpecForge read: eagle_config.eagle_aux_hidden_state_layer_ids only."""
    return spec.aux_layer_ids if spec.aux_ids_location == "eagle_config" else None


def _sglang_capture(
    ids: tuple[int, ...], num_layers: int, rule: IdRule, sglang_version: str
) -> tuple[list[int], str]:
    """Capture indices (before layer i = Tap(i)) for explicit ids, and the rule sentence."""
    where = f"SGLang {sglang_version}, {rule.family} family ({rule.source})"
    if rule.mode == "first-id" and ids and ids[0] != 1:
        return list(ids), f"{where}: the first id is {ids[0]}, not 1, so ids are used verbatim."
    if rule.mode == "boundary" and max(ids, default=None) == num_layers:
        return list(ids), f"{where}: the largest id is N={num_layers}, so ids are used verbatim."
    return [i + 1 for i in ids], f"{where}: id i captures the output of layer i (+1)."


def _boundary_capturable(family: str, version: Version) -> bool:
    """Whether this family captures index N (the last block's output) on this version."""
    since = BOUNDARY_CAPTURE_SINCE.get(family)
    return since is not None and version >= since


def _validate_capture(
    indices: list[int], num_layers: int, family: str, version: Version
) -> tuple[Layout, list[str], str | None]:
    """Taps SGLang captures for these indices, in layer order, with notes and any error."""
    notes, errors = [], []
    if not indices:
        errors.append("the config lists no ids: nothing is captured")
    if indices != sorted(indices):
        # logits_processor.py concatenates aux states in forward (layer) order
        notes.append(
            "ids are not ascending: SGLang captures in layer order (before layers "
            f"{ids_text(sorted(indices))}), so the slots are reordered."
        )
    if len(set(indices)) < len(indices):
        # `if i in self.layers_to_capture` fires once per layer [inferred]
        errors.append(
            "duplicate capture indices: each layer is captured once, so fc gets fewer states"
        )
    boundary_ok = _boundary_capturable(family, version)
    taps = []
    for i in sorted(set(indices)):
        if i == 0 and version < EMBEDDING_CAPTURE_SINCE[family]:
            since = version_text(EMBEDDING_CAPTURE_SINCE[family])
            errors.append(
                f"capture index 0 (the embedding) crashes before {since} "
                "(`hidden_states + None` at layer 0)"
            )
            taps.append(Tap(0))
        elif i == num_layers and boundary_ok:
            taps.append(Tap(num_layers))
        elif i == num_layers:
            errors.append(
                f"index {i} is the last block's output, which SGLang {version_text(version)} "
                f"never captures for {family}-family targets"
            )
        elif not 0 <= i < num_layers:
            errors.append(f"index {i} lies outside layers 0..{num_layers - 1}: never captured")
        else:
            taps.append(Tap(i))
    return tuple(taps), notes, "; ".join(errors) or None


def _default_indices(num_layers: int, family: str) -> list[int]:
    """SGLang's capture indices without eagle_config ids (set_eagle3_layers_to_capture(None))."""
    indices = list(default_aux_indices(num_layers))
    return [i + 1 for i in indices] if family in DEFAULT_IDS_PLUS_ONE else indices


def default_capture(num_layers: int, arch: str) -> Layout:
    """The taps SGLang captures for this architecture when the draft's config has no ids."""
    return tuple(Tap(i) for i in _default_indices(num_layers, arch_family(arch)))


def capture_layout(
    num_layers: int,
    ids: tuple[int, ...] | None,
    sglang_version: str,
    arch: str,
) -> LayoutResult:
    """The prefill (eager) capture of SGLang for explicit ids, or its defaults when ids is None."""
    version = parse_version(sglang_version)
    target = lookup_arch(arch)
    family = target.family
    rule = _id_rule(family, version)
    notes = []
    newer = stand_in_note(sglang_version)
    if newer is not None:
        notes.append(newer)
    if not target.known:
        notes.append(
            f"{arch!r} is not an architecture of SGLang {ARCH_TABLE_VERSION} nor a short name "
            f"({', '.join(_SHORT_NAMES)}), so the Llama rule is assumed; give the target's "
            "config.json architectures[0]."
        )
    if rule.mode == "unsupported":
        later = f" (from {version_text(rule.until)})" if rule.until else ""
        return LayoutResult(
            (),
            f"SGLang {sglang_version}: {target.name} has no set_eagle3_layers_to_capture "
            f"({rule.source}), so SGLang refuses EAGLE3 at start (attention_backend_setup.py).",
            notes,
            error=f"SGLang {sglang_version} has no EAGLE-3 capture for {target.name}{later}",
        )
    if ids is None:
        indices = _default_indices(num_layers, family)
        if family in DEFAULT_IDS_PLUS_ONE:
            text = (
                f"SGLang {sglang_version}: no eagle_config ids, so the target captures its "
                f"defaults before layers [3, N//2+1, N-2] ({rule.source}: its defaults + 1)."
            )
        else:
            text = (
                f"SGLang {sglang_version}: no eagle_config ids, so the target captures its "
                "defaults before layers [2, N//2, N-3] (models/llama.py "
                "set_eagle3_layers_to_capture)."
            )
    else:
        indices, text = _sglang_capture(ids, num_layers, rule, sglang_version)
    layout, more, error = _validate_capture(indices, num_layers, family, version)
    return LayoutResult(layout, text, notes + more, error=error)


# ---------------------------------------------------------------------------------------------
# Serving.


def serving_layout(
    spec: DraftSpec,
    num_layers: int,
    sglang_version: str = DEFAULT_SGLANG_VERSION,
    arch: str = FALLBACK_ARCH,
    cuda_graph: bool = True,
) -> LayoutResult:
    """The taps an SGLang server of this version feeds the draft for a target of N layers."""
    version = parse_version(sglang_version)
    ids = nested_ids(spec)
    if not spec.use_aux_hidden_state and version >= USE_AUX_FLAG_SINCE:
        return LayoutResult(
            (),
            f"SGLang {sglang_version}: eagle_config.use_aux_hidden_state is false, so aux capture "
            "is off (spec_aux_hidden_state.py, 0.5.8+).",
            error="capture off: the draft gets the last hidden state (width H) and fc is skipped",
        )
    result = capture_layout(num_layers, ids, sglang_version, arch)
    if not spec.use_aux_hidden_state:
        result.notes.append("eagle_config.use_aux_hidden_state=false is ignored before 0.5.8.")
    if spec.aux_ids_location == "top-level":
        # model_runner.py (0.5.4-0.5.10) / spec_aux_hidden_state.py (0.5.23) read only the
        # nested key; top-level ids only size fc on the draft side (eagle_utils.py:272-274).
        result.notes.append(
            f"ids {ids_text(spec.aux_layer_ids or ())} are stored top-level: SGLang reads only "
            "eagle_config.eagle_aux_hidden_state_layer_ids, so the target uses its defaults."
        )
    if result.layout and len(result.layout) != spec.num_aux:
        # models/llama_eagle3.py builds fc for num_aux_hidden_states, else the nested ids, else
        # 3, and concatenates every captured state before it (0.5.23)
        mismatch = (
            f"SGLang captures {len(result.layout)} states but the draft's fc takes "
            f"{spec.num_aux}: shape mismatch at fc"
        )
        result.error = f"{result.error}; {mismatch}" if result.error else mismatch
    defaults = default_capture(num_layers, arch)
    if (
        cuda_graph
        and version < CUDA_GRAPH_FIX
        and ids is not None
        and result.layout
        and result.layout != defaults
    ):
        result.decode_layout = defaults
        result.notes.append(
            "prefill and decode differ: CUDA-graph replays (decode/verify) capture the default "
            f"taps {bracketed(defaults)} while eager runs use the config ids; fixed in 0.5.11 "
            "(PR #22836)."
        )
    return result


# ---------------------------------------------------------------------------------------------
# Fix: the config ids that make a given SGLang version capture a wanted layout.


def config_ids_for(
    layout: Layout,
    spec: DraftSpec,
    num_layers: int,
    sglang_version: str,
    arch: str,
    cuda_graph: bool = True,
) -> list[int] | None:
    """The eagle_config ids under which this SGLang version feeds the draft exactly `layout`.

    Tries the config's own nested ids first (a fix changes nothing that already works), then,
    per slot, each tap's depth - 1 (the "output of layer i" reading, +1) and depth (ids used
    verbatim: DeepSeek/Kimi first-id rule from 0.5.13, gpt-oss boundary rule), and returns the
    first candidate whose `serving_layout` equals `layout` without an error; with
    `cuda_graph`, the CUDA-graph decode capture (up to 0.5.10) must match too. None when no
    ids can do it (a tap SGLang never captures, the embedding before the version that can,
    post-norm taps, slots not in layer order, ...).
    """
    target = tuple(layout)
    if not target or any(t.post_norm for t in target) or len(target) != spec.num_aux:
        return None  # SGLang captures pre-norm residual streams only; fc takes num_aux states
    current = nested_ids(spec)
    tried = [current] if current is not None and len(current) == len(target) else []
    for ids in [*tried, *itertools.product(*[(t.depth - 1, t.depth) for t in target])]:
        candidate = replace(spec, aux_layer_ids=tuple(ids), aux_ids_location="eagle_config")
        result = serving_layout(candidate, num_layers, sglang_version, arch, cuda_graph)
        if result.error is not None or result.layout != target:
            continue
        if result.decode_layout is not None and result.decode_layout != target:
            continue
        return list(ids)
    return None


@dataclass
class LayoutFix:
    """How to make a server feed a wanted layout: ids for this server; else the newest release
    whose rules feed it (and its ids); else nothing but retraining."""

    target: Layout
    version: Version  # the serving version searched (the newest known when unknown)
    version_assumed: bool  # the server did not say its version
    ids: list[int] | None  # eagle_config ids that make THIS server feed `target`
    ids_from: str = "rules"  # "rules" (SGLang's for `version`) | "observed" (the server's mapping)
    departs: bool = False  # the server was observed to depart from its release's rules
    why_not: str | None = None  # one clause, when `ids` is None
    release: str | None = None  # the newest known release whose rules feed `target`
    release_ids: list[int] | None = None
    releases: list[str] = field(default_factory=list)  # every known release that feeds it
    eager_ids: list[int] | None = None  # ids under --disable-cuda-graph (CUDA-graph bug versions)
    notes: list[str] = field(default_factory=list)


def why_not_capturable(
    target: Layout, num_layers: int, version: Version, arch: str, cuda_graph: bool
) -> str:
    """Why no config ids make this SGLang version capture `target` (best effort, one clause)."""
    known = lookup_arch(arch)
    family = known.family
    v = version_text(version)
    rule = _id_rule(family, version)
    if rule.mode == "unsupported":
        later = f" (from {version_text(rule.until)})" if rule.until else ""
        return f"SGLang {v} has no EAGLE-3 capture for {known.name}{later}"
    if any(t.post_norm for t in target):
        return "SGLang captures pre-norm residual streams only, never the final-normed output"
    if any(t.depth >= num_layers for t in target) and not _boundary_capturable(family, version):
        if family in BOUNDARY_CAPTURE_SINCE:
            return (
                f"SGLang {v} does not capture the last block's output for {family}-family "
                f"targets (from {version_text(BOUNDARY_CAPTURE_SINCE[family])})"
            )
        return "SGLang never captures the last block's output (nothing follows the last layer)"
    if list(target) != sorted(target):
        return "SGLang captures in layer order, and these slots are not"
    since = EMBEDDING_CAPTURE_SINCE[family]
    if Tap(0) in target and version < since:
        return (
            f"SGLang {v} cannot capture the embedding output for {family}-family targets "
            f"(it crashes on `hidden_states + None`; capturable from {version_text(since)})"
        )
    defaults = default_capture(num_layers, arch)
    if cuda_graph and version < CUDA_GRAPH_FIX and tuple(target) != defaults:
        return (
            f"on SGLang {v} CUDA-graph decode steps capture the default layers whatever the ids "
            "(PR #22836, fixed in 0.5.11)"
        )
    if family == "deepseek" and version >= FIRST_ID_RULE_SINCE and target and target[0].depth == 1:
        return (
            f"SGLang {v} (first-id rule, PR #25454) reads a first id of 1 as 'output of layer 1' "
            "and 0 as the embedding, so the state after block 1 cannot lead the list"
        )
    return _no_ids(version)


def _no_ids(version: Version) -> str:
    return f"no eagle_config ids make SGLang {version_text(version)} capture exactly these taps"


def find_fix(
    target: Layout,
    spec: DraftSpec,
    num_layers: int,
    version: Version | None,
    arch: str,
    cuda_graph: bool = True,
    observed: ObservedMapping | None = None,
) -> LayoutFix:
    """The one fix search: the ids that make THIS server feed `target` (from its release's
    rules, or from the id-to-tap mapping it was observed to apply, `observed`, when that departs
    from the rules); else the newest known release whose rules feed `target`, and its ids; else
    none (retrain). On CUDA-graph-bug versions, also the ids under --disable-cuda-graph."""
    assumed = version is None
    v = LAST_KNOWN_SGLANG if version is None else version
    spec = replace(spec, use_aux_hidden_state=True)
    fix = LayoutFix(tuple(target), v, assumed, None)
    if observed is not None:
        fix.departs = True
        fix.ids = ids_from_observed(tuple(target), observed)
        fix.ids_from = "observed"
        if fix.ids is None:
            fix.why_not = (
                "this server departs from SGLang's rules, and the ids it was seen to take do not "
                "reach these taps"
            )
    else:
        fix.ids = config_ids_for(target, spec, num_layers, version_text(v), arch, cuda_graph)
        if fix.ids is None:
            fix.why_not = why_not_capturable(target, num_layers, v, arch, cuda_graph)
    if len(target) != spec.num_aux:  # config_ids_for found none; a reason of the taps first
        if fix.why_not is None or fix.why_not == _no_ids(v):
            fix.ids, fix.why_not = None, slots_mismatch(len(target), spec.num_aux)
        return fix
    if fix.ids is not None and observed is None:
        return fix
    if observed is None and cuda_graph and v < CUDA_GRAPH_FIX:
        fix.eager_ids = config_ids_for(
            target, spec, num_layers, version_text(v), arch, cuda_graph=False
        )
    for text in reversed(KNOWN_SGLANG_VERSIONS):
        ids = config_ids_for(target, spec, num_layers, text, arch, True)
        if ids is None:
            continue
        fix.releases.insert(0, text)
        if fix.release is None:
            fix.release, fix.release_ids = text, ids
    return fix
