"""The diagnosis, stage by stage: each stage a short function, `run_diagnosis` the list of them.

inspect the checkpoint -> probe the endpoint -> predict both layouts from the config and SGLang's
rules -> benchmark the endpoint (and the baseline right after it) -> capture what the server feeds
the draft on the benchmark's own greedy completions -> capture every tap of a local target on the
same tokens (target at hand) -> read a training dump (given) -> the layout detective -> the
training side and the serving side, each from its strongest evidence -> which draft the server
runs -> the profile (asked) -> findings.

A stage that cannot run (no hidden states, no target, a server that refuses) records why and
what enables it (`NotChecked`) and the run goes on: a misconfigured server is diagnosed, not
refused. Torch is imported only inside the stages that need it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from eagle3dash.checkpoint import InspectReport, inspect_draft
from eagle3dash.diagnosis.options import SCHEMA, DiagnoseOptions
from eagle3dash.diagnosis.result import (
    ACCEPTANCE_MATCHED,
    CONFIG,
    DECLARED,
    DETECTIVE,
    DUMP_MATCHED,
    OBSERVED,
    PREDICTED,
    RUN_RECORD,
    TRAINING_DUMP,
    Diagnosis,
    NotChecked,
    Side,
)
from eagle3dash.engines import rules as engine_rules
from eagle3dash.engines.endpoints import detect_engine, engine_adapter, open_engine
from eagle3dash.engines.facts import target_arch
from eagle3dash.engines.seam import (
    REFERENCE_TAIL,
    VLLM,
    CaptureRequest,
    EngineAdapter,
    GenerateResult,
    ServerReport,
)
from eagle3dash.errors import InputError
from eagle3dash.findings import Evidence, Finding, diagnose
from eagle3dash.http_client import EndpointError
from eagle3dash.identity import DraftIdentity, compare_drafts, is_local_url
from eagle3dash.layout import Layout, LayoutResult, Tap, bracketed, describe_layout, diff
from eagle3dash.modelled_cost import above_ceiling
from eagle3dash.prediction import LayoutComparison, predict_layouts
from eagle3dash.profile import (
    MAX_ADVICE_STEPS,
    FormatRow,
    NotProfiled,
    Profile,
    TemperatureRow,
    accept_length_noise,
    accept_length_on_first,
    category_rows,
    per_position,
    request_accept_lengths,
    rows_settled,
    step_costs,
    steps_advice,
    tok_s_on_first,
    wave_end,
)
from eagle3dash.provenance import json_digests
from eagle3dash.run_record import recorded_training
from eagle3dash.servebench import (
    BASELINE_SIDE,
    BENCH_TIMEOUT,
    ENDPOINT_SIDE,
    BenchHow,
    BenchResult,
    Prompt,
    bench_pair,
    bench_with_answers,
    compare_to_baseline,
    join_benches,
    load_prompts,
)
from eagle3dash.target import vocabulary

if TYPE_CHECKING:
    from eagle3dash.capture import Capture
    from eagle3dash.detective import AcceptanceMatch, Detection
    from eagle3dash.draft import Draft
    from eagle3dash.metrics import DraftEval

Progress = Callable[[float, str], None]

# The stages a diagnosis reports, in order (each its progress message unless a detail is given).
INSPECT = "inspecting the checkpoint"
PROBE = "probing the endpoint"
CAPTURE_SERVING = "capturing the aux states the server feeds the draft"
CAPTURE_TARGET = "capturing every tap of the local target"
READ_DUMP = "reading the training dump"
DETECT = "layout detective: which taps does the draft perform best with?"
EVALUATE = "running the standalone draft on each side's states"
BENCHMARK = "benchmarking the endpoint"
BASELINE = "benchmarking the baseline"
# Why a vLLM server's served states are not checked: its generate returns no hidden states.
VLLM_STATES_NOT_CAPTURED = (
    "the states the vLLM server feeds the draft are not captured (vLLM returns none from generate)"
)
PROFILE_TEMPERATURES = "profiling acceptance: per position, category and temperature"
PROFILE_FORMATS = "profiling acceptance: prompt formats"
PROFILE_STEPS = "profiling acceptance: the cost of a step, for the steps advice"
FINDINGS = "findings"  # timed, not a numbered stage: the rules over what was measured

# Each stage's key in Diagnosis.timings (seconds of wall time).
TIMING_KEYS = {
    INSPECT: "inspect",
    PROBE: "probe",
    CAPTURE_SERVING: "capture_serving",
    CAPTURE_TARGET: "capture_target",
    READ_DUMP: "read_dump",
    DETECT: "detective",
    EVALUATE: "evaluate",
    BENCHMARK: "benchmark",
    BASELINE: "baseline",
    PROFILE_TEMPERATURES: "profile_temperatures",
    PROFILE_FORMATS: "profile_formats",
    PROFILE_STEPS: "profile_steps",
    FINDINGS: "findings",
}
# Before a home has timings of its own, what a unit of each stage costs (seconds), measured on
# the demo (bench/bench_time_budget.py): a generated token for the stages that send requests,
# the stage itself for the others. Only their ratios shape the progress bar.
SECONDS_PER_TOKEN = 0.011
DEFAULT_UNIT_COST = {
    "inspect": 0.1,
    "probe": 0.3,
    "capture_target": 3.0,
    "read_dump": 2.0,
    "detective": 1.0,
    "evaluate": 0.5,
    "profile_steps": 0.1,
}
BENCH_WARMUP = 1  # unmeasured requests before a benchmark of a server that has served nothing


def _no_progress(fraction: float, message: str) -> None:
    pass


def plan_stages(options: DiagnoseOptions) -> tuple[str, ...]:
    """The stages a diagnosis with these options runs, in order."""
    return (
        INSPECT,
        PROBE,
        BENCHMARK,
        *((BASELINE,) if options.baseline else ()),
        CAPTURE_SERVING,
        *((CAPTURE_TARGET,) if options.target else ()),
        *((READ_DUMP,) if options.train_states else ()),
        *((DETECT,) if options.target else ()),
        EVALUATE,
        *((PROFILE_TEMPERATURES, PROFILE_FORMATS, PROFILE_STEPS) if options.profile else ()),
    )


def stage_units(options: DiagnoseOptions) -> dict[str, float]:
    """How much work each stage of these options is: tokens generated for the stages that send
    requests (prompts x tokens, warmups included), 1 for the others."""
    tokens = options.num_prompts * options.max_new_tokens
    extra_temperatures = [t for t in options.temperatures if t != 0]
    units = {TIMING_KEYS[stage]: 1.0 for stage in plan_stages(options)}
    warm = BENCH_WARMUP * options.max_new_tokens
    # the capture keeps the benchmark's completions: per prompt, the reference tail and a
    # one-token request with the hidden states
    capture = float(options.num_prompts * (REFERENCE_TAIL + 1))
    units["capture_serving"] = capture
    units["benchmark"] = float(tokens + warm)
    if options.baseline:
        units["baseline"] = float(tokens + warm)
    if options.profile:
        units["profile_temperatures"] = float(tokens * len(extra_temperatures)) or 1.0
        # the chat template: a benchmark, and a capture that keeps its completions
        units["profile_formats"] = float(tokens) + capture
        units["profile_steps"] = 3.0  # three one-token requests
    return units


def earlier_timings(
    rows: list[tuple[dict, dict]],
) -> list[tuple[dict[str, float], DiagnoseOptions]]:
    """Stored (timings, options dict) pairs as `unit_costs` reads them (a run's extra options,
    such as the demo's name, left aside); a row whose options no longer parse is left out."""
    out = []
    for timings, options in rows:
        try:
            out.append((timings, DiagnoseOptions.from_json(options)))
        except (TypeError, ValueError):  # stored by a version whose options differ
            continue
    return out


def unit_costs(earlier: list[tuple[dict[str, float], DiagnoseOptions]]) -> dict[str, float]:
    """Seconds per unit of each stage, the median over earlier runs' timings on this home (each
    with its options), else the defaults."""
    import statistics

    seen: dict[str, list[float]] = {}
    for timings, options in earlier:
        units = stage_units(options)
        for key, seconds in timings.items():
            if key in units and units[key] > 0:
                seen.setdefault(key, []).append(seconds / units[key])
    defaults = {key: DEFAULT_UNIT_COST.get(key, SECONDS_PER_TOKEN) for key in TIMING_KEYS.values()}
    return defaults | {key: statistics.median(values) for key, values in seen.items()}


def expected_seconds(
    options: DiagnoseOptions, costs: dict[str, float] | None = None
) -> dict[str, float]:
    """What each stage of these options is expected to take (`unit_costs`, else defaults)."""
    per_unit = costs or unit_costs([])
    return {
        key: units * per_unit.get(key, SECONDS_PER_TOKEN)
        for key, units in stage_units(options).items()
    }


class Stages:
    """Progress numbered by stage ('stage 3/7: capturing the aux states ...'), the bar weighted
    by each stage's expected seconds, and the wall time each stage took (`timings`)."""

    def __init__(
        self,
        names: tuple[str, ...],
        progress: Progress,
        expected: dict[str, float] | None = None,
    ):
        self.names = names
        self.progress = progress
        weights = [max((expected or {}).get(TIMING_KEYS[n], 1.0), 1e-3) for n in names]
        total = sum(weights)
        starts = [sum(weights[:i]) / total for i in range(len(names))]
        self._span = {n: (a, w / total) for n, a, w in zip(names, starts, weights, strict=True)}
        self.timings: dict[str, float] = {}
        self._current: str | None = None
        self._since = time.perf_counter()

    def report(self, stage: str, within: float = 0.0, detail: str | None = None) -> None:
        """Report progress `within` (0..1) of `stage` (one of `names`); a new stage closes the
        timing of the one before."""
        start, span = self._span[stage]
        self._show(stage, start + span * min(max(within, 0.0), 1.0), detail)

    def _show(self, stage: str, fraction: float, detail: str | None) -> None:
        """Run `stage`'s clock and put the bar at `fraction`."""
        if stage != self._current:
            self.close()
            self._current, self._since = stage, time.perf_counter()
        number = self.names.index(stage) + 1
        self.progress(fraction, f"stage {number}/{len(self.names)}: {detail or stage}")

    def together(self, stages: tuple[str, ...], label: str) -> Callable[[str, int, int], None]:
        """A (stage, done, total) callback for stages whose requests interleave (adjacent in
        `names`; `done` and `total` count all of theirs): each stage's clock runs while its
        requests do, and the bar crosses their spans together, so it never moves back."""
        start = self._span[stages[0]][0]
        span = sum(self._span[s][1] for s in stages)
        return lambda stage, done, total: self._show(
            stage, start + span * min(done / total, 1.0), f"{label} ({done}/{total} requests)"
        )

    def close(self) -> None:
        """Add the running stage's wall time to `timings`."""
        if self._current is not None:
            key = TIMING_KEYS[self._current]
            elapsed = time.perf_counter() - self._since
            self.timings[key] = self.timings.get(key, 0.0) + elapsed
            self._current = None

    def steps(self, stage: str, label: str, unit: str) -> Callable[[int, int], None]:
        """A (done, total) callback reporting progress inside `stage`: 'capturing (3/8 prompts)'."""
        return lambda done, total: self.report(
            stage, done / total, f"{label} ({done}/{total} {unit})"
        )


def _option(name: str) -> str:
    """An option as both interfaces name it: "--target-layers ('Target layers N' on New run)";
    a library error reaches the CLI and the Run page alike."""
    option = SCHEMA[name]
    return f"{option.flag} ('{option.label}' on New run)"


def target_depth(options: DiagnoseOptions, server: ServerReport) -> int:
    """Target depth N: the flag, else the local target's config, else the served model's config."""
    from eagle3dash.capture import num_target_layers

    if options.target_layers:
        return options.target_layers
    for path in (options.target, server.model_path):
        if path and (Path(path) / "config.json").is_file():
            return num_target_layers(path)
    raise InputError(
        f"cannot tell how many layers the target has: {server.model_path!r} is not a local "
        f"checkpoint here; give {_option('target_layers')} or {_option('target')}"
    )


def target_embedding(options: DiagnoseOptions, server: ServerReport):
    """The target's embedding matrix, read alone from a local checkpoint, or None."""
    from eagle3dash.capture import read_target_embedding

    for path in (options.target, server.model_path):
        if path and Path(path).is_dir():
            return read_target_embedding(path)
    return None


def local_tokenizer(*paths: str | None):
    """The first tokenizer that loads from a local copy among `paths` (never from a hub)."""
    from transformers import AutoTokenizer

    for path in paths:
        if not path:
            continue
        try:
            return AutoTokenizer.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError):
            continue
    tried = ", ".join(repr(p) for p in paths if p) or "none"
    raise InputError(
        f"cannot tokenize the text prompts: no local tokenizer (tried {tried}); give "
        f"{_option('target')} (a local copy of the target, or just its tokenizer files) or give "
        'prompts as token ids ({"input_ids": [...]} lines)'
    )


def prompt_ids(prompts: list[Prompt], *tokenizer_paths: str | None) -> list[list[int]]:
    """Each prompt's token ids: its own, or its text through the target's local tokenizer, so
    the ids are the ones SGLang sees."""
    tokenizer = None
    out = []
    for prompt in prompts:
        if prompt.input_ids is not None:
            out.append(list(prompt.input_ids))
            continue
        tokenizer = tokenizer or local_tokenizer(*tokenizer_paths)
        out.append(list(tokenizer(prompt.text)["input_ids"]))
    return out


def simulation_steps(server: ServerReport, options: DiagnoseOptions) -> tuple[int, int]:
    """(steps simulated, steps evaluated): the server's draft steps per round when it says, and
    enough evaluated steps to simulate them."""
    served = server.speculative.num_steps if server.speculative else None
    steps = served if isinstance(served, int) and served > 0 else options.steps
    advice = MAX_ADVICE_STEPS if options.profile else 0  # the steps advice simulates 1..8
    return steps, max(steps, options.steps, advice)


@dataclass
class _Run:
    """What the stages hand on to each other."""

    options: DiagnoseOptions
    stages: Stages
    report: InspectReport
    server: ServerReport
    depth: int
    arch: str
    version: str
    prediction: LayoutComparison
    steps: int
    eval_steps: int
    tokens: list[list[int]] = field(default_factory=list)
    serving_capture: Capture | None = None
    capture_error: str | None = None
    target_capture: Capture | None = None
    dump: Capture | None = None
    draft: Draft | None = None
    embed: Any = None
    detection: Detection | None = None
    not_checked: list[NotChecked] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    importing: threading.Thread | None = None  # _import_torch_stack, started with the run

    def imports_ready(self) -> None:
        """Wait for the background imports: transformers' lazy module must not be imported
        from two threads at once."""
        if self.importing is not None:
            self.importing.join()
            self.importing = None

    @property
    def trainer(self) -> str | None:
        """The trainer: given by the user, else the run folder's provenance, else unknown."""
        card = self.report.provenance
        return self.options.trainer or (card.trainer if card is not None else None)

    @property
    def declared(self) -> Layout | None:
        """The training layout the user declared."""
        return self.options.training_layout

    @property
    def words(self) -> engine_rules.EngineWords:
        """How the endpoint's engine is told things (its flags, in every remedy)."""
        return engine_rules.words(self.server.engine)

    def steps_flags(self, num_steps: int) -> str:
        """The endpoint's engine's flags for `num_steps` draft steps with the served draft."""
        served = self.server.speculative.draft_model_path if self.server.speculative else None
        return self.words.steps_flags(num_steps, served or str(self.options.draft))


def _start(options: DiagnoseOptions, stages: Stages) -> _Run:
    """Inspect the checkpoint, probe the endpoint, predict both layouts."""
    stages.report(INSPECT)
    report = inspect_draft(options.draft, options.draft_config)
    stages.report(PROBE, 0.0, f"probing {options.endpoint}")
    engine = open_engine(options.endpoint, timeout=options.timeout)
    try:
        server = engine.probe()
    finally:
        engine.close()
    depth = target_depth(options, server)
    arch = target_arch(options.arch, server.architectures, server.model_type)
    version = server.rules_engine().rules_version()
    trainer, recorded = recorded_training(report.provenance, options.trainer)
    prediction = predict_layouts(
        report.spec,
        depth,
        trainer=trainer,
        sglang_version=version,
        arch=arch,
        cuda_graph=not server.disable_cuda_graph,
        training_sglang_version=options.training_sglang_version,
        training_ids=recorded,
        engine=server.rules_engine(),
    )
    steps, eval_steps = simulation_steps(server, options)
    return _Run(
        options, stages, report, server, depth, arch, version, prediction, steps, eval_steps
    )


def within_prefill_chunk(
    tokens: list[list[int]], chunk: int | None, generated: int
) -> tuple[list[list[int]], int]:
    """Each prompt cut to its first tokens so that prompt + `generated` tokens fit one prefill
    chunk (SGLang returns the hidden states of a prompt's last chunk only), and how many were
    cut; unchanged when there is no chunk size or no room left for a prompt."""
    room = None if chunk is None else chunk - generated
    if room is None or room < 1:
        return tokens, 0
    cut = [ids[:room] for ids in tokens]
    return cut, sum(len(a) != len(b) for a, b in zip(tokens, cut, strict=True))


def serving_tokens(run: _Run, prompts: list[Prompt]) -> None:
    """The prompts' token ids (`run.tokens`), as the benchmark and the serving capture send them:
    cut to fit one prefill chunk with their completion when the capture can run; else why it
    cannot (`run.capture_error`, and what would check it)."""
    server, predicted = run.server, run.prediction.serving
    if any(p.input_ids is None for p in prompts):  # text: the tokenizer needs transformers
        run.imports_ready()
    run.tokens = prompt_ids(prompts, run.options.target, server.model_path)
    if server.speculative is None:
        run.capture_error = "the endpoint runs no speculative decoding, so it feeds no draft"
    elif server.engine == VLLM and not run.options.capture_server:
        run.capture_error = "vLLM returns no hidden states from generate"
        on_cpu = server.device == "cpu"  # no capture server runs there: nothing to pass
        # on a CPU the target is what lets the acceptance say the taps (no capture server runs)
        enabler = "capture_server" if not on_cpu else None if run.options.target else "target"
        run.not_checked.append(
            NotChecked(
                "serving-states",
                f"{VLLM_STATES_NOT_CAPTURED}: the taps it feeds are inferred from the measured "
                "acceptance when the target is given, else predicted from vLLM's rules",
                option=enabler,
                action=run.words.capture_action(server.device),
            )
        )
    elif server.engine != VLLM and server.hidden_states is None:
        run.capture_error = "the server was started without --enable-return-hidden-states"
        run.not_checked.append(
            NotChecked(
                "serving-states",
                "the states the server feeds the draft cannot be captured",
                action="restart the server with --enable-return-hidden-states",
            )
        )
    elif server.hidden_states == "last":
        run.capture_error = (
            "the server was started with --return-hidden-states-mode last: it returns only the "
            "last token's hidden state and refuses return_hidden_states=true"
        )
        run.not_checked.append(
            NotChecked(
                "serving-states",
                "the states the server feeds the draft cannot be captured",
                action="restart the server with --return-hidden-states-mode full",
            )
        )
    elif predicted.error:
        label = run.server.rules_engine().label()
        run.capture_error = f"{label} would not capture these taps: {predicted.error}"
    if not run.capture_error:
        run.tokens = _fit_chunk(run, run.tokens)


def capture_serving(run: _Run, served: list[GenerateResult | None] | None) -> None:
    """The aux states the server feeds its draft, on its greedy completions: the benchmark's
    (`served`, in the order of `run.tokens`), generated again only where a request failed."""
    from eagle3dash.capture import CaptureError, save_capture

    if run.capture_error:
        return
    run.stages.report(CAPTURE_SERVING)
    try:
        capture = _capture(run, run.tokens, CAPTURE_SERVING, served)
    except (CaptureError, EndpointError) as e:
        run.capture_error = str(e)
        run.not_checked.append(
            NotChecked(
                "serving-states",
                "the server refused or failed the capture of the states it feeds the draft",
                action=_capture_remedy(run),
                error=run.capture_error,
            )
        )
        return
    if run.options.capture_dir:
        save_capture(capture, run.options.capture_dir)
    run.serving_capture = capture
    run.tokens = [seq.input_ids.tolist() for seq in capture.sequences]


def _served(run: _Run, timeout: float | None = None) -> closing[EngineAdapter]:
    """The adapter of the endpoint's engine (known from the probe), closed on leaving `with`;
    a vLLM one with the capture server, when given."""
    options = run.options
    capture_server = str(options.capture_server) if options.capture_server else None
    engine = engine_adapter(
        run.server.engine,
        options.endpoint,
        options.timeout if timeout is None else timeout,
        capture_server=capture_server,
    )
    return closing(engine)


def _capture_remedy(run: _Run) -> str:
    """The one thing that lets a refused serving capture run: a larger prefill chunk when the
    capture sequences do not fit the server's, else a fix of what its error (carried by the
    not-checked item) names."""
    chunk = run.server.chunked_prefill_size
    generated = run.options.max_new_tokens + REFERENCE_TAIL
    longest = max((len(ids) for ids in run.tokens), default=0) + generated
    if chunk is not None and longest > chunk:
        return (
            f"restart the server with --chunked-prefill-size {longest} or more (or ask for fewer "
            "new tokens)"
        )
    return "fix the server or the prompts, and run again"


def _fit_chunk(run: _Run, tokens: list[list[int]]) -> list[list[int]]:
    """Each prompt cut to fit one prefill chunk with its completion (said once in the warnings)."""
    chunk = run.server.chunked_prefill_size
    generated = run.options.max_new_tokens + REFERENCE_TAIL
    tokens, cut = within_prefill_chunk(tokens, chunk, generated)
    said = (
        f"{cut} prompt(s) cut to their first {(chunk or 0) - generated} tokens for the "
        f"serving capture, so that each sequence ({generated} generated tokens included) "
        f"fits one prefill chunk of {chunk} tokens: SGLang returns the hidden states of the "
        "last chunk only"
    )
    if cut and said not in run.warnings:
        run.warnings.append(said)
    return tokens


def _capture(
    run: _Run, tokens: list[list[int]], stage: str, served: list[GenerateResult | None] | None
) -> Capture:
    """The aux states the server feeds its draft on these prompts' greedy completions (each
    prompt fits one prefill chunk, `_fit_chunk`); `served`: a greedy benchmark's answers on
    these very ids, whose completions the capture keeps."""
    request = CaptureRequest(
        tokens,
        run.prediction.serving.layout,
        max_new_tokens=run.options.max_new_tokens,
        report=run.server,
        hidden_size=run.report.spec.target_hidden_size,  # bounds the reply, checks the width
        progress=run.stages.steps(stage, "capturing", "prompts"),
        warn=run.warnings.append,
        served=served,
    )
    with _served(run) as engine:
        return engine.capture(request)


def load_standalone_draft(run: _Run) -> None:
    """The draft built once, the way SGLang runs it (the target's embedding when at hand)."""
    run.imports_ready()
    import torch

    from eagle3dash.draft import load_draft_reported

    run.embed = target_embedding(run.options, run.server)
    dtype = getattr(torch, run.options.dtype)
    run.draft, loaded = load_draft_reported(run.report.path, run.options.device, dtype, run.embed)
    # What only the tensor data shows (NaN/Inf, d2t): the findings read it from the report.
    run.report.nonfinite = loaded.nonfinite
    known = run.report.problems
    run.report.problems = [*known, *(p for p in loaded.problems if p not in known)]


def _served_completions(run: _Run) -> list[int] | None:
    """Without a serving capture (vLLM without a capture server, SGLang without hidden states),
    each prompt followed by the endpoint's own greedy completion, REFERENCE_TAIL tokens past the
    budget as a capture holds: the target's capture then scores the rows serving drafts from, not
    the prompts' own text, which a draft trained on the target's outputs predicts far worse. The
    prompt lengths; None, with a warning, when the endpoint gives no completion."""
    lengths = [len(ids) for ids in run.tokens]
    budget = run.options.max_new_tokens + REFERENCE_TAIL
    try:
        with _served(run) as engine:
            served = [engine.generate_ids(ids, budget).output_ids for ids in run.tokens]
    except EndpointError as e:
        run.warnings.append(
            "The training side was evaluated on the prompts' own text, not on the endpoint's "
            f"completions: {e}"
        )
        return None
    run.tokens = [ids + [int(t) for t in out] for ids, out in zip(run.tokens, served, strict=True)]
    return lengths


def capture_target(run: _Run) -> None:
    """Every tap of the local target on the served tokens, in one forward."""
    if not run.options.target:
        return
    run.stages.report(CAPTURE_TARGET, 0.0, f"{CAPTURE_TARGET} {run.options.target}")
    prompt_lengths = _served_completions(run) if run.serving_capture is None else None
    run.imports_ready()
    import torch

    from eagle3dash.detective import capture_all_taps

    capture = capture_all_taps(run.options.target, run.tokens, device=run.options.device)
    if run.serving_capture is not None:
        for mine, theirs in zip(capture.sequences, run.serving_capture.sequences, strict=True):
            mine.loss_mask = theirs.loss_mask  # score the same rows on both sides
        capture.meta["served_tokens"] = run.serving_capture.meta.get("served_tokens")
    elif prompt_lengths is not None:
        # the rows a serving capture scores (engines/sglang/capture.py): from the prompt's end on
        for seq, length in zip(capture.sequences, prompt_lengths, strict=True):
            seq.loss_mask = (torch.arange(len(seq.input_ids)) >= length + 1).to(torch.int64)
        capture.meta["served_tokens"] = run.options.max_new_tokens
    run.target_capture = capture


def read_dump(run: _Run) -> None:
    """The training dump, read with the layout it was made with (declared, else the config's)."""
    from eagle3dash.capture import read_capture

    if not run.options.train_states:
        return
    run.stages.report(READ_DUMP, 0.0, f"{READ_DUMP} {run.options.train_states}")
    layout = run.declared or run.prediction.training.layout
    run.dump = read_capture(run.options.train_states, layout=layout, num_target_layers=run.depth)


def run_detective(run: _Run) -> None:
    """Which taps the draft performs best with, and which taps each served slot carries."""
    from eagle3dash.detective import detect

    if run.target_capture is None:
        return
    run.stages.report(DETECT)
    sides = {"serving": run.serving_capture} if run.serving_capture is not None else None
    run.detection = detect(
        run.report.path,
        capture=run.target_capture,
        steps=run.steps,  # the sweep's accept lengths at the server's steps, like the sides
        sides=sides,
        num_layers=run.depth,
        engine=run.server.rules_engine(),
        arch=run.arch,
        device=run.options.device,
        draft=run.draft,
    )


def _evaluate(
    run: _Run, capture: Capture | None, layout: Layout, steps: int | None = None
) -> DraftEval | None:
    """The standalone draft on a capture fed in this layout, to `steps` draft steps (default: the
    run's evaluation steps, which the steps advice reaches past the served ones)."""
    from eagle3dash.draft import evaluate_capture

    if capture is None or run.draft is None or not set(layout) <= set(capture.taps):
        return None
    return evaluate_capture(
        run.draft, capture, layout, steps=steps or run.eval_steps, embed_weight=run.embed
    )


def training_side(run: _Run) -> Side:
    """The training side from its strongest evidence: dump > declared > the run's record of its
    capture ids (under the trainer's convention) > detective > config. A record says what the
    trainer captured; the detective infers it from a few sequences, so its other preference is
    its own finding (detected-layout), never the training side over a record."""
    config = run.prediction.training
    declared, detection = run.declared, run.detection
    card = run.report.provenance
    recorded = card is not None and card.capture_layers is not None
    deciding = None if recorded else detection
    if run.dump is not None:
        layout = declared or config.layout
        detail = f"the training features in {run.options.train_states}, taps {bracketed(layout)}"
        side = Side("training", layout, TRAINING_DUMP, detail, config.layout)
        side.eval = _evaluate(run, run.dump, layout)
        run.warnings.append(
            "training-side states come from the training dump, so they cover other token "
            "sequences than the serving capture"
        )
    elif declared is not None:
        side = Side("training", declared, DECLARED, "declared by the user", config.layout)
        side.eval = _evaluate(run, run.target_capture, declared)
    elif deciding is not None and (
        deciding.best == config.layout or deciding.outperforms(config.layout)
    ):
        best = deciding.best
        # The side's own numbers are its evaluation's: one source per quantity, not the sweep's.
        detail = (
            f"best of {len(deciding.rows)} candidate layouts on one capture of every tap, "
            "ranked by simulated accept length"
            + ("; the config implies the same" if best == config.layout else "")
        )
        side = Side("training", best, DETECTIVE, detail, config.layout)
        side.eval = _evaluate(run, run.target_capture, best)
    else:
        detail, source = config.rule, CONFIG
        if card is not None and card.capture_layers is not None:  # the ids predict_layouts read
            ids = list(card.capture_layers)
            detail = f"ids {ids} recorded in the run's {card.capture_record}; {detail}"
            source = RUN_RECORD
        if detection is not None and not detection.outperforms(config.layout):
            detail += "; the layout detective found no clearly better layout"
        elif detection is not None:  # said as its own finding (detected-layout)
            detail += f"; the layout detective prefers {bracketed(detection.best)}"
        side = Side("training", config.layout, source, detail, config.layout)
        side.eval = _evaluate(run, run.target_capture, config.layout)
    side.steps = run.steps
    if side.eval is None:
        side.capture_error = "no target states at these taps"
        run.not_checked.append(
            NotChecked(
                "training-side",
                "the training side is "
                + (
                    "taken from the run's record"
                    if side.source == RUN_RECORD
                    else "assumed from the config"
                )
                + " and not evaluated: no target states at its taps",
                option="target",
                action="give a local copy of the target (or a training dump)",
            )
        )
    return side


def _dump_matched(run: _Run, training: Side) -> tuple[Layout, list[float]] | None:
    """Served slots matched to the training dump's slots by scale (mean log-RMS per slot): the
    embedding output is far smaller than any block's output, and depth grows the scale."""
    serving, dump = run.serving_capture, run.dump
    if serving is None or dump is None or len(training.layout) != len(serving.taps):
        return None

    def log_rms(capture: Capture, tap: Tap) -> float:
        values = [float(s.states[tap].float().pow(2).mean().sqrt()) for s in capture.sequences]
        return math.log10(max(sum(values) / len(values), 1e-12))

    theirs = [log_rms(dump, t) for t in training.layout]
    layout, margins = [], []
    for tap in serving.taps:
        mine = log_rms(serving, tap)
        gaps = sorted((abs(mine - x), j) for j, x in enumerate(theirs))
        layout.append(training.layout[gaps[0][1]])
        margins.append(gaps[1][0] - gaps[0][0] if len(gaps) > 1 else 0.0)
    return tuple(layout), margins


def _acceptance_match(run: _Run, measured: BenchResult | None) -> AcceptanceMatch | None:
    """The sweep's candidates (each engine reading's layout among them) against the acceptance
    per draft position the server measured, when no served state was captured."""
    from eagle3dash.detective import match_acceptance

    histogram = measured.correct_drafts_histogram if measured is not None else None
    if run.serving_capture is not None or run.detection is None or not histogram:
        return None
    sp = run.server.speculative
    if sp is None or (sp.algorithm or "EAGLE3").upper() != "EAGLE3":
        return None  # EAGLE or NEXTN feed the draft no aux layout at all
    readings = {
        reading.label(): result.layout
        for reading, result in engine_rules.serving_readings(
            run.server.rules_engine(),
            run.report.spec,
            run.depth,
            run.arch,
            not run.server.disable_cuda_graph,
        )
        if result.error is None
    }
    shares = measured.per_position if measured is not None else None
    return match_acceptance(run.detection.rows, shares or [], sum(histogram), readings)


def _inferred_detail(run: _Run, match: AcceptanceMatch) -> str:
    """How the served layout was inferred, in one line with its numbers."""
    best = match.best
    assert best is not None
    n = run.depth
    text = (
        f"{bracketed(best.layout)} ({describe_layout(best.layout, n)}) on the served completions: "
        "rounds accepting at least 1, 2, "
        f"... drafts simulated {', '.join(f'{s:.0%}' for s in best.shares)}, measured "
        f"{', '.join(f'{s:.0%}' for s in match.measured)} of {match.rounds} rounds (distance "
        f"{best.distance:.3f}, within the noise {match.noise:.3f})"
    )
    if best.reading is not None:
        text += f"; {best.reading} feeds it"
    if match.tied:
        others = "; ".join(f"{bracketed(r.layout)} ({r.name})" for r in match.tied)
        text += f". Fits as well: {others}"
    return text + "."


def inferred_runner(serving: Side) -> str | None:
    """The vLLM runner whose reading the served layout was inferred to be (it names it), when
    the server does not say its runner; None otherwise."""
    match = serving.acceptance_match
    reading = match.best.reading if match is not None and match.best is not None else None
    for runner in ("v1", "v2"):
        if reading is not None and f"({runner.upper()} runner)" in reading:
            return runner
    return None


def serving_side(run: _Run, training: Side, measured: BenchResult | None = None) -> Side:
    """The serving side from its strongest evidence: slot matching against the target's taps >
    matching against the training dump's slots > the layout the measured acceptance matches >
    the engine's rules (predicted)."""
    predicted = run.prediction.serving
    capture = run.serving_capture
    served_layout = tuple(capture.taps) if capture is not None else predicted.layout
    match = run.detection.slot_match if run.detection is not None else None
    matched = _dump_matched(run, training)
    by_acceptance = _acceptance_match(run, measured)
    if by_acceptance is not None and by_acceptance.best is not None:
        layout = by_acceptance.best.layout
        side = Side(
            "serving",
            layout,
            ACCEPTANCE_MATCHED,
            _inferred_detail(run, by_acceptance),
            predicted.layout,
            acceptance_match=by_acceptance,
        )
        side.eval = _evaluate(run, run.target_capture, layout)
        side.steps = run.steps
        side.capture_error = run.capture_error
        inferred = (
            f"{VLLM_STATES_NOT_CAPTURED}: the taps it feeds were inferred from the measured "
            "acceptance instead"
        )
        run.not_checked = [  # the states stay unchecked; the taps no longer wait on the target
            replace(n, reason=inferred, option=None)
            if n.check == "serving-states" and n.reason.startswith(VLLM_STATES_NOT_CAPTURED)
            else n
            for n in run.not_checked
        ]
        return side
    if match is not None and "serving" in match.sides:
        scores = match.sides["serving"]
        layout = match.best("serving")
        margins = [s.confidence for s in scores]
        detail = "each served slot matched to the target's taps by content and scale"
        side = Side("serving", layout, OBSERVED, detail, predicted.layout, slot_margins=margins)
    elif matched is not None:
        detail = "each served slot matched to the training dump's slots by scale (RMS)"
        side = Side("serving", matched[0], DUMP_MATCHED, detail, predicted.layout)
        side.slot_margins = matched[1]
    else:
        side = Side("serving", predicted.layout, PREDICTED, predicted.rule, predicted.layout)
        side.acceptance_match = by_acceptance  # measured, but no candidate fits it
        if capture is not None:
            run.not_checked.append(
                NotChecked(
                    "serving-taps",
                    "which taps the server feeds is predicted from "
                    f"{run.server.rules_engine().label()}'s rules, not observed",
                    option="target",
                    action="give a local copy of the target so each served slot can be matched",
                )
            )
    side.eval = _evaluate(run, capture, served_layout)
    side.steps = run.steps
    side.capture_error = run.capture_error
    return side


def draft_identity(run: _Run) -> DraftIdentity | None:
    """Whether the server runs the checkpoint under diagnosis, by weight content (hashed here:
    the job that runs a diagnosis reads no store, wherever it runs)."""
    spec = run.server.speculative
    if spec is None:
        return None
    identity = compare_drafts(run.report.path, spec.draft_model_path, is_local_url(run.server.url))
    if identity.status == "unknown":
        run.not_checked.append(
            NotChecked(
                "draft-identity",
                f"whether the server runs this checkpoint: {identity.reason}",
                action="run the diagnosis on the GPU box, where the server's draft path is "
                "readable",
            )
        )
    return identity


def _as_ids(prompts: list[Prompt], tokens: list[list[int]]) -> list[Prompt]:
    """The prompts sent as these token ids (their categories kept)."""
    return [p.with_ids(ids) for p, ids in zip(prompts, tokens, strict=True)]


def benchmark(
    run: _Run, prompts: list[Prompt]
) -> tuple[BenchResult, BenchResult | None, list[GenerateResult | None] | None]:
    """The endpoint's tok/s and accept length, and the baseline's (when given) in alternating
    waves with it (`servebench.bench_pair`), each after BENCH_WARMUP requests; and the endpoint's
    answers for the serving capture to keep (None when it cannot run). When it can, both send
    the prompts as the capture's token ids."""
    options = run.options
    sent = prompts if run.capture_error else _as_ids(prompts, run.tokens)
    how = BenchHow(
        concurrency=options.concurrency,
        max_new_tokens=options.max_new_tokens,
        warmup=BENCH_WARMUP,
    )
    run.stages.report(BENCHMARK, 0.0, f"benchmarking {options.endpoint}")
    baseline = None
    with _served(run, BENCH_TIMEOUT) as engine:
        if options.baseline:
            # The baseline may be served by the other engine: each is benchmarked through its
            # own API.
            engine_name = detect_engine(options.baseline, timeout=options.timeout)
            with closing(engine_adapter(engine_name, options.baseline, BENCH_TIMEOUT)) as other:
                measured, answers, baseline = bench_pair(
                    engine,
                    other,
                    sent,
                    wave=PAIR_WAVE_BATCHES * options.concurrency,
                    paired=_paired(run.stages),
                    **how,
                )
        else:
            how["progress"] = run.stages.steps(BENCHMARK, "benchmarking", "requests")
            measured, answers = bench_with_answers(engine, sent, **how)
    if measured.acceptance_source == "metrics-delta":
        run.warnings.append(
            "accept length measured from the vLLM server's /metrics counters around the "
            "benchmark (its per-request metrics are off): they are server-wide, so they are "
            "this benchmark's only if nothing else used the server meanwhile; start vLLM with "
            "--per-request-spec-decode-metrics summary to measure per request"
        )
    if baseline is not None:
        speedup = compare_to_baseline(measured, baseline)
        beyond = above_ceiling(
            run.server.server_info,
            run.steps,
            measured.accept_length,
            speedup["speedup"],
            speedup["speedup_noise"],
        )
        if beyond is not None:
            run.warnings.append(beyond)
    else:
        run.not_checked.append(
            NotChecked(
                "speedup",
                "no baseline: the speedup against serving without speculation is unknown",
                option="baseline",
                action="serve the same target without speculation and give its URL",
            )
        )
    served = None if run.capture_error else [_answer(a) for a in answers]
    return measured, baseline, served


# Prompts per wave of the endpoint's and the baseline's alternating benchmarks, in batches of the
# run's concurrency: two, so a wave's tail of an unfilled batch is a small part of it.
PAIR_WAVE_BATCHES = 2


def _paired(stages: Stages) -> Callable[[str, int, int], None]:
    """The paired benchmarks' progress: each side's stage clock, one bar over both."""
    step = stages.together((BENCHMARK, BASELINE), "benchmarking the endpoint and the baseline")
    names = {ENDPOINT_SIDE: BENCHMARK, BASELINE_SIDE: BASELINE}
    return lambda side, done, total: step(names[side], done, total)


def _answer(answer: GenerateResult | EndpointError) -> GenerateResult | None:
    """A request's answer, None when it failed."""
    return None if isinstance(answer, EndpointError) else answer


def _bench(run: _Run, prompts: list[Prompt], **how: Unpack[BenchHow]) -> BenchResult | None:
    """One more benchmark of the endpoint for the profile (warm from the diagnosis's own
    requests: no warmup); None when every request fails."""
    return _bench_answers(run, prompts, **how)[0]


def _bench_answers(
    run: _Run, prompts: list[Prompt], **how: Unpack[BenchHow]
) -> tuple[BenchResult | None, list[GenerateResult | None] | None]:
    """`_bench`, and each request's answer (None where it failed; None for all when every one
    failed)."""
    options = run.options
    sent = BenchHow(
        concurrency=options.concurrency, max_new_tokens=options.max_new_tokens, warmup=0
    )
    sent.update(how)
    try:
        with _served(run) as engine:
            bench, answers = bench_with_answers(engine, prompts, **sent)
            return bench, [_answer(a) for a in answers]
    except EndpointError as e:
        run.warnings.append(f"profile: a benchmark of {options.endpoint} failed: {e}")
        if all(n.check != "profile-benchmark" for n in run.not_checked):  # the first one says why
            run.not_checked.append(
                NotChecked(
                    "profile-benchmark",
                    "a benchmark of the acceptance profile failed, so part of the profile is "
                    "missing",
                    action="run the diagnosis again",
                    error=str(e),
                )
            )
        return None, None


def _bench_rows(
    run: _Run, sends: list[tuple[list[Prompt], BenchHow]], reference: BenchResult
) -> tuple[list[tuple[BenchResult, list[GenerateResult | None]] | None], int]:
    """The same prompts benchmarked in other settings (a temperature, a prompt format), all in
    step, in waves (`wave_end`) until every setting's row and the reference benchmark on the same
    prompts are measured closely enough to show a material gap (`rows_settled`), or the prompts
    run out: prompts beyond what the statistics need are not sent. Each setting's benchmark and
    answers (None where a wave failed: its warning says why), and how many prompts each was sent.
    Where answers carry no per-request statistics (read from server counters), every prompt goes in
    one wave."""
    total = len(reference.requests)
    per_request = bool(request_accept_lengths(reference))
    done: list[tuple[BenchResult, list[GenerateResult | None]] | None] = [None] * len(sends)
    failed = [False] * len(sends)
    sent = 0
    while sent < total:
        upto = wave_end(sent, total, run.options.concurrency) if per_request else total
        for i, (prompts, how) in enumerate(sends):
            if failed[i]:
                continue
            bench, answers = _bench_answers(run, prompts[sent:upto], **how)
            if bench is None or answers is None:
                failed[i], done[i] = True, None
                continue
            earlier = done[i]
            done[i] = (
                (bench, answers)
                if earlier is None
                else (join_benches(earlier[0], bench), [*earlier[1], *answers])
            )
        sent = upto
        rows = [d[0] for d in done if d is not None]
        if rows_settled(rows, reference, sent):
            break
    return done, sent


def profile_temperatures(run: _Run, prompts: list[Prompt], measured: BenchResult) -> list:
    """Measured accept length and tok/s at each temperature, on the same prompts (temperature 0
    is the benchmark itself on those prompts)."""
    extra = [t for t in run.options.temperatures if t != 0]
    if extra:
        listed = ", ".join(f"{t:g}" for t in extra)
        run.stages.report(PROFILE_TEMPERATURES, 0.0, f"profiling: temperature {listed}")
    sends = [(prompts, BenchHow(temperature=t)) for t in extra]
    done, n = _bench_rows(run, sends, measured) if extra else ([], len(prompts))
    benches = dict(zip(extra, (None if d is None else d[0] for d in done), strict=True))
    rows = []
    for temperature in run.options.temperatures:
        bench = measured if temperature == 0 else benches[temperature]
        rows.append(
            TemperatureRow(
                temperature,
                None if bench is None else accept_length_on_first(bench, n),
                tok_s_on_first(bench, n),
                accept_length_noise(bench, n),
                n,
            )
        )
    return rows


def profile_formats(
    run: _Run, prompts: list[Prompt], measured: BenchResult, serving: Side
) -> tuple[list[FormatRow], NotProfiled | None]:
    """The same prompts raw and through the served model's chat template (and its thinking
    switch): measured accept length, and the standalone draft on a capture of each."""
    from eagle3dash.capture import CaptureError
    from eagle3dash.prompt_format import RAW, format_prompts

    try:
        tokenizer = local_tokenizer(run.options.target, run.server.model_path)
    except InputError:
        return [], NotProfiled(
            "prompt_format",
            "no local tokenizer of the target to apply its chat template with",
            option="target",
        )
    formatted, reason = format_prompts(prompts, tokenizer)
    # The benchmark and the serving capture sent the prompts raw: their row is the benchmark's.
    variants = [v for v in formatted if v.format != RAW]
    run.stages.report(PROFILE_FORMATS, 0.0, "profiling: prompt formats")
    capturing = run.serving_capture is not None and run.draft is not None
    # When a capture follows, the benchmark sends its token ids, and it keeps the completions.
    ids = [_fit_chunk(run, v.ids) if capturing else None for v in variants]
    sends = [
        (list(v.prompts) if i is None else _as_ids(list(v.prompts), i), BenchHow())
        for v, i in zip(variants, ids, strict=True)
    ]
    done, n = _bench_rows(run, sends, measured) if variants else ([], len(prompts))
    if n == len(prompts):
        raw_sim = serving.sim_accept_length
    else:  # the serving capture's sequences are the prompts in order: replay the first n
        raw_sim = (
            None
            if serving.eval is None
            else serving.eval.simulated_accept_length_over(set(range(n)), run.steps)
        )
    rows = [
        FormatRow(
            RAW,
            n,
            accept_length_on_first(measured, n),
            raw_sim,
            tok_s_on_first(measured, n),
            accept_length_noise(measured, n),
        )
    ]
    for variant, variant_ids, sent in zip(variants, ids, done, strict=True):
        bench, answers = sent or (None, None)
        sim = None
        if variant_ids is not None and answers is not None:
            try:
                capture = _capture(run, variant_ids[:n], PROFILE_FORMATS, answers)
            except (CaptureError, EndpointError) as e:
                run.warnings.append(f"profile: the {variant.format} capture failed: {e}")
                run.not_checked.append(
                    NotChecked(
                        f"profile-{variant.format}-capture",
                        f"the serving capture of the {variant.format} prompts failed, so that "
                        "row has no simulated accept length",
                        action=_capture_remedy(run),
                        error=str(e),
                    )
                )
            else:
                # the row's simulated accept length needs the served steps only
                evaluated = _evaluate(run, capture, tuple(capture.taps), steps=run.steps)
                sim = None if evaluated is None else evaluated.simulated_accept_length(run.steps)
        rows.append(
            FormatRow(
                variant.format,
                n,
                None if bench is None else bench.accept_length,
                sim,
                tok_s_on_first(bench, n),
                accept_length_noise(bench, n),
            )
        )
    missing = None if reason is None else NotProfiled("prompt_format", reason)
    return rows, missing


def profile_stage(
    run: _Run,
    prompts: list[Prompt],
    training: Side,
    serving: Side,
    measured: BenchResult,
    baseline: BenchResult | None,
) -> Profile:
    """The acceptance profile from the run's own captures and requests, plus a few requests per
    temperature and prompt format (eagle3dash/profile.py)."""
    run.stages.report(PROFILE_TEMPERATURES)
    steps = run.steps
    # A training dump holds other sequences than the prompts: no per-category training side.
    training_eval = training.eval if training.source != TRAINING_DUMP else None
    profile = Profile(
        steps=steps,
        per_position=per_position(steps, training.eval, serving.eval, measured),
        per_category=category_rows(
            [p.category for p in prompts], steps, measured, baseline, training_eval, serving.eval
        ),
    )
    profile.temperature = profile_temperatures(run, prompts, measured)
    run.stages.report(PROFILE_FORMATS)
    profile.prompt_format, missing = profile_formats(run, prompts, measured, serving)
    if missing is not None:
        profile.not_profiled.append(missing)
    run.stages.report(PROFILE_STEPS)
    if run.server.speculative is None:
        profile.not_profiled.append(
            NotProfiled("steps_advice", "the endpoint runs no speculative decoding")
        )
        return profile
    if baseline is not None:  # without one the costs cannot be told apart: no timing requests
        one_token = _bench(run, prompts[:3], max_new_tokens=1, concurrency=1, warmup=0)
        latencies = (
            []
            if one_token is None
            else [r.latency_s for r in one_token.requests if r.latency_s is not None]
        )
        profile.step_costs = step_costs(measured, latencies, steps, baseline)
        if profile.step_costs is None and measured.acceptance_source == "metrics-delta":
            profile.not_profiled.append(
                NotProfiled(
                    "steps_advice",
                    "tok/s per setting needs each request's verify rounds, and this server "
                    "counts them over all requests only (its /metrics counters)",
                )
            )
    else:
        profile.not_profiled.append(
            NotProfiled(
                "steps_advice",
                "tok/s per setting needs a verify forward's cost, which the baseline's time per "
                "token gives",
                option="baseline",
            )
        )
    profile.steps_advice, profile.recommended = steps_advice(
        steps, measured, serving.eval, profile.step_costs, flags=run.steps_flags
    )
    if serving.eval is None:  # what stopped the serving side stops this part too
        states = next((n for n in run.not_checked if n.check == "serving-states"), None)
        profile.not_profiled.append(
            NotProfiled(
                "steps_advice",
                "settings past the server's steps need the standalone draft on the served states",
                option=None if states is None else states.option,
                action=None if states is None else states.action,
                error=serving.capture_error,
            )
        )
    return profile


def effective_layouts(run: _Run, training: Side, serving: Side) -> LayoutComparison:
    """The sides as the layout rules read them: the strongest evidence on each side, with
    SGLang's rule, notes and capture error kept on the serving side."""
    predicted = run.prediction.serving
    served = LayoutResult(
        serving.layout,
        predicted.rule,
        list(predicted.notes),
        decode_layout=predicted.decode_layout,
        error=predicted.error,
    )
    trained = LayoutResult(training.layout, training.detail.rstrip(".") + ".")
    engine = run.server.rules_engine()
    rules = engine_rules.rules_for(engine)
    fell_back = rules.reads_no_ids(run.report.spec) and serving.source == PREDICTED
    defaults = rules.default_capture(run.depth, run.arch)
    decode = predicted.decode_layout
    return LayoutComparison(
        trained,
        served,
        diff(training.layout, serving.layout, defaults if fell_back else None),
        diff(training.layout, decode, defaults) if decode is not None else None,
    )


def find(run: _Run, diagnosis: Diagnosis) -> list[Finding]:
    """Every rule over what the stages measured."""
    return diagnose(
        Evidence(
            report=run.report,
            draft_path=run.options.draft,
            num_target_layers=run.depth,
            arch=run.arch,
            server=run.server,
            engine=run.server.engine,
            vllm_runner=run.server.rules_engine().runner or inferred_runner(diagnosis.serving),
            layouts=effective_layouts(run, diagnosis.training, diagnosis.serving),
            prediction=run.prediction,
            training=diagnosis.training,
            serving=diagnosis.serving,
            sglang_version=run.server.version,
            trainer=run.trainer,
            training_sglang_version=run.options.training_sglang_version,
            target_json_sha256=json_digests(run.options.target) or None,
            detection=run.detection,
            training_eval=diagnosis.training.eval,
            serving_eval=diagnosis.serving.eval,
            identity=diagnosis.identity,
            measured=diagnosis.measured,
            baseline=diagnosis.baseline,
            profile=diagnosis.profile,
            prompt_tokens=run.tokens or None,
        )
    )


def _import_torch_stack() -> None:
    """Import what the local stages need (torch, transformers: seconds of imports), ahead of
    them. Only a head start: transformers' lazy module can refuse a name to one thread while
    another imports it (ImportError), and then the stage that needs it imports it itself."""
    try:
        import torch  # noqa: F401
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401

        from eagle3dash import capture, detective, draft  # noqa: F401
    except ImportError:
        pass


def run_diagnosis(
    options: DiagnoseOptions,
    progress: Progress | None = None,
    costs: dict[str, float] | None = None,
) -> Diagnosis:
    """Run every stage against the endpoint and return the diagnosis with its findings (and the
    wall time of each stage, `timings`). `costs`: seconds per unit of each stage from earlier
    runs (`unit_costs`), which weigh the progress bar."""
    progress = progress or _no_progress
    started = time.perf_counter()
    # The imports run while the probe and the serving capture wait on the network.
    importing = threading.Thread(target=_import_torch_stack, name="eagle3dash-imports", daemon=True)
    importing.start()
    stages = Stages(plan_stages(options), progress, expected_seconds(options, costs))
    # Read before any request, so that a bad line (a token id past the target's vocabulary or
    # int64) is named by its file and line rather than by a server's bare 400.
    prompts = load_prompts(options.prompts, vocabulary(options.target))[: options.num_prompts]
    run = _start(options, stages)
    run.importing = importing
    serving_tokens(run, prompts)
    measured, baseline, served = benchmark(run, prompts)
    capture_serving(run, served)
    if run.serving_capture is not None or options.target or options.train_states:
        load_standalone_draft(run)
    capture_target(run)
    read_dump(run)
    run_detective(run)
    run.stages.report(EVALUATE)
    training = training_side(run)
    serving = serving_side(run, training, measured)
    identity = draft_identity(run)
    profile = (
        profile_stage(run, prompts, training, serving, measured, baseline)
        if options.profile
        else None
    )
    diagnosis = Diagnosis(
        options=options,
        report=run.report,
        server=run.server,
        num_target_layers=run.depth,
        arch=run.arch,
        steps=run.steps,
        prediction=run.prediction,
        training=training,
        serving=serving,
        measured=measured,
        baseline=baseline,
        detection=run.detection,
        identity=identity,
        not_checked=run.not_checked,
        warnings=run.warnings,
        profile=profile,
    )
    stages.close()
    tic = time.perf_counter()
    diagnosis.findings = find(run, diagnosis)
    stages.timings[TIMING_KEYS[FINDINGS]] = time.perf_counter() - tic
    stages.timings["total"] = time.perf_counter() - started
    diagnosis.timings = stages.timings
    progress(1.0, "done")
    return diagnosis
