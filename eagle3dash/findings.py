"""Findings: rules over a checkpoint, a server, the layouts and the measurements.

Each rule is a small function `rule(e: Evidence) -> list[Finding]` whose docstring cites its source
in `research/` (sglang-eagle3.md = SG, draft-checkpoints-and-layouts.md = DL). A rule returns
nothing when the evidence it needs is missing: missing evidence is not a problem found.
`diagnose` runs every rule and sorts the findings by severity, then by the order of `RULES`.

The server and benchmark objects (`sglang.ServerReport`, `servebench.BenchResult`) and the
`metrics.DraftEval` are read by attribute only, so this module imports neither torch nor an HTTP
client, and stand-ins with the same attribute names work.
"""

from __future__ import annotations

import json
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from eagle3dash.layout import (
    Layout,
    LayoutDiff,
    default_layout,
    describe_tap,
    format_layout,
    parse_layout,
)
from eagle3dash.sglang_rules import (
    DEFAULT_SGLANG_VERSION,
    DRAFT_QUANT_FLAG_SINCE,
    EAGLE31_SINCE,
    HIDDEN_STATES_FIX,
    NORM_BEFORE_FC_SINCE,
    arch_family,
    find_fix,
    serving_layout,
    try_parse_version,
    version_text,
)
from eagle3dash.trainers import training_layout

if TYPE_CHECKING:
    from collections.abc import Callable

    from eagle3dash.checkpoint import InspectReport
    from eagle3dash.metrics import DraftEval
    from eagle3dash.prediction import LayoutComparison
    from eagle3dash.servebench import BenchResult
    from eagle3dash.sglang import ServerReport
    from eagle3dash.spec import DraftSpec

__all__ = ["RULES", "SEVERITIES", "Evidence", "Finding", "diagnose"]

SEVERITIES = ("critical", "warning", "info")

# Releases read for research/sglang-eagle3.md (§0); the fix search looks for upgrades among them.


@dataclass(frozen=True)
class Finding:
    """One problem found: rule id, severity, a one-sentence title, the evidence and the fix."""

    id: str
    severity: str  # one of SEVERITIES
    title: str  # one sentence
    evidence: str  # the numbers and config values that show it
    fix: str  # a concrete config key to set or a flag to change
    data: dict = field(default_factory=dict, compare=False, hash=False)  # machine-readable extras

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r} is not one of {SEVERITIES}")

    def to_dict(self) -> dict:
        """JSON-ready dict of every field."""
        return {
            "id": self.id,
            "severity": self.severity,
            "title": self.title,
            "evidence": self.evidence,
            "fix": self.fix,
            "data": dict(self.data),
        }


@dataclass
class Evidence:
    """Everything a rule may look at; every field is optional."""

    report: InspectReport | None = None  # the inspected draft checkpoint
    draft_path: str | None = None  # the checkpoint path as the user named it
    num_target_layers: int | None = None  # N, the target's decoder blocks
    arch: str | None = None  # target architecture ("kimi", "DeepseekV3ForCausalLM", ...)
    server: ServerReport | None = None
    layouts: LayoutComparison | None = None  # the config's prediction
    training_eval: DraftEval | None = None  # draft over the training layout
    serving_eval: DraftEval | None = None  # draft over the serving layout
    measured: BenchResult | None = None  # the endpoint under diagnosis
    baseline: BenchResult | None = None  # the same target without speculation
    # The SGLang version `layouts` were computed for; defaults to server.version.
    sglang_version: str | None = None
    trainer: str | None = None  # a layout.TRAINERS key, when known
    training_sglang_version: str | None = None  # SpecForge SGLang backend: version used to train
    detection: dict | None = None  # detective.Detection.to_dict(): what the tensors say

    @property
    def spec(self) -> DraftSpec | None:
        """The draft's spec, if a checkpoint was inspected."""
        return self.report.spec if self.report is not None else None

    @property
    def speculative(self) -> Any:
        """The server's SpeculativeSettings, None without a server or without speculation."""
        return self.server.speculative if self.server is not None else None

    def version(self) -> str | None:
        """The serving SGLang version as text, None when unknown or unparseable."""
        text = self.sglang_version or (self.server.version if self.server is not None else None)
        return text if text and try_parse_version(text) is not None else None

    def version_tuple(self) -> tuple[int, int, int] | None:
        """The serving SGLang version, parsed."""
        text = self.version()
        return try_parse_version(text) if text else None

    def arch_name(self) -> str:
        """The target architecture: given, else the server's, else 'llama'."""
        if self.arch:
            return self.arch
        if self.server is not None:
            archs = self.server.architectures
            if archs:
                return str(archs[0])
            if self.server.model_type:
                return str(self.server.model_type)
        return "llama"

    def cuda_graph(self) -> bool:
        """Whether the server runs CUDA graphs (SGLang's default)."""
        return not (self.server is not None and self.server.disable_cuda_graph)


# ---------------------------------------------------------------------------------------------
# Helpers.


def _ids_json(ids: list[int] | tuple[int, ...]) -> str:
    return json.dumps(list(ids))


def _eagle_config_json(ids: list[int] | tuple[int, ...]) -> str:
    return '"eagle_config": {"eagle_aux_hidden_state_layer_ids": ' + _ids_json(ids) + "}"


def _sentence(text: str) -> str:
    """Upper-case the first letter (only) and end with a period."""
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _fmt(x: float) -> str:
    return f"{x:.2f}"


def _join(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def _taps_phrase(layout: Layout, num_layers: int | None) -> str:
    """'the embedding output and the layers after 3 and 31 blocks'."""
    if not layout:
        return "nothing"
    parts, middle = [], []
    tail = []
    for tap in layout:
        if tap.post_norm:
            tail.append("the final-normed output")
        elif tap.depth == 0:
            parts.append("the embedding output")
        elif num_layers is not None and tap.depth == num_layers:
            tail.append("the last block's output")
        else:
            middle.append(tap.depth)
    if middle:
        noun = "layer" if len(middle) == 1 else "layers"
        blocks = "block" if middle == [1] else "blocks"
        parts.append(f"the {noun} after {_join([str(d) for d in middle])} {blocks}")
    return _join(parts + tail)


def _slots_text(layout: Layout, num_layers: int | None) -> str:
    """'slot 0: Tap(0) embedding output, slot 1: Tap(3) after block 3'."""
    out = []
    for i, tap in enumerate(layout):
        words = describe_tap(tap, num_layers) if num_layers else f"depth {tap.depth}"
        out.append(f"slot {i}: {tap} ({words})")
    return ", ".join(out) or "no taps"


def _kind_phrase(d: LayoutDiff) -> str:
    """The LayoutDiff kind in plain words."""
    if d.kind == "shifted-slot":
        return "every slot is shifted by one"
    if d.kind == "off-by-one":
        later = all(b.depth > a.depth for a, b in zip(d.training, d.serving, strict=False))
        return f"every slot is one block {'later' if later else 'earlier'} than in training"
    if d.kind == "defaults-used":
        return "serving uses SGLang's default layers instead of the configured ones"
    if d.kind == "different-width":
        return f"training fed {len(d.training)} slots and serving feeds {len(d.serving)}"
    if d.kind == "post-norm":
        return "the depths match but the final norm differs"
    differing = [str(i) for i, _, _, same in d.slots if not same]
    return f"slot{'s' if len(differing) > 1 else ''} {_join(differing)} differ"


def _eval_text(ev: Any, label: str, steps: int | None = None) -> str:
    s = ev.steps if steps is None else min(steps, ev.steps)
    top1 = f", top-1 {_fmt(ev.accuracy[0])}" if ev.accuracy else ""
    return (
        f"{label}: simulated accept length {_fmt(ev.simulated_accept_length(s))} at {s} steps{top1}"
    )


def _raw_config(report: InspectReport | None) -> dict:
    """The checkpoint's config.json, {} when unreadable (only for keys DraftSpec folds away)."""
    if report is None:
        return {}
    try:
        data = json.loads((Path(report.path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _layout_fix(e: Evidence, target: Layout, serving: Layout | None) -> tuple[str, dict]:
    """The concrete fix that makes this server feed `target`, and its data.

    data: config_ids (and sglang_version, when an upgrade is needed); empty when impossible.
    """
    spec, n = e.spec, e.num_target_layers
    if spec is None or n is None:
        return (
            "Set eagle_config.eagle_aux_hidden_state_layer_ids in the draft's config.json to the "
            "layers training used (SGLang reads id i as the output of layer i); give the target's "
            "layer count for the exact ids.",
            {},
        )
    fix = find_fix(target, spec, n, e.version_tuple(), e.arch_name(), e.cuda_graph())
    assumed = " (assumed: the server's version is unknown)" if fix.version_assumed else ""
    aux_on = "" if spec.use_aux_hidden_state else ', "use_aux_hidden_state": true'
    v = version_text(fix.version)
    phrase = _taps_phrase(target, n)
    if fix.ids is not None:
        cfg = _eagle_config_json(fix.ids)[:-1] + aux_on + "}"
        return (
            f"Set {cfg} in the draft's config.json and restart the server: SGLang {v}{assumed} "
            f"then captures {phrase}.",
            {"config_ids": fix.ids, "sglang_version": v},
        )
    retrain = (
        f"retrain the draft on the layers serving can feed ({_taps_phrase(serving, n)})"
        if serving
        else "retrain the draft on layers SGLang captures, e.g. its defaults "
        f"({_taps_phrase(default_layout(n), n)}; SpecForge ids {_ids_json(_default_ids(n))})"
    )
    options = []
    data: dict = {}
    if fix.upgrade_version is not None:
        up_ids = fix.upgrade_ids or []
        later = (
            f"SGLang {fix.upgrade_version} or later"
            if fix.newest_ids == up_ids
            else f"SGLang {fix.upgrade_version} (on {DEFAULT_SGLANG_VERSION} use "
            f"{_ids_json(fix.newest_ids or [])})"
        )
        options.append(
            f"upgrade to {later} and set {_eagle_config_json(up_ids)[:-1] + aux_on + '}'} in the "
            "draft's config.json"
        )
        data = {"config_ids": up_ids, "sglang_version": fix.upgrade_version}
    if fix.eager_ids is not None:
        options.append(
            f"keep SGLang {v} but restart with --disable-cuda-graph (slow) and "
            f"{_eagle_config_json(fix.eager_ids)} in config.json"
        )
    options.append(retrain)
    text = f"No ids reproduce the training taps on SGLang {v}{assumed}: {fix.why_not}. "
    text += "Either " + "; or ".join(options) + "."
    return text, data


def _default_ids(n: int) -> list[int]:
    """SpecForge's default output-of ids, which SGLang captures as its default taps."""
    return [1, n // 2 - 1, n - 4]


def _speedup(e: Evidence) -> float | None:
    m, b = e.measured, e.baseline
    if m is None or b is None:
        return None
    if not m.output_tok_s_aggregate or not b.output_tok_s_aggregate:
        return None
    return m.output_tok_s_aggregate / b.output_tok_s_aggregate


# ---------------------------------------------------------------------------------------------
# Rules.


def rule_layout_mismatch(e: Evidence) -> list[Finding]:
    """Training and serving feed different taps to the fc slots.

    SG §1.1-1.4 and §7.2 (SGLang's id rules by version and architecture), DL §4 and §6.2 items
    1-3 (convention off-by-one, silent defaults, ids in the wrong place).
    """
    if e.layouts is None:
        return []
    d: LayoutDiff = e.layouts.diff
    serving = e.layouts.serving
    training = e.layouts.training
    error = serving.error if serving is not None else None
    if d.kind == "identical" and error is None:
        return []
    n = e.num_target_layers
    v = e.version() or "(version unknown)"
    lines = [
        f"Training: {_slots_text(d.training, n)}." + (f" {training.rule}" if training else ""),
        f"Serving on SGLang {v}: {_slots_text(d.serving, n)}."
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
        lines.append("Layout detective: " + " ".join(e.detection["verdict"][:3]))
    fix, data = _layout_fix(e, d.training, d.serving)
    data = {"kind": d.kind, **data}
    if d.kind == "identical":
        title = f"SGLang {v} cannot capture the taps this draft was trained on: {error}."
        return [Finding("capture-error", "critical", title, " ".join(lines), fix, data)]
    title = (
        f"Serving feeds the draft {_taps_phrase(d.serving, n)}, but training fed "
        f"{_taps_phrase(d.training, n)}: {_kind_phrase(d)}."
    )
    return [Finding("layout-mismatch", "critical", title, " ".join(lines), fix, data)]


def rule_detected_layout(e: Evidence) -> list[Finding]:
    """The draft performs best with another layout than the one its config (or trainer) implies.

    DL §6.2 items 1-3: configs lie (ids stored where a server does not read them, data generated
    with other ids than the config says, conventions shifted by one). The layout detective's
    sweep over one all-taps capture says which taps the draft was really trained on.
    """
    if e.detection is None or e.layouts is None:
        return []
    det = e.detection
    best = parse_layout(det["best"])
    claimed = tuple(e.layouts.training.layout)
    if best == claimed:
        return []
    n = e.num_target_layers or det["num_target_layers"]
    rows = {r["layout"]: r for r in det["rows"]}
    top, mine = det["rows"][0], rows.get(format_layout(claimed))
    gap = (
        f"; the claimed layout {format_layout(claimed)}: top-1 {mine['top1']:.1%}, simulated "
        f"accept length {_fmt(mine['sim_accept_length'])}"
        if mine is not None
        else ""
    )
    serving = e.layouts.serving
    fed = tuple(serving.layout)
    severity = "critical" if fed is not None and fed != best else "warning"
    fix_ids = det.get("fix_ids")
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
            f"The draft performs best with {_taps_phrase(best, n)}, not with "
            f"{_taps_phrase(claimed, n)} as its config implies.",
            f"Layout sweep over {det['num_sequences']} sequences: best {det['best']} top-1 "
            f"{top['top1']:.1%}, simulated accept length {_fmt(top['sim_accept_length'])}{gap}. "
            + " ".join(det["verdict"][1:3]),
            fix,
            {"best": det["best"], "claimed": format_layout(claimed), "fix_ids": fix_ids},
        )
    ]


def rule_algorithm_eagle(e: Evidence) -> list[Finding]:
    """The server runs EAGLE (or NEXTN) with an EAGLE-3 draft: no aux capture, fc skipped.

    SG §1.3 ("Algorithm name matters"), PR #21272; DL §6.2 item 10.
    """
    sp, spec = e.speculative, e.spec
    if sp is None or spec is None:
        return []
    algorithm = str(sp.algorithm or "").upper()
    if algorithm not in ("EAGLE", "NEXTN"):
        return []
    width = spec.num_aux * spec.target_hidden_size
    return [
        Finding(
            "algorithm-eagle",
            "critical",
            f"The server runs --speculative-algorithm {sp.algorithm} with an EAGLE-3 draft, so "
            "the target captures no aux states, SGLang skips fc and accept length stays near 1.",
            f"speculative_algorithm={sp.algorithm}; the draft's fc takes {spec.num_aux} x "
            f"{spec.target_hidden_size} = {width} inputs (hidden_size {spec.hidden_size}); with "
            "EAGLE the draft gets the last hidden state of width H and `fc` runs only when the "
            "widths differ (sglang PR #21272).",
            "Restart the server with --speculative-algorithm EAGLE3.",
            {"algorithm": sp.algorithm},
        )
    ]


def rule_no_speculation(e: Evidence) -> list[Finding]:
    """The endpoint runs without speculative decoding (speculative_algorithm null). SG §3.1."""
    if e.server is None or e.server.speculative is not None:
        return []
    draft = e.draft_path or (e.report.path if e.report is not None else "<draft>")
    return [
        Finding(
            "no-speculation",
            "critical",
            "The endpoint does not run speculative decoding, so no draft is used at all.",
            f"{e.server.url} /server_info: speculative_algorithm is null "
            f"(model {e.server.model_path}).",
            "Restart the server with --speculative-algorithm EAGLE3 "
            f"--speculative-draft-model-path {draft}.",
        )
    ]


def rule_aux_ids_not_read(e: Evidence) -> list[Finding]:
    """The aux ids are missing or top-level: SGLang captures its defaults [2, N//2, N-3].

    SG §1.3 ("Only the nested key is read on the target side"), DL §6.2 items 2-3.
    """
    spec = e.spec
    if spec is None or spec.aux_ids_location == "eagle_config":
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
    defaults = default_layout(n) if n is not None else None
    default_text = (
        f"the layers after {_join([str(t.depth) for t in defaults])} blocks"
        if defaults
        else "its default layers [2, N//2, N-3]"
    )
    if training is None:
        severity = "warning"
        tail = "; whether that matches training is unknown (give the target's layer count)"
    elif training != defaults:
        severity = "critical"
        tail = f", while training fed {_taps_phrase(training, n)}"
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
        if spec.aux_ids_location == "top-level":
            fix += " The top-level key can stay: vLLM and speculators read it."
    else:
        fix = (
            'Add the nested key to config.json: "eagle_config": '
            '{"eagle_aux_hidden_state_layer_ids": [...]}, with the ids of the layers training '
            "used (SGLang reads id i as the output of layer i)."
        )
        data = {}
    return [Finding("aux-ids-not-read", severity, title, evidence, fix, data)]


def rule_capture_rule_version(e: Evidence) -> list[Finding]:
    """Version-specific capture rules: the CUDA-graph default-layer bug and the first-id rule.

    (a) SG §1.3 "CUDA-graph bug, 0.5.4 -> 0.5.10" (PR #22836, fixed in 0.5.11);
    (b) SG §1.4 / §7.3 first-id rule from 0.5.13 (PR #25454) for SpecForge's SGLang backend.
    """
    out: list[Finding] = []
    n = e.num_target_layers
    v = e.version() or "(version unknown)"
    dd = e.layouts.decode_diff if e.layouts else None
    if dd is not None and dd.kind != "identical" and e.cuda_graph():
        prefill = e.layouts.serving.layout
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
                f"layers ({_taps_phrase(dd.serving, n)}), not the configured ones.",
                f"Prefill (eager): {_slots_text(prefill, n)}. Decode (CUDA graph): "
                f"{_slots_text(dd.serving, n)}. Training: {_slots_text(dd.training, n)}. "
                "cuda_graph_runner.py called set_eagle3_layers_to_capture() with no ids, "
                "0.5.4-0.5.10.",
                fix + ".",
                {"decode_kind": dd.kind},
            )
        )
    spec, version = e.spec, e.version_tuple()
    tv_text = e.training_sglang_version
    tv = try_parse_version(tv_text) if tv_text else None
    if (
        spec is not None
        and n is not None
        and version is not None
        and tv is not None
        and tv != version
        and e.trainer == "specforge-sglang"
        and arch_family(e.arch_name()) == "deepseek"
    ):
        at_train = serving_layout(spec, n, tv_text, e.arch_name(), cuda_graph=False)
        at_serve = serving_layout(spec, n, e.version(), e.arch_name(), cuda_graph=False)
        if at_train.layout != at_serve.layout:
            fix, data = _layout_fix(e, at_train.layout, at_serve.layout)
            out.append(
                Finding(
                    "capture-rule-version",
                    "warning",
                    f"The draft was trained through SpecForge's SGLang backend on SGLang {tv_text}"
                    f", whose DeepSeek/Kimi id rule reads ids "
                    f"{_ids_json(spec.aux_layer_ids or ())} differently from SGLang {v} "
                    "(first-id rule from 0.5.13).",
                    f"SGLang {tv_text}: {_slots_text(at_train.layout, n)}. SGLang {v}: "
                    f"{_slots_text(at_serve.layout, n)}. From 0.5.13 DeepSeek/Kimi targets add 1 "
                    "to the ids only when the first id is 1 (sglang PR #25454).",
                    fix + f" Or serve with SGLang {tv_text}, the version training used.",
                    data,
                )
            )
    return out


def rule_lm_head_missing(e: Evidence) -> list[Finding]:
    """The checkpoint has no lm_head.weight: SGLang leaves a random head (sglang #27908).

    SG §1.5 "Embedding and lm_head", DL §6.1 #16.
    """
    if e.report is None or "lm_head.weight" in e.report.tensors:
        return []
    raw = _raw_config(e.report)
    spec = e.report.spec
    shares_target_head = (  # load_lm_head_from_target: tied=false and no draft_vocab_size
        raw
        and spec.format != "speculators"
        and "draft_vocab_size" not in raw
        and raw.get("tie_word_embeddings") is False
    )
    if shares_target_head:
        return []
    return [
        Finding(
            "lm_head-missing",
            "critical",
            "The draft checkpoint has no lm_head.weight, so SGLang leaves the draft's head at "
            "random init and accept length is 1.0.",
            f"no lm_head.weight in the checkpoint ({len(e.report.tensors)} tensors); "
            "draft_vocab_size "
            f"{spec.draft_vocab_size} (sglang issue #27908).",
            f"Export the trained head as lm_head.weight [{spec.draft_vocab_size}, "
            f"{spec.hidden_size}] into the draft's safetensors.",
        )
    ]


def rule_unknown_tensors(e: Evidence) -> list[Finding]:
    """Tensors with names the loader does not know are dropped silently: random weights.

    SG §1.5 "Weight loading" (`if param_name in params_dict`), DL §6.2 item 9.
    """
    if e.report is None:
        return []
    unknown = [p for p in e.report.problems if p.startswith("unknown tensor")]
    if not unknown:
        return []
    shown = "; ".join(unknown[:5]) + (f"; and {len(unknown) - 5} more" if len(unknown) > 5 else "")
    return [
        Finding(
            "unknown-tensors",
            "critical",
            f"{len(unknown)} tensor{'s' if len(unknown) > 1 else ''} in the checkpoint "
            f"{'have names' if len(unknown) > 1 else 'has a name'} SGLang does not load, so the "
            "server silently drops "
            f"{'them' if len(unknown) > 1 else 'it'} and runs those weights at random init.",
            shown + ".",
            "Rename the tensors to the names SGLang loads: fc.weight, midlayer.* (or "
            "layers.0.*) with self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj, "
            "input_layernorm, post_attention_layernorm, hidden_norm, then norm.weight, "
            "lm_head.weight, d2t.",
            {"count": len(unknown)},
        )
    ]


def rule_d2t_missing(e: Evidence) -> list[Finding]:
    """draft_vocab_size < vocab_size without d2t: draft ids are read as target ids.

    SG §3.3 (`hot_token_id` stays None), DL §6.2 item 7.
    """
    spec = e.spec
    if spec is None or spec.draft_vocab_size >= spec.vocab_size or spec.has_d2t:
        return []
    return [
        Finding(
            "d2t-missing",
            "critical",
            f"The draft predicts over {spec.draft_vocab_size} tokens but has no d2t mapping, so "
            f"SGLang reads draft id i as target id i (the first {spec.draft_vocab_size} target "
            "ids) and almost no draft token is accepted.",
            f"draft_vocab_size={spec.draft_vocab_size}, vocab_size={spec.vocab_size}, no d2t "
            "tensor; SGLang applies hot_token_id only when d2t is loaded (llama_eagle3.py).",
            f"Add the training vocab mapping to the safetensors as d2t (int64 "
            f"[{spec.draft_vocab_size}], target id = draft id + d2t[draft id]).",
        )
    ]


def rule_norm_before_residual(e: Evidence) -> list[Finding]:
    """norm_before_residual true: SGLang implements only False.

    DL §6.2 item 5 (speculators trains with True; SpecForge, EAGLE and SGLang only False).
    """
    spec = e.spec
    if spec is None or not spec.norm_before_residual:
        return []
    return [
        Finding(
            "norm-before-residual",
            "critical",
            "The draft was trained with norm_before_residual=true, which SGLang does not "
            "implement, so its draft layer computes a different residual at every position.",
            f"config norm_before_residual=true (format {spec.format}); SGLang's llama_eagle3.py "
            "always takes the residual before hidden_norm (the False behaviour).",
            "There is no SGLang flag for it: serve the draft with vLLM (which implements "
            "norm_before_residual), or retrain it with norm_before_residual=false.",
        )
    ]


def rule_slower_than_baseline(e: Evidence) -> list[Finding]:
    """Measured tok/s against a baseline without speculation. DESIGN §2 ServeBench."""
    speedup = _speedup(e)
    if speedup is None or speedup >= 1.2:
        return []
    m, b = e.measured, e.baseline
    evidence = (
        f"with the draft {m.output_tok_s_aggregate:.1f} tok/s, baseline "
        f"{b.output_tok_s_aggregate:.1f} tok/s: speedup {speedup:.2f}x"
    )
    if m.accept_length is not None:
        evidence += f"; measured accept length {_fmt(m.accept_length)}"
    concurrency = getattr(m, "concurrency", None)
    if concurrency:
        evidence += f"; concurrency {concurrency}"
    if speedup < 1:
        return [
            Finding(
                "slower-than-baseline",
                "critical",
                f"Speculative decoding makes the endpoint slower: {speedup:.2f}x the baseline's "
                "tok/s.",
                evidence + ".",
                "Fix the critical findings above first (they cap the accept length); if accept "
                "length is already good, lower the batch or draft cost: --speculative-num-steps 3 "
                "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4, and keep "
                "--cuda-graph-max-bs at least the request concurrency.",
                {"speedup": speedup},
            )
        ]
    return [
        Finding(
            "slower-than-baseline",
            "info",
            f"Speculative decoding gains little: {speedup:.2f}x the baseline's tok/s.",
            evidence + ".",
            "Raise the accept length (see the other findings) or try --speculative-num-steps 3 "
            "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4; speculation pays most "
            "at low concurrency.",
            {"speedup": speedup},
        )
    ]


def rule_eagle31_ignored(e: Evidence) -> list[Finding]:
    """Eagle 3.1 options the serving SGLang ignores, and the `norm_output` meaning clash.

    SG §1.5 (fc_norm / norm_output 0.5.12+, eagle_config.norm_before_fc 0.5.20+), DL §6.2
    item 6 (SpecForge's `norm_output` = final norm before lm_head; SGLang's = post-norm feedback).
    """
    spec = e.spec
    if spec is None:
        return []
    version = e.version_tuple()
    v = e.version() or "(version unknown)"
    raw = _raw_config(e.report)
    nested = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    nested_nbf = bool(nested.get("norm_before_fc"))
    ignored, fixes = [], []
    if version is not None and version < EAGLE31_SINCE:
        if spec.fc_norm:
            ignored.append(f"fc_norm (per-aux RMSNorm) is read only from 0.5.12, not by {v}")
        if spec.feedback_post_norm:
            ignored.append(f"norm_output (post-norm feedback) is read only from 0.5.12, not by {v}")
        if spec.fc_norm or spec.feedback_post_norm:
            fixes.append("upgrade SGLang to 0.5.12 or later")
    if spec.norm_before_fc and not nested_nbf:
        ignored.append(
            "norm_before_fc is set at the top level of config.json, which SGLang never reads "
            "(it reads eagle_config.norm_before_fc, from 0.5.20)"
        )
        fixes.append(
            'add "eagle_config": {"norm_before_fc": true} to config.json and serve with SGLang '
            "0.5.20 or later"
        )
    elif nested_nbf and version is not None and version < NORM_BEFORE_FC_SINCE:
        ignored.append(f"eagle_config.norm_before_fc is read only from 0.5.20, not by {v}")
        fixes.append("upgrade SGLang to 0.5.20 or later")
    out: list[Finding] = []
    if ignored:
        out.append(
            Finding(
                "eagle31-ignored",
                "warning",
                f"SGLang {v} ignores "
                f"{'Eagle 3.1 options' if len(ignored) > 1 else 'an Eagle 3.1 option'} this "
                "draft was trained with, so the served draft computes something else.",
                "; ".join(ignored) + ".",
                _sentence("; ".join(dict.fromkeys(fixes))),
                {"ignored": ignored},
            )
        )
    if (
        spec.format != "speculators"
        and spec.norm_output_key is True
        and version is not None
        and version >= EAGLE31_SINCE
    ):
        out.append(
            Finding(
                "norm-output-clash",
                "warning",
                f"config.json sets norm_output: true in SpecForge's meaning (final norm before "
                f"lm_head), which SGLang {v} reads as 'feed the post-norm state back', so every "
                "draft token after the first diverges from training.",
                f"format {spec.format}, norm_output=true; SGLang >= 0.5.12 llama_eagle3.py feeds "
                "back the normed hidden state when norm_output is set, while SpecForge trained "
                "with pre-norm feedback.",
                "Remove norm_output from the draft's config.json for SGLang (SpecForge's meaning "
                "is SGLang's default behaviour).",
            )
        )
    return out


def rule_draft_tokens_capped(e: Evidence) -> list[Finding]:
    """topk == 1 forces num_draft_tokens = num_steps + 1: a short chain whatever was asked.

    SG §3.2 "topk == 1 forces the chain length" (server_args.py / speculative_hook.py).
    """
    sp = e.speculative
    if sp is None or sp.eagle_topk != 1 or sp.num_steps is None or sp.num_draft_tokens is None:
        return []
    steps = sp.num_steps
    if sp.num_draft_tokens != steps + 1 or steps > 2:
        return []
    evidence = (
        f"effective speculative_num_steps={steps}, speculative_eagle_topk=1, "
        f"speculative_num_draft_tokens={sp.num_draft_tokens} (SGLang: "
        '"speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when '
        'speculative_eagle_topk == 1"); the accept length cannot exceed '
        f"{steps + 1}."
    )
    data: dict = {"num_steps": steps, "num_draft_tokens": sp.num_draft_tokens}
    ev, label = (
        (e.serving_eval, "serving layout")
        if e.serving_eval is not None
        else (e.training_eval, "training layout")
    )
    if ev is not None:
        at = {s: ev.simulated_accept_length(s) for s in sorted({steps, 3, 5}) if s <= ev.steps}
        if len(at) > 1:
            evidence += (
                f" Simulated accept length ({label}): "
                + ", ".join(f"{_fmt(x)} at {s} steps" for s, x in at.items())
                + "."
            )
            data["simulated_accept_length"] = at
    return [
        Finding(
            "draft-tokens-capped",
            "warning",
            f"The server drafts a chain of only {steps} token{'s' if steps > 1 else ''} "
            f"(topk 1 caps --speculative-num-draft-tokens at num_steps + 1 = {steps + 1}), "
            "whatever --speculative-num-draft-tokens said.",
            evidence,
            "Restart with --speculative-num-steps 3 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 4 (or more steps; draft tokens only matter with "
            "topk > 1).",
            data,
        )
    ]


def rule_draft_quantized(e: Evidence) -> list[Finding]:
    """The draft inherits the target's --quantization.

    SG §3.1 `--speculative-draft-model-quantization` (<= 0.5.6 always; 0.5.8+ default = target's).
    """
    sp, server = e.speculative, e.server
    if sp is None or server is None:
        return []
    quant = server.quantization
    if not quant or str(quant).lower() in ("none", "unquant"):
        return []
    draft_q = sp.draft_quantization
    if draft_q is not None and draft_q != quant:
        return []
    version = e.version_tuple()
    if version is not None and version < DRAFT_QUANT_FLAG_SINCE:
        fix = (
            f"SGLang {e.version()} has no flag for it: upgrade to 0.5.8 or later and restart with "
            "--speculative-draft-model-quantization unquant."
        )
    else:
        fix = "Restart the server with --speculative-draft-model-quantization unquant."
    return [
        Finding(
            "draft-quantized",
            "warning",
            f"The draft runs quantized ({quant}) like the target, which lowers its accuracy.",
            f"quantization={quant}, speculative_draft_model_quantization="
            f"{draft_q if draft_q is not None else 'unset (the target quantization applies)'}"
            + (f", SGLang {e.version()}" if e.version() else "")
            + ".",
            fix,
        )
    ]


def _norm_path(p: str) -> str:
    return os.path.normpath(os.path.expanduser(p.strip())).rstrip("/") or "/"


def _is_local(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host in ("localhost", "127.0.0.1", "::1", "0.0.0.0", socket.gethostname().lower())


def _same_files(a: str, b: str) -> bool:
    """Two local checkpoint folders with the same config.json and the same weight file sizes.

    An upload is stored under the home (checkpoints/<sha256>/), so the server may serve the user's
    original folder while the run diagnoses its copy: equal contents count as the same draft.
    """

    def listing(path: str) -> dict[str, object] | None:
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        try:
            names = sorted(os.listdir(folder))
            with open(os.path.join(folder, "config.json"), "rb") as f:
                config = f.read()
        except OSError:
            return None
        weights = {
            n: os.path.getsize(os.path.join(folder, n))
            for n in names
            if n.endswith((".safetensors", ".bin", ".index.json"))
        }
        return {"config": config, "weights": weights}

    first, second = listing(a), listing(b)
    return first is not None and first == second


def rule_draft_path_differs(e: Evidence) -> list[Finding]:
    """The endpoint's --speculative-draft-model-path is not the checkpoint under diagnosis.

    SG §3.1 (`speculative_draft_model_path` in /server_info).
    """
    sp = e.speculative
    mine = e.draft_path or (e.report.path if e.report is not None else None)
    if sp is None or not sp.draft_model_path or not mine:
        return []
    theirs_n, mine_n = _norm_path(sp.draft_model_path), _norm_path(mine)
    if theirs_n == mine_n:
        return []
    local = _is_local(e.server.url) and os.path.isabs(theirs_n) and os.path.isabs(mine_n)
    if local:
        if os.path.realpath(theirs_n) == os.path.realpath(mine_n) or _same_files(theirs_n, mine_n):
            return []
        how = "both paths are on this machine and differ"
    else:
        a, b = os.path.basename(theirs_n), os.path.basename(mine_n)
        if re.fullmatch(r"[0-9a-f]{64}", b):
            return []  # an upload, stored under its sha256: nothing to compare
        if a == b:
            return []
        how = (
            "only the final path components can be compared (the server runs elsewhere or "
            f"names a hub id): {a!r} vs {b!r}"
        )
    return [
        Finding(
            "draft-path-differs",
            "warning",
            "The endpoint serves another draft than the checkpoint under diagnosis.",
            f"server speculative_draft_model_path={sp.draft_model_path}; checkpoint={mine}; {how}.",
            f"Restart the server with --speculative-draft-model-path {mine} (or diagnose the "
            f"checkpoint at {sp.draft_model_path}).",
            {"server_path": sp.draft_model_path, "checkpoint_path": mine},
        )
    ]


def rule_measured_below_simulated(e: Evidence) -> list[Finding]:
    """Measured accept length well below the serving-layout simulation.

    SG §8 checklist items 6, 8, 9, 10 (tensor names, quantization, SGLANG_SIMULATE_ACC_LEN,
    temperature), SG §3.2 accept thresholds.
    """
    ev = e.serving_eval
    if ev is None:
        return []
    if e.measured is not None and e.measured.accept_length is not None:
        measured, source = e.measured.accept_length, "benchmark (sum of completion tokens / sum "
        source += "of spec_verify_ct)"
    elif e.server is not None and e.server.avg_spec_accept_length is not None:
        measured = e.server.avg_spec_accept_length
        source = "the server's cumulative avg_spec_accept_length"
    else:
        return []
    sp = e.speculative
    steps = min(sp.num_steps, ev.steps) if sp is not None and sp.num_steps else ev.steps
    simulated = ev.simulated_accept_length(steps)
    gap = simulated - measured
    if gap <= 0.5 or gap <= 0.15 * simulated:
        return []
    checks = [
        "requests at temperature 0 (target-only sampling at temperature > 0 accepts fewer)",
        "SGLANG_SIMULATE_ACC_LEN unset in the server's environment (it fakes the accept length)",
    ]
    server = e.server
    if server is not None and server.quantization:
        dq = sp.draft_quantization if sp is not None else None
        checks.append(f"quantization: target {server.quantization}, draft {dq or 'same'}")
    else:
        checks.append("draft quantization (--speculative-draft-model-quantization)")
    if sp is not None:
        th = [
            f"{name}={val}"
            for name, val in (
                ("accept_threshold_single", sp.accept_threshold_single),
                ("accept_threshold_acc", sp.accept_threshold_acc),
            )
            if val is not None and val < 1
        ]
        if th:
            checks.append("accept thresholds below 1 (" + ", ".join(th) + ")")
    unknown = [p for p in e.report.problems if p.startswith("unknown tensor")] if e.report else []
    checks.append(
        f"{len(unknown)} tensors with unknown names, dropped by the loader"
        if unknown
        else "tensor names the loader drops (unknown names load as random weights)"
    )
    checks.append("the benchmark prompts against the capture data the simulation used")
    return [
        Finding(
            "measured-below-simulated",
            "warning",
            f"The endpoint accepts {_fmt(measured)} tokens per step where the serving layout "
            f"simulates {_fmt(simulated)}, so something beyond the layout is wrong.",
            f"measured {_fmt(measured)} from {source}; simulated {_fmt(simulated)} at {steps} "
            f"steps over {getattr(ev, 'num_positions', '?')} positions.",
            "Check: " + "; ".join(checks) + ".",
            {"measured": measured, "simulated": simulated, "steps": steps},
        )
    ]


_DEDICATED_PROBLEMS = ("unknown tensor", "lm_head.weight missing")


def rule_checkpoint_problems(e: Evidence) -> list[Finding]:
    """Other problems `checkpoint.inspect` found (shapes, missing tensors, ids, NaN).

    SG §8 items 2-3 and 6-7, DL §6.2 items 7-9.
    """
    if e.report is None:
        return []
    spec = e.report.spec
    rest = [
        p
        for p in e.report.problems
        if not p.startswith(_DEDICATED_PROBLEMS)
        and not (
            p.startswith("draft_vocab_size") and "no d2t" in p and not spec.has_d2t
        )  # rule_d2t_missing
    ]
    if not rest:
        return []
    return [
        Finding(
            "checkpoint-problems",
            "warning",
            f"The checkpoint has {len(rest)} other problem{'s' if len(rest) > 1 else ''} a "
            "server would get wrong or silently ignore.",
            "; ".join(rest) + ".",
            "Fix each in the checkpoint as its line says (config.json keys or tensors), then "
            "restart the server.",
            {"problems": rest},
        )
    ]


def rule_hidden_states_truncated(e: Evidence) -> list[Finding]:
    """return_hidden_states under speculation is truncated before 0.5.20.

    SG §2.2 (sglang issue #26163; 0.5.20+ `_append_decode_hidden_states` with a stride).
    """
    server, version = e.server, e.version_tuple()
    if server is None or server.speculative is None or version is None:
        return []
    if version >= HIDDEN_STATES_FIX or not server.enable_return_hidden_states:
        return []
    return [
        Finding(
            "hidden-states-truncated",
            "info",
            f"On SGLang {e.version()} the hidden states returned under speculative decoding are "
            "truncated or misattributed after the prompt, so only the prefill block of a capture "
            "can be trusted.",
            f"SGLang {e.version()} with --enable-return-hidden-states and "
            f"{server.speculative.algorithm}: decode rows are indexed per request, not per "
            "accepted token (sglang issue #26163, fixed by 0.5.20).",
            "Read only the prefill block (meta_info.hidden_states[0], as this tool's endpoint "
            "capture does), or upgrade SGLang to 0.5.20 or later.",
        )
    ]


RULES: tuple[Callable[[Evidence], list[Finding]], ...] = (
    rule_layout_mismatch,
    rule_detected_layout,
    rule_algorithm_eagle,
    rule_no_speculation,
    rule_aux_ids_not_read,
    rule_capture_rule_version,
    rule_lm_head_missing,
    rule_unknown_tensors,
    rule_d2t_missing,
    rule_norm_before_residual,
    rule_slower_than_baseline,
    rule_eagle31_ignored,
    rule_draft_tokens_capped,
    rule_draft_quantized,
    rule_draft_path_differs,
    rule_measured_below_simulated,
    rule_checkpoint_problems,
    rule_hidden_states_truncated,
)


def diagnose(evidence: Evidence) -> list[Finding]:
    """Run every rule; findings sorted by severity, then by the order of RULES."""
    found: list[tuple[int, int, int, Finding]] = []
    for r, rule in enumerate(RULES):
        for k, finding in enumerate(rule(evidence)):
            found.append((SEVERITIES.index(finding.severity), r, k, finding))
    return [f for *_, f in sorted(found, key=lambda x: x[:3])]
