"""What the findings tests share: small stand-ins with the attribute names of
`engine.ServerReport` / `SpeculativeSettings`, `servebench.BenchResult` and `metrics.DraftEval`
(`tests/test_findings.py` checks them against the real dataclasses), and a real `InspectReport` of
a tiny draft with the seed's ids, so the rules' tests stay fast and import no torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from eagle3dash.checkpoint import InspectReport
from eagle3dash.layout import Tap
from eagle3dash.spec import DraftSpec
from tests.specs import tiny_spec

# --- stand-ins ----------------------------------------------------------------------------------


@dataclass
class Spec:
    """Stand-in for sglang.SpeculativeSettings."""

    algorithm: str = "EAGLE3"
    draft_model_path: str | None = None
    num_steps: int | None = 3
    eagle_topk: int | None = 1
    num_draft_tokens: int | None = 4
    token_map: str | None = None
    draft_quantization: str | None = None
    quantization_explicitly_set: bool | None = None
    accept_threshold_single: float | None = 1.0
    accept_threshold_acc: float | None = 1.0
    adaptive: bool = False
    draft_window_size: int | None = None
    draft_lm_head_quantization: str | None = None


@dataclass
class Server:
    """Stand-in for sglang.ServerReport."""

    url: str = "http://gpubox:30000"
    version: str | None = "0.5.23"
    model_path: str | None = "moonshotai/Kimi-K2"
    served_model_name: str | None = None
    architectures: list[str] | None = None
    model_type: str | None = None
    tp_size: int | None = 8
    dtype: str | None = "bfloat16"
    quantization: str | None = None
    attention_backend: str | None = None
    device: str | None = "cuda"
    speculative: Spec | None = field(default_factory=Spec)
    enable_return_hidden_states: bool = False
    return_hidden_states_mode: str | None = None
    enable_return_aux_hidden_states: bool = False
    aux_hidden_state_capture: str | None = None
    return_aux_hidden_state_layer_ids: list[int] | None = None
    chunked_prefill_size: int | None = None
    disable_radix_cache: bool | None = None
    disable_cuda_graph: bool | None = None
    decode_log_interval: int | None = 40
    avg_spec_accept_length: float | None = None
    healthy: bool = True
    server_info: dict = field(default_factory=dict)
    kv_cache_dtype: str | None = None
    disaggregation_mode: str | None = None
    disable_overlap_schedule: bool | None = None


@dataclass
class Bench:
    """Stand-in for servebench.BenchResult (the fields the rules read)."""

    output_tok_s_aggregate: float
    accept_length: float | None = None
    concurrency: int = 1


@dataclass
class Eval:
    """Stand-in for metrics.DraftEval."""

    acceptance: list[float]
    accuracy: list[float] = field(default_factory=list)
    num_positions: int = 100
    accept_length_per_sequence: list[float] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.acceptance)

    @property
    def accept_length(self) -> float:
        return 1.0 + sum(self.acceptance)

    def accept_length_at(self, steps: int) -> float:
        return 1.0 + sum(self.acceptance[:steps])

    def simulated_accept_length(self, steps: int | None = None) -> float:
        return self.accept_length_at(self.steps if steps is None else steps)


# --- real objects ---------------------------------------------------------------------------


def draft(**kw) -> DraftSpec:
    """A tiny SpecForge draft with the seed's nested ids [2, 30, 58]."""
    base = {"vocab_size": 1000, "draft_vocab_size": 1000}
    ids = {"aux_layer_ids": (2, 30, 58), "aux_ids_location": "eagle_config"}
    return tiny_spec(**{**base, **ids, **kw})


def report(spec: DraftSpec | None = None, problems=(), path="/ckpt/kimi-eagle3", tensors=None):
    spec = spec or draft()
    if tensors is None:
        tensors = {
            "fc.weight": ([spec.hidden_size, 3 * spec.target_hidden_size], "bfloat16"),
            "lm_head.weight": ([spec.draft_vocab_size, spec.hidden_size], "bfloat16"),
        }
    return InspectReport(
        path=path,
        files=["model.safetensors"],
        spec=spec,
        tensors=tensors,
        raw_names={},
        param_count=0,
        problems=list(problems),
    )


# A trained draft's acceptance per step, and an untrained one's.
GOOD = Eval(acceptance=[0.8, 0.6, 0.45, 0.3, 0.2], accuracy=[0.8, 0.7, 0.6, 0.5, 0.4])
POOR = Eval(acceptance=[0.05, 0.01, 0.0, 0.0, 0.0], accuracy=[0.05, 0.2, 0.2, 0.2, 0.2])


@dataclass
class Side:
    """A diagnosis side as the findings read it (findings.core.SideView)."""

    layout: tuple[Tap, ...]
    source: str
    detail: str = "served slots matched to the target's taps"
    prediction: tuple[Tap, ...] | None = None
    slot_margins: list[float] | None = field(default_factory=list)
    measured: bool = True
    top1: float | None = None
    sim_accept_length: float | None = None
