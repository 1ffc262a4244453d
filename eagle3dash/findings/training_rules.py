"""Rules over what the draft's files say about its training: which trainer's reading holds, and
which target it was made for.

Sources: SpecForge 0.2.0 (offline_capture/sglang_backend/capture.py; algorithms/model_providers.py
resolve_eagle_capture_layers; training/provenance.py), speculators 0.9.0 (`speculators_config.
verifier` in models/eagle3/config.py), and SGLang's rules by version (sglang_rules).
"""

from __future__ import annotations

from eagle3dash.checkpoint_problems import ProblemCode
from eagle3dash.evidence_levels import LEVEL_ASSUMED
from eagle3dash.findings.core import Evidence, Finding, _fmt
from eagle3dash.layout import format_layout, taps_phrase
from eagle3dash.severity import Severity
from eagle3dash.trainers import DECLARED_RULE, TRAINERS, Reading, training_readings

# A measured accept length below this is materially low: a draft made for this target accepts
# well over one draft token per round (the bonus token alone gives 1.0).
LOW_ACCEPT_LENGTH = 1.5
_SETTLE = (
    "Settle it with evidence: the trainer and its SGLang release (--trainer specforge "
    "--training-sglang-version V for SpecForge 0.2 and later, --trainer specforge-hf for a git "
    "install before 0.2), the training run folder (its training_state.pt records the capture "
    "layers), a training dump (--train-states), or a local copy of the target (--target) for "
    "the layout detective."
)


def unsettled_readings(e: Evidence) -> list[Reading] | None:
    """The plausible training readings when no evidence picked one and they disagree; else None.

    Evidence: a trainer given (by the user or a run folder's provenance), or a training side
    taken from tensors or declared by the user.
    """
    spec, n = e.spec, e.num_target_layers
    if spec is None or n is None or e.trainer is not None:
        return None
    if e.training is not None and e.training.source != "config":
        return None
    if e.layouts is not None and e.layouts.training.rule == DECLARED_RULE:
        return None
    readings = training_readings(spec, n, e.arch_name(), e.training_sglang_version)
    if len({r.layout for r in readings}) < 2:
        return None
    return readings


def rule_training_readings(e: Evidence) -> list[Finding]:
    """The draft's files fit more than one trainer, and the trainers fed different taps.

    SpecForge 0.2 trains through SGLang (its taps follow SGLang's rule at the training release,
    0.5.14 pinned); a git install before 0.2 hooked `layers[id]` (HF). On DeepSeek/Kimi targets
    (models/deepseek_v2.py first-id rule, sglang PR #25454) the two differ by one block.
    """
    readings = unsettled_readings(e)
    if readings is None or e.layouts is None:
        return []
    n = e.num_target_layers
    serving = tuple(e.layouts.serving.layout)
    parts, disagree = [], []
    for r in readings:
        agrees = tuple(r.layout) == serving
        if not agrees:
            disagree.append(r)
        hints = "; hints: " + ", ".join(r.hints) if r.hints else "; no hints in the files"
        parts.append(
            f"{r.trainer} ({TRAINERS[r.trainer].release}): {format_layout(r.layout)}, "
            f"{'what serving feeds' if agrees else 'not what serving feeds'} ({r.result.rule}"
            f"{hints})"
        )
    if not disagree:
        return []
    names = ", ".join(r.trainer for r in disagree)
    return [
        Finding(
            "training-layout-unsettled",
            Severity.WARNING,
            f"The draft's files fit {len(readings)} trainers that fed different taps, and the "
            f"{names} reading{'s' if len(disagree) > 1 else ''} disagree"
            f"{'s' if len(disagree) == 1 else ''} with the {taps_phrase(serving, n)} serving "
            "feeds; nothing measured says which holds.",
            "Readings: " + "; ".join(parts) + ".",
            _SETTLE,
            {
                "readings": {r.trainer: format_layout(r.layout) for r in readings},
                "disagree": [r.trainer for r in disagree],
            },
            LEVEL_ASSUMED,
        )
    ]


# What a differing JSON file of the target says (SpecForge hashes every top-level JSON file).
_JSON_MEANING = {
    "config.json": "another model or revision",
    "tokenizer.json": "another tokenizer",
    "tokenizer_config.json": "another tokenizer or chat template",
    "chat_template.json": "another chat template",
}


def _declared_target(e: Evidence) -> tuple[str | None, list[str], str | None, dict[str, str]]:
    """The target the draft declares: name or path, architectures, revision, JSON digests."""
    spec, card = e.spec, e.report.provenance if e.report is not None else None
    name = spec.verifier if spec is not None else None
    archs = list(spec.extra.get("verifier_architectures") or []) if spec is not None else []
    revision, digests = None, {}
    if card is not None:
        name = name or card.target_path
        revision, digests = card.target_revision, card.target_files
    return name, archs, revision, digests


def _base(name: str) -> str:
    """A model's name without folders or hub owner: 'meta-llama/Llama-3.1-8B' -> 'llama-3.1-8b'."""
    return name.rstrip("/").split("/")[-1].lower()


def rule_draft_for_another_target(e: Evidence) -> list[Finding]:
    """The draft declares another target than the one the server runs.

    speculators configs name their verifier (`speculators_config.verifier.name_or_path`,
    `architectures`); SpecForge 0.2 provenance names the target path, revision and the sha256 of
    its JSON files: config, tokenizer, chat template (training/provenance.py). Severity by what
    was measured: critical only when the measured accept length is materially low.
    """
    name, archs, revision, recorded = _declared_target(e)
    server = e.server
    mismatches = []
    served = server.model_path if server is not None else None
    if name and served and _base(name) != _base(served):
        mismatches.append(f"the draft was made for {name}, the server runs {served}")
    served_archs = list(server.architectures or []) if server is not None else []
    if archs and served_archs and not set(archs) & set(served_archs):
        mismatches.append(
            f"the draft's verifier architectures {archs}, the server's {served_archs}"
        )
    local = e.target_json_sha256 or {}
    for file, digest in sorted(recorded.items()):
        if file in local and local[file] != digest:
            meaning = _JSON_MEANING.get(file, "another file")
            mismatches.append(
                f"the run's target {file} sha256 {digest[:12]}..., the local target's "
                f"{local[file][:12]}... ({meaning})"
            )
    if not mismatches:
        return []
    measured = e.measured.accept_length if e.measured is not None else None
    low = measured is not None and measured < LOW_ACCEPT_LENGTH
    impact = (
        f"measured accept length {_fmt(measured)}"
        + (" is materially low" if low else ", so the draft still helps")
        if measured is not None
        else "acceptance not measured"
    )
    rev = f" (revision {revision})" if revision else ""
    return [
        Finding(
            "draft-for-another-target",
            Severity.CRITICAL if low else Severity.WARNING,
            f"This draft was made for another target: {mismatches[0]}.",
            "; ".join(mismatches) + f"{rev}; {impact}.",
            "Serve the draft with the target it was trained for, or train a draft for the "
            "served target (a draft learns one target's hidden states and tokens).",
            {"declared": name, "served": served, "measured_accept_length": measured},
        )
    ]


def rule_ids_beyond_target(e: Evidence) -> list[Finding]:
    """SpecForge ids at or beyond the target's layer count: SpecForge requires three distinct
    ids below N (algorithms/model_providers.py; SGLang never captures the output of layer N)."""
    spec, n = e.spec, e.num_target_layers
    if spec is None or n is None or spec.format not in ("specforge", "export"):
        return []
    ids = spec.aux_layer_ids if spec.aux_ids_location == "eagle_config" else None
    beyond = [i for i in ids or () if i >= n]
    if not beyond:
        return []
    return [
        Finding(
            "ids-beyond-target",
            Severity.WARNING,
            f"The draft's ids {list(ids or ())} reach past the target's {n} layers.",
            f"ids {beyond} are not below N={n}: no layer's output exists there, so SpecForge "
            "could not have trained on them and SGLang never captures them.",
            "Write the three ids the run trained with (its training_state.pt capture layers), "
            f"each below {n}.",
            {"ids": list(ids or ()), "num_layers": n},
        )
    ]


def rule_record_ids_differ(e: Evidence) -> list[Finding]:
    """The run folder records other capture ids than its exported config.json holds
    (run_record.record_problems): SpecForge 0.2's training_state.pt capture_layers
    (training/provenance.py), speculators' run.yaml target_layer_ids, NeMo AutoModel's
    config.yaml recipe_args.aux_layer_ids. Training read the record, the engines read the config."""
    found = [
        p
        for p in (e.report.problems if e.report else [])
        if p.code is ProblemCode.RECORD_IDS_DIFFER
    ]
    if not found:
        return []
    d = found[0].data
    return [
        Finding(
            "record-ids-differ",
            Severity.WARNING,
            f"The run's record says training captured layer ids {d['recorded']}, but the "
            f"exported config.json says {d['exported']}.",
            f"Training (the run's record, {d['record']}): {d['recorded']}. Serving (config.json "
            f"{d['key']}, what the engines read): {d['exported']}. The training side is taken "
            "from the record.",
            f"Export the draft again with the draft config the run trained with, or write "
            f"{d['recorded']} into config.json's {d['key']}; the layout findings say which taps "
            "each engine then feeds.",
            dict(d),
        )
    ]
