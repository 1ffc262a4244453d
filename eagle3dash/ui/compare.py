"""Compare's "what differs" block: what changed between two runs before any number (the draft's
config, its layer ids before -> after, its weights, the server's settings, the prompts and
options), the modelled cost of each endpoint when it is an API double (SGLang's or vLLM's), and
a note when the two runs' baselines measured apart beyond their noise. Pure functions, drawn by
`what_differs`."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from eagle3dash.diagnosis.stored import StoredDiagnosis
from eagle3dash.diagnosis.stored_run import StoredRun
from eagle3dash.engines.seam import ServerReport
from eagle3dash.noise import relative_noise
from eagle3dash.servebench import BenchResult
from eagle3dash.severity import Severity
from eagle3dash.ui import words
from eagle3dash.ui.fmt import rows_height

# The draft config's fields that say nothing about the draft itself (where and how it is stored).
CONFIG_SKIPPED = ("path", "files", "tensors", "problems", "nonfinite", "param_count")
SERVER_KEYS = (
    "version",
    "model_path",
    "tp_size",
    "dtype",
    "quantization",
    "attention_backend",
    "enable_return_hidden_states",
    "return_hidden_states_mode",
    "chunked_prefill_size",
    "disable_radix_cache",
    "disable_cuda_graph",
)
SPECULATIVE_KEYS = ("algorithm", "num_steps", "eagle_topk", "num_draft_tokens", "draft_model_path")
MODELLED_COST_KEYS = ("eagle3dash_double_delay_s", "eagle3dash_double_draft_step_s")
OPTION_KEYS = (
    "prompts",
    "num_prompts",
    "max_new_tokens",
    "concurrency",
    "temperatures",
    "steps",
    "target",
    "training_layout",
    "trainer",
)


def _shown(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _rows(what: str, a: Mapping[str, Any], b: Mapping[str, Any], keys) -> list[dict]:
    return [
        {"what": what, "setting": key, "run A": _shown(a.get(key)), "run B": _shown(b.get(key))}
        for key in keys
        if a.get(key) != b.get(key)
    ]


def _settings(settings: object | None, names: tuple[str, ...]) -> dict[str, Any]:
    """The named fields of a typed report (None where it has none) for `_rows`."""
    return {name: getattr(settings, name, None) for name in names}


def _server_settings(server: ServerReport | None) -> dict[str, Any]:
    """A server's SERVER_KEYS, its version with its engine ('vLLM 0.32.0 (V1 runner)')."""
    settings = _settings(server, SERVER_KEYS)
    if server is not None:
        settings["version"] = words.engine_words(server)
    return settings


def _digest(diagnosis: StoredDiagnosis) -> str | None:
    return None if diagnosis.identity is None else diagnosis.identity.checkpoint_digest


def differences(a: StoredDiagnosis, b: StoredDiagnosis) -> list[dict]:
    """Every setting that differs between two stored diagnoses, one row each: what (draft
    config, draft weights, server, prompts and options), the setting, run A's value and run
    B's (the checkpoint report, server report and options compared key by key, as stored)."""
    rows = []
    config_a, config_b = (d.checkpoint.document if d.checkpoint else {} for d in (a, b))
    config_keys = sorted((config_a.keys() | config_b.keys()) - set(CONFIG_SKIPPED))
    rows += _rows("draft config", config_a, config_b, config_keys)
    digest_a, digest_b = _digest(a), _digest(b)
    if digest_a != digest_b:
        rows.append(
            {
                "what": "draft weights",
                "setting": "weights digest",
                "run A": _shown(digest_a and digest_a[:12]),
                "run B": _shown(digest_b and digest_b[:12]),
            }
        )
    server_a, server_b = a.server, b.server
    rows += _rows(
        "server",
        _server_settings(server_a),
        _server_settings(server_b),
        SERVER_KEYS,
    )
    spec_a, spec_b = (None if s is None else s.speculative for s in (server_a, server_b))
    rows += _rows(
        "server (speculative)",
        _settings(spec_a, SPECULATIVE_KEYS),
        _settings(spec_b, SPECULATIVE_KEYS),
        SPECULATIVE_KEYS,
    )
    rows += _rows(
        "server (modelled cost)",
        {} if server_a is None else server_a.server_info,
        {} if server_b is None else server_b.server_info,
        MODELLED_COST_KEYS,
    )
    options_a, options_b = a.options.to_json(), b.options.to_json()  # as a user typed them
    rows += _rows("prompts and options", options_a, options_b, OPTION_KEYS)
    return rows


def ids_change(a: StoredDiagnosis, b: StoredDiagnosis) -> str | None:
    """'[0, 1, 2] → [-1, 0, 1]' when the drafts' aux layer ids differ, else None."""
    ids_a, ids_b = (d.checkpoint.spec.aux_layer_ids if d.checkpoint else None for d in (a, b))
    if ids_a == ids_b:
        return None
    return f"{_shown(ids_a)} → {_shown(ids_b)}"


def baseline_note(a: StoredDiagnosis, b: StoredDiagnosis) -> str | None:
    """A note when the two runs' baselines measured tok/s apart beyond their noise (each
    ± NOISE_SE standard errors of its per-request tok/s, in quadrature): the machine's load or
    the servers differ between the runs, so their tok/s do not compare; their speedups, each
    against its own baseline, do."""
    base_a, base_b = a.baseline, b.baseline
    if base_a is None or base_b is None:
        return None
    tok_a, tok_b = base_a.output_tok_s_aggregate, base_b.output_tok_s_aggregate
    if not tok_a or not tok_b:
        return None
    spread = math.hypot(*(_tok_s_noise(bench) for bench in (base_a, base_b)))
    gap = abs(tok_a - tok_b)
    if gap <= spread:
        return None
    apart = f"{gap / min(tok_a, tok_b):.0%} apart, beyond their noise (±{spread:.1f} tok/s)"
    if base_a.url == base_b.url:
        head = (
            f"The same baseline endpoint ({base_a.url}) measured {tok_a:.1f} tok/s in run A and "
            f"{tok_b:.1f} tok/s in run B, {apart}: the server, its load or the machine changed "
            "between the runs"
        )
    else:
        head = (
            f"The baselines measured {tok_a:.1f} tok/s in run A ({base_a.url}) and {tok_b:.1f} "
            f"tok/s in run B ({base_b.url}), {apart}: the servers, their load or the machine "
            "differ"
        )
    return head + ", so compare the speedups (each against its own baseline), not the tok/s."


def _tok_s_noise(bench: BenchResult) -> float:
    """A benchmark's tok/s noise: its relative noise over the per-request tok/s (0 with fewer
    than two requests)."""
    return bench.output_tok_s_aggregate * (relative_noise(bench.output_tok_s_per_request) or 0.0)


def cost_notes(a: StoredDiagnosis, b: StoredDiagnosis) -> list[str]:
    """The modelled-cost caption of each run's endpoint (an API double's, from its
    server_info), once when both say the same; and, where one run's speedup is modelled and the
    other's measured, that the two do not compare."""
    notes = [words.double_note(d.server) for d in (a, b)]
    if notes[0] == notes[1]:
        return [notes[0]] if notes[0] else []
    said = [f"Run {key}: {note}" for key, note in zip("AB", notes, strict=True) if note]
    if None in notes:
        modelled, measured = ("A", "B") if notes[0] else ("B", "A")
        said.append(
            f"Run {modelled}'s speedup is modelled by an API double's cost, run {measured}'s "
            "measured on a real server: the two speedups do not compare; the accept lengths do."
        )
    return said


def what_differs(run_a: StoredRun, run_b: StoredRun) -> None:
    """Compare's first block: the ids change, every other difference, the cost captions."""
    import streamlit as st

    from eagle3dash.ui.fmt import md_escape

    a, b = run_a.diagnosis(), run_b.diagnosis()
    st.subheader("What differs")
    if a is None or b is None:
        st.caption("A run without a stored diagnosis: only the summary numbers compare.")
        return
    change = ids_change(a, b)
    if change:
        # a code span shows its text as is (escapes would show): only backticks would end it
        st.markdown(f"**Draft layer ids** (aux_layer_ids): `{change.replace('`', '')}`")
    rows = differences(a, b)
    if rows:
        st.dataframe(rows, hide_index=True, width="stretch", height=rows_height(len(rows)))
    else:
        st.caption("Same draft config, weights, server settings, prompts and options.")
    note = baseline_note(a, b)
    if note:
        st.warning(md_escape(note), icon=Severity.WARNING.icon)
    for caption in cost_notes(a, b):
        st.caption(md_escape(caption))
