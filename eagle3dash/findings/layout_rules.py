"""Rules over the layouts: which taps training fed and which taps serving feeds, and the fix.

Sources: SGLang's set_eagle3_layers_to_capture (models/llama.py, models/deepseek_v2.py), where the
ids are read (model_runner.py; 0.5.23 spec_aux_hidden_state.py), cuda_graph_runner.py (PR #22836),
the DeepSeek/Kimi first-id rule (PR #25454); the fix itself comes from `sglang_rules.find_fix`.
"""

from __future__ import annotations

import json
from typing import Any

from eagle3dash.evidence_levels import LEVEL_DETECTIVE, LEVEL_PREDICTED, OBSERVED
from eagle3dash.findings.core import Evidence, Finding, _fmt, layouts_basis
from eagle3dash.findings.impact import layout_cost
from eagle3dash.findings.training_rules import unsettled_readings
from eagle3dash.layout import (
    Layout,
    LayoutDiff,
    default_layout,
    describe_tap,
    format_layout,
    join_words,
    taps_phrase,
)
from eagle3dash.noise import MATERIAL_ACCEPT_LENGTH
from eagle3dash.sglang_rules import (
    KNOWN_SGLANG_VERSIONS,
    LayoutFix,
    ObservedMapping,
    arch_family,
    default_capture,
    find_fix,
    nested_ids,
    serving_layout,
    try_parse_version,
    version_text,
)
from eagle3dash.trainers import SPECFORGE_SGLANG_VERSION, TRAINERS, training_layout
from eagle3dash.vllm_rules import TOP_LEVEL_KEY
from eagle3dash.vllm_rules import find_fix as vllm_find_fix


def _ids_json(ids: list[int] | tuple[int, ...]) -> str:
    return json.dumps(list(ids))


def _eagle_config_json(ids: list[int] | tuple[int, ...]) -> str:
    return '"eagle_config": {"eagle_aux_hidden_state_layer_ids": ' + _ids_json(ids) + "}"


def _slots_text(layout: Layout, num_layers: int | None) -> str:
    """'slot 0: embedding output, slot 1: after block 3'."""
    slots = [f"slot {i}: {describe_tap(tap, num_layers)}" for i, tap in enumerate(layout)]
    return ", ".join(slots) or "no taps"


def _kind_phrase(d: LayoutDiff, engine: str = "SGLang") -> str:
    """The LayoutDiff kind in plain words."""
    if d.kind == "shifted-slot":
        return "every slot is shifted by one"
    if d.kind == "off-by-one":
        later = all(b.depth > a.depth for a, b in zip(d.training, d.serving, strict=False))
        return f"every slot is one block {'later' if later else 'earlier'} than in training"
    if d.kind == "defaults-used":
        return f"serving uses {engine}'s default layers instead of the configured ones"
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


def _default_ids(n: int) -> list[int]:
    """SpecForge's default output-of ids, which SGLang captures as its default taps."""
    return [1, n // 2 - 1, n - 4]


def _releases_text(fix: LayoutFix) -> str:
    """'SGLang 0.5.23 (and every release read from 0.5.16 on)' or 'SGLang 0.5.12'."""
    head = f"SGLang {fix.release}"
    known = list(KNOWN_SGLANG_VERSIONS)
    if len(fix.releases) > 1 and fix.releases == known[known.index(fix.releases[0]) :]:
        return f"{head} (every release read from {fix.releases[0]} on feeds them)"
    if len(fix.releases) > 1:
        return f"{head} (the releases read that feed them: {join_words(fix.releases)})"
    return head


def _vllm_layout_fix(e: Evidence, target: Layout, serving: Layout | None) -> tuple[str, dict]:
    """The fix on a vLLM server (`vllm_rules.find_fix`): top-level ids, which both model runners
    read first, and the nested SGLang ids kept beside them when the draft has them (one file
    then serves both engines); else retraining."""
    spec, n = e.spec, e.num_target_layers
    if spec is None or n is None:
        return (
            f"Set {TOP_LEVEL_KEY} at the top level of the draft's config.json to the taps "
            "training used (vLLM reads id k as the state after k blocks); give the target's "
            "layer count for the exact ids.",
            {},
        )
    fix = vllm_find_fix(target, spec, n, e.version(), e.vllm_runner(), e.arch_name())
    where = e.serving_name()
    phrase = taps_phrase(target, n)
    if fix.ids is None:
        fed = taps_phrase(serving, n) if serving else "taps vLLM captures"
        return (
            f"No ids make {where} feed {phrase}: {fix.why_not}. Retrain the draft on {fed}.",
            {},
        )
    text = (
        f'Set "{TOP_LEVEL_KEY}": {_ids_json(fix.ids)} at the top level of the draft\'s '
        f"config.json and restart the server: {where} reads that key first and then feeds "
        f"{phrase}."
    )
    nested = nested_ids(spec)
    if nested is not None:
        text += (
            f" Keep {_eagle_config_json(nested)} for SGLang, which reads only the nested key: "
            "one file then serves both engines."
        )
    text += "".join(" " + note for note in fix.notes)
    data = {
        "config_ids": fix.ids,
        "config_key": TOP_LEVEL_KEY,
        "vllm_version": fix.version,
        "vllm_runner": fix.runner,
    }
    return text, data


def _layout_fix(
    e: Evidence, target: Layout, serving: Layout | None, observed: ObservedMapping | None = None
) -> tuple[str, dict]:
    """The concrete fix that makes this server feed `target` (`sglang_rules.find_fix`), and its
    data: config_ids and the sglang_version they hold on; needs_released_build when the server
    departs from its release's rules and the ids are stock SGLang's; empty when only retraining
    helps."""
    if e.on_vllm:
        return _vllm_layout_fix(e, target, serving)
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
    aux_on = "" if spec.use_aux_hidden_state else ', "use_aux_hidden_state": true'
    v = version_text(fix.version)
    phrase = taps_phrase(target, n)

    def cfg(ids: list[int]) -> str:
        return _eagle_config_json(ids)[:-1] + aux_on + "}"

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
        f"({taps_phrase(default_layout(n), n)}; SpecForge ids {_ids_json(_default_ids(n))})"
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
            f"{_eagle_config_json(fix.eager_ids)} in config.json"
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
    where = e.serving_name()
    lines = [
        f"Training: {_slots_text(d.training, n)}." + (f" {training.rule}" if training else ""),
        f"Serving on {where}: {_slots_text(d.serving, n)}."
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
        title = f"{where} cannot capture the taps this draft was trained on: {error}."
        return [Finding("capture-error", "critical", title, " ".join(lines), fix, data, basis)]
    title = (
        f"Serving feeds the draft {taps_phrase(d.serving, n)}, but training fed "
        f"{taps_phrase(d.training, n)}: {_kind_phrase(d, 'vLLM' if e.on_vllm else 'SGLang')}."
    )
    severity, impact = _impact(e, lines)
    data["impact"] = impact
    # one assumed reading among several that disagree is no ground for a critical finding
    unsettled = unsettled_readings(e)
    if unsettled is not None:
        lines.append(
            "The training side is one assumed reading of several "
            f"({', '.join(r.trainer for r in unsettled)}); see training-layout-unsettled."
        )
        if severity == "critical":
            severity = "warning"
    return [Finding("layout-mismatch", severity, title, " ".join(lines), fix, data, basis)]


def _impact(e: Evidence, lines: list[str]) -> tuple[str, str]:
    """The severity of a difference between the sides by what it costs (findings/impact.py),
    with the cost added to the evidence lines; critical, unmeasured, when no cost was measured."""
    cost = layout_cost(e)
    if cost is None:
        lines.append(
            "Cost not measured (no training-side simulation, or a draft that accepts under "
            f"{MATERIAL_ACCEPT_LENGTH} drafts per round even there): the severity is the rules' "
            "prediction."
        )
        return "critical", "not measured"
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
    severity = "critical" if fed != best and not training_is_best else "warning"
    fix_ids = det.fix_ids
    fix = (
        f'Set "eagle_config": {{"eagle_aux_hidden_state_layer_ids": {fix_ids}}} so SGLang feeds '
        f"{format_layout(best)}, and record that layout with the checkpoint."
        if fix_ids
        else "Record the layout the draft performs best with beside the checkpoint, and serve "
        "it with ids that capture those taps (or retrain on the serving layout)."
    )
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
            {"best": format_layout(best), "claimed": format_layout(claimed), "fix_ids": fix_ids},
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
    where = e.serving_name()
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
            f"This server feeds the draft {taps_phrase(observed, n)}, where stock {where} "
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
    """
    spec = e.spec
    if spec is None or spec.aux_ids_location == "eagle_config" or e.on_vllm:
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
        severity = "warning"
        tail = "; whether that matches training is unknown (give the target's layer count)"
    elif training != defaults:
        severity = "critical"
        tail = f", while training fed {taps_phrase(training, n)}"
    else:
        severity = "info"
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
        if spec.aux_ids_location == "top-level" and n is not None:
            fix += " " + _top_level_for_vllm(spec, training, n, e.arch_name())
    else:
        fix = (
            'Add the nested key to config.json: "eagle_config": '
            '{"eagle_aux_hidden_state_layer_ids": [...]}, with the ids of the layers training '
            "used (SGLang reads id i as the output of layer i)."
        )
        data = {}
    return [Finding("aux-ids-not-read", severity, title, evidence, fix, data, LEVEL_PREDICTED)]


def _top_level_for_vllm(spec: Any, training: Layout, n: int, arch: str) -> str:
    """Whether the top-level ids can stay for vLLM: only when vLLM reads them as the training
    taps (vllm_rules, 0.33.0, either runner); else the top-level ids that do."""
    fix = vllm_find_fix(training, spec, n, arch=arch)
    if fix.ids is None:
        return f"No top-level ids make vLLM feed these taps: {fix.why_not}."
    if list(spec.aux_layer_ids or ()) == fix.ids:
        return "The top-level key can stay: vLLM reads it first, as the same taps."
    return (
        f"For vLLM, set the top-level key to {_ids_json(fix.ids)} (vLLM reads it first, id k = "
        "the state after k blocks): one file then serves both engines."
    )


def rule_capture_rule_version(e: Evidence) -> list[Finding]:
    """Version-specific capture rules: the CUDA-graph default-layer bug and the first-id rule.

    (a) cuda_graph_runner.py captured the default layers, 0.5.4-0.5.10 (fixed by PR #22836);
    (b) models/deepseek_v2.py first-id rule from 0.5.13 (PR #25454), for SpecForge's SGLang backend.
    """
    if e.on_vllm:  # SGLang's releases only
        return []
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
                f"{_ids_json(_default_ids(n))}) and drop the custom ids"
            )
        out.append(
            Finding(
                "capture-rule-version",
                "critical",
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
                    "warning",
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
