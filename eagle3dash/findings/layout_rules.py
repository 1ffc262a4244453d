"""Rules over the layouts: which taps training fed and which taps serving feeds, and the fix.

Sources: SGLang's set_eagle3_layers_to_capture (models/llama.py, models/deepseek_v2.py), where the
ids are read (model_runner.py; 0.5.23 spec_aux_hidden_state.py), cuda_graph_runner.py (PR #22836),
the DeepSeek/Kimi first-id rule (PR #25454); the fix itself comes from `sglang_rules.find_fix`.
On vLLM (Evidence.engine "vllm") the serving side follows `vllm_rules` (vLLM 0.33's model runners:
v1/worker/gpu_model_runner.py, v1/worker/gpu/spec_decode/eagle/eagle3_utils.py) and the fix is
the top-level key (`vllm_rules.find_fix`), written beside the nested SGLang ids
(`engine_rules.dual_key_fix`) so one config.json serves on both engines.
"""

from __future__ import annotations

import json
from typing import Any

from eagle3dash import vllm_rules
from eagle3dash.engine_rules import dual_key_fix
from eagle3dash.evidence_levels import LEVEL_DETECTIVE, LEVEL_PREDICTED, OBSERVED
from eagle3dash.findings.core import Evidence, Finding, _fmt, layouts_basis
from eagle3dash.findings.impact import layout_cost
from eagle3dash.findings.training_rules import unsettled_readings
from eagle3dash.layout import (
    Layout,
    LayoutDiff,
    default_layout,
    default_output_of_ids,
    describe_tap,
    format_layout,
    join_words,
    layout_to_json,
    taps_phrase,
)
from eagle3dash.noise import MATERIAL_ACCEPT_LENGTH
from eagle3dash.severity import Severity
from eagle3dash.sglang_rules import (
    KNOWN_SGLANG_VERSIONS,
    LayoutFix,
    ObservedMapping,
    arch_family,
    default_capture,
    eagle_config_json,
    find_fix,
    nested_ids,
    serving_layout,
    try_parse_version,
    version_text,
)
from eagle3dash.trainers import SPECFORGE_SGLANG_VERSION, TRAINERS, training_layout


def _ids_json(ids: list[int] | tuple[int, ...]) -> str:
    return json.dumps(list(ids))


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


def _releases_text(fix: LayoutFix) -> str:
    """'SGLang 0.5.23 (and every release read from 0.5.16 on)' or 'SGLang 0.5.12'."""
    head = f"SGLang {fix.release}"
    known = list(KNOWN_SGLANG_VERSIONS)
    if len(fix.releases) > 1 and fix.releases == known[known.index(fix.releases[0]) :]:
        return f"{head} (every release read from {fix.releases[0]} on feeds them)"
    if len(fix.releases) > 1:
        return f"{head} (the releases read that feed them: {join_words(fix.releases)})"
    return head


def _layout_fix(
    e: Evidence, target: Layout, serving: Layout | None, observed: ObservedMapping | None = None
) -> tuple[str, dict]:
    """The concrete fix that makes this server feed `target`: on vLLM the top-level key
    (`_vllm_fix`); on SGLang the nested ids (`_sglang_fix`), and, when the config also holds
    top-level ids, whether they feed vLLM the same taps (`_top_level_on_vllm`)."""
    if e.engine == "vllm":  # vLLM's rules; an observed mapping is SGLang's id reading
        return _vllm_fix(e, target)
    text, data = _sglang_fix(e, target, serving, observed)
    spec = e.spec
    if spec is not None and e.num_target_layers is not None and vllm_rules.top_level_ids(spec):
        text += " " + _top_level_on_vllm(e, target)
    return text, data


def _sglang_fix(
    e: Evidence, target: Layout, serving: Layout | None, observed: ObservedMapping | None
) -> tuple[str, dict]:
    """The fix that makes this SGLang server feed `target` (`sglang_rules.find_fix`), and its
    data: config_ids and the sglang_version they hold on; needs_released_build when the server
    departs from its release's rules and the ids are stock SGLang's; empty when only retraining
    helps."""
    spec, n = e.spec, e.num_target_layers
    if spec is None or n is None:
        return (
            "Set eagle_config.eagle_aux_hidden_state_layer_ids in the draft's config.json to the "
            "layers training used (SGLang reads id i as the output of layer i); give the target's "
            "layer count for the exact ids.",
            {},
        )
    fix = find_fix(target, spec, n, e.version_tuple(), e.arch_name(), e.cuda_graph(), observed)
    assumed = " (assumed: the server's version is unknown)" if fix.version_assumed else ""
    v = version_text(fix.version)
    phrase = taps_phrase(target, n)

    def cfg(ids: list[int]) -> str:
        return eagle_config_json(ids, aux_on=not spec.use_aux_hidden_state)

    if fix.ids is not None and fix.ids_from == "observed":
        stock = ""
        if fix.release_ids is not None:
            stock = f" On a released build ({_releases_text(fix)}) the ids are "
            stock += f"{_ids_json(fix.release_ids)}."
        return (
            f"Set {cfg(fix.ids)} in the draft's config.json and restart the server: this server "
            f"departs from SGLang {v}'s rules, and the ids it was observed to take make it feed "
            f"{phrase}.{stock}",
            {"config_ids": fix.ids, "sglang_version": v, "ids_from": "observed"},
        )
    if fix.ids is not None:
        return (
            f"Set {cfg(fix.ids)} in the draft's config.json and restart the server: SGLang {v}"
            f"{assumed} then captures {phrase}.",
            {"config_ids": fix.ids, "sglang_version": v},
        )
    retrain = (
        f"retrain the draft on the layers serving can feed ({taps_phrase(serving, n)})"
        if serving
        else "retrain the draft on layers SGLang captures, e.g. its defaults "
        f"({taps_phrase(default_layout(n), n)}; SpecForge ids "
        f"{_ids_json(default_output_of_ids(n))})"
    )
    data: dict = {}
    options = []
    if fix.release is not None and fix.release_ids is not None:
        build = "a released build of " if fix.departs else ""
        options.append(
            f"serve with {build}{_releases_text(fix)} and set {cfg(fix.release_ids)} in the "
            "draft's config.json"
        )
        data = {"config_ids": fix.release_ids, "sglang_version": fix.release}
        if fix.departs:
            data["needs_released_build"] = True
    if fix.eager_ids is not None:
        options.append(
            f"keep SGLang {v} but restart with --disable-cuda-graph (slow) and "
            f"{eagle_config_json(fix.eager_ids)} in config.json"
        )
    options.append(retrain)
    if fix.departs:
        text = (
            f"No ids are known to make this server feed the training taps: {fix.why_not}, so "
            "stock SGLang's ids hold only on a released build. "
        )
    elif fix.release is None:
        text = (
            f"No release of SGLang read ({KNOWN_SGLANG_VERSIONS[0]} to "
            f"{KNOWN_SGLANG_VERSIONS[-1]}) feeds these taps; on SGLang {v}{assumed}: "
            f"{fix.why_not}. "
        )
        return text + "Only retraining helps: " + retrain + ".", data
    else:
        text = f"No ids reproduce the training taps on SGLang {v}{assumed}: {fix.why_not}. "
    text += "Either " + "; or ".join(options) + "."
    return text, data


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
    return (
        f"To serve the same file on SGLang {fix.sglang_version} and vLLM {fix.vllm_version} "
        f"alike, write both keys: {eagle_config_json(fix.nested_ids)}, "
        f"{vllm_rules.top_level_json(fix.top_level_ids)} (SGLang reads only the nested list; "
        "both vLLM runners read the top-level one first).",
        {"dual_key": fix.config()},
    )


def _vllm_fix(e: Evidence, target: Layout) -> tuple[str, dict]:
    """The fix on vLLM: the top-level ids that make this release's runner feed `target`
    (`vllm_rules.find_fix`), with the dual-key config for a draft also served on SGLang."""
    spec, n = e.spec, e.num_target_layers
    engine = e.serving_engine()
    if spec is None or n is None:
        return (
            f"Set the top-level {vllm_rules.TOP_LEVEL_KEY} in the draft's config.json to the "
            "taps training used (vLLM reads id k as the state after k blocks); give the "
            "target's layer count for the exact ids.",
            {},
        )
    fix = vllm_rules.find_fix(
        target, spec, n, engine.rules_version(), engine.vllm_runner(), e.arch_name()
    )
    phrase = taps_phrase(target, n)
    if fix.ids is None:
        return (
            f"No ids make {engine.label()} feed {phrase}: {fix.why_not}. Retrain the draft on "
            "taps vLLM can feed (e.g. its defaults, "
            f"{taps_phrase(vllm_rules.default_capture(n), n)}).",
            {},
        )
    text = (
        f"Set {vllm_rules.top_level_json(fix.ids)} at the top level of the draft's config.json and "
        f"restart vLLM: both of its runners read that key first, so {engine.label()} then "
        f"feeds {phrase}."
    )
    if fix.notes:
        text += " " + " ".join(fix.notes)
    both, data = _both_engines_sentence(e, target)
    if both:
        text += " " + both
    return text, {
        "top_level_ids": fix.ids,
        "vllm_version": fix.version,
        "vllm_runner": fix.runner,
        **data,
    }


def _eagle3_capture(e: Evidence) -> bool:
    """Whether the server captures aux states for its draft at all (EAGLE3, or no server known):
    with EAGLE or without speculation no layout is fed, and other rules say so."""
    sp = e.speculative
    if e.server is not None and sp is None:
        return False
    return sp is None or str(sp.algorithm or "").upper() == "EAGLE3"


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
    fix_ids = det.fix_ids  # the served engine's ids (on vLLM the fix below is vLLM's own)
    fix = (
        f"Set {eagle_config_json(fix_ids)} so SGLang feeds "
        f"{format_layout(best)}, and record that layout with the checkpoint."
        if fix_ids
        else "Record the layout the draft performs best with beside the checkpoint, and serve "
        "it with ids that capture those taps (or retrain on the serving layout)."
    )
    if e.engine == "vllm":
        fix = _vllm_fix(e, best)[0] + " Record that layout with the checkpoint."
    return [
        Finding(
            "detected-layout",
            severity,
            f"The draft performs best with {taps_phrase(best, n)}, not with "
            f"{taps_phrase(claimed, n)} as its config implies.",
            f"Layout sweep over {det.num_sequences} sequences: best {format_layout(best)} top-1 "
            f"{top.top1:.1%}, simulated accept length {_fmt(top.sim_accept_length)}{gap}. "
            + " ".join(det.verdict[1:3]),
            fix,
            {"best": layout_to_json(best), "claimed": layout_to_json(claimed), "fix_ids": fix_ids},
            LEVEL_DETECTIVE,
        )
    ]


def _observed_mapping(e: Evidence) -> ObservedMapping | None:
    """The id-to-tap mapping this server was observed to apply, when it departs from SGLang's
    rules: each config id and the tap its slot was matched to (empty when the config has no ids
    the server reads); None when the served slots were not observed or follow the rules."""
    side = e.serving
    if side is None or side.source != OBSERVED or side.prediction is None:
        return None
    if tuple(side.layout) == tuple(side.prediction):
        return None
    ids = nested_ids(e.spec) if e.spec is not None else None
    if ids is None or len(ids) != len(side.layout):
        return ()
    return tuple(zip(sorted(ids), side.layout, strict=True))


def _server_fix(e: Evidence, target: Layout, serving: Layout | None) -> tuple[str, dict]:
    """The fix for THIS server: from the id-to-tap mapping it was observed to apply when that
    departs from SGLang's rules, else from its release's rules."""
    return _layout_fix(e, target, serving, _observed_mapping(e))


def rule_server_feeds_other_taps(e: Evidence) -> list[Finding]:
    """The server feeds other taps than SGLang's rules predict for its version and architecture
    (a patched build, a fork, a release newer than the rules): what the server returned, matched
    slot by slot, against set_eagle3_layers_to_capture's rule (models/llama.py)."""
    side = e.serving
    if side is None or side.source != OBSERVED or side.prediction is None:
        return []
    observed, predicted = tuple(side.layout), tuple(side.prediction)
    if observed == predicted:
        return []
    n = e.num_target_layers
    label = e.engine_label()
    margins = side.slot_margins or []
    per_slot = "; ".join(
        f"slot {i}: {describe_tap(o, n)} observed, {describe_tap(p, n)} predicted"
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
            "Check which SGLang build the server runs (a fork or a patched "
            "set_eagle3_layers_to_capture), serve with a released version whose rule is known, "
            "and run the diagnosis again."
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
        )
    ]


def rule_aux_ids_not_read(e: Evidence) -> list[Finding]:
    """The aux ids are missing or top-level: SGLang captures its defaults [2, N//2, N-3].

    model_runner.py (0.5.23 spec_aux_hidden_state.py) reads only the nested eagle_config key.
    (On vLLM, rule_vllm_ids_not_read.)
    """
    spec = e.spec
    if spec is None or spec.aux_ids_location == "eagle_config" or e.engine == "vllm":
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
            f"The aux layer ids {_ids_json(spec.aux_layer_ids or ())} sit at the top level of "
            "config.json, where SGLang does not read them"
        )
    else:
        where = "The draft's config.json has no eagle_config.eagle_aux_hidden_state_layer_ids"
    defaults = default_capture(n, e.arch_name()) if n is not None else None
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
        f"{_ids_json(spec.aux_layer_ids) if spec.aux_layer_ids is not None else 'none'}; "
        "SGLang reads only eagle_config.eagle_aux_hidden_state_layer_ids and silently falls back "
        "to [2, N//2, N-3] (model_runner.py / spec_aux_hidden_state.py)."
    )
    if training is not None:
        evidence += f" Training: {_slots_text(training, n)}."
        fix, data = _layout_fix(e, training, None)
    else:
        fix = (
            f"Add the nested key to config.json: {eagle_config_json(None)}, with the ids of the "
            "layers training used (SGLang reads id i as the output of layer i)."
        )
        data = {}
    return [Finding("aux-ids-not-read", severity, title, evidence, fix, data, LEVEL_PREDICTED)]


def _top_level_on_vllm(e: Evidence, training: Layout) -> str:
    """Whether the top-level ids the SGLang fix leaves in place feed vLLM the training taps
    (vLLM reads that key first, id k = the state after k blocks); when not, the dual-key
    config that does."""
    spec, n = e.spec, e.num_target_layers
    assert spec is not None and n is not None
    ids = vllm_rules.top_level_ids(spec) or ()
    served = {
        runner: vllm_rules.serving_layout(spec, n, runner=runner, arch=e.arch_name())
        for runner in vllm_rules.RUNNERS
    }
    if all(r.error is None and r.layout == training for r in served.values()):
        return (
            f"The top-level key {_ids_json(ids)} can stay: vLLM reads it first, and it feeds "
            "vLLM the training taps too."
        )
    both, _ = _both_engines_sentence(e, training)
    fed = taps_phrase(served[vllm_rules.DEFAULT_RUNNER].layout, n)
    return (
        f"Do not count on the top-level key {_ids_json(ids)} for vLLM: vLLM reads it first, as "
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
    if vllm_rules.config_ids(spec, engine.vllm_runner()).ids is not None:
        return []
    where = (
        f"eagle_config.eagle_aux_hidden_state_layer_ids {_ids_json(spec.aux_layer_ids)}"
        if spec.aux_ids_location == "eagle_config"
        else f"the config's ids {_ids_json(spec.aux_layer_ids)}"
    )
    if n is None:
        title = (
            f"{engine.label()} never reads {where}, so the target feeds its default layers "
            "(2, N//2, N-3); give the target's layer count to compare them with training."
        )
        fix = (
            f"Set the top-level {vllm_rules.TOP_LEVEL_KEY} to the taps training used (vLLM "
            "reads id k as the state after k blocks)."
        )
        return [
            Finding("vllm-ids-not-read", Severity.WARNING, title, title, fix, {}, LEVEL_PREDICTED)
        ]
    defaults = vllm_rules.default_capture(n)
    training = e.layouts.training.layout if e.layouts is not None else None
    evidence = (
        f"{engine.label()} reads the top-level {vllm_rules.TOP_LEVEL_KEY}, the dflash/dspark "
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
        fix, data = _vllm_fix(e, training or defaults)
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
    fix, data = _vllm_fix(e, training)
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
                f"{_ids_json(default_output_of_ids(n))}) and drop the custom ids"
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
    tv = try_parse_version(tv_text)
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
        at_train = serving_layout(spec, n, tv_text, arch, cuda_graph=False)
        at_serve = serving_layout(spec, n, v_text, arch, cuda_graph=False)
        if at_train.layout != at_serve.layout:
            fix, data = _layout_fix(e, at_train.layout, at_serve.layout)
            out.append(
                Finding(
                    "capture-rule-version",
                    Severity.WARNING,
                    f"The draft was trained through SGLang {tv_text} (SpecForge 0.2 and later "
                    f"capture through SGLang), whose {arch_family(arch)} id rule reads ids "
                    f"{_ids_json(spec.aux_layer_ids or ())} differently from SGLang {v}.",
                    f"SGLang {tv_text}: {_slots_text(at_train.layout, n)} ({at_train.rule}) "
                    f"SGLang {v}: {_slots_text(at_serve.layout, n)} ({at_serve.rule})",
                    fix + f" Or serve with SGLang {tv_text}, the version training used.",
                    {**data, "training_sglang_version": tv_text},
                )
            )
    return out
