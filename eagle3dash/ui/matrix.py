"""Where can this draft be served? The serving matrix (serving_matrix.py) in words: a table of
engine releases (consecutive SGLang releases that agree in one row), the training side it is
judged against, and the dual-key config; for the Checkpoints page and the CLI's `matrix`.

Every row is a prediction from the engines' rules, and says so: none is shown as a green light.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pandas as pd

from eagle3dash.engines.vllm.rules import KNOWN_VLLM_VERSIONS
from eagle3dash.engines.vllm.rules import runners_of as vllm_runners_of
from eagle3dash.layout import Layout, describe_layout, format_layout, taps_phrase
from eagle3dash.serving_matrix import AS_TRAINED, FAILS, MatrixRow, ServingMatrix

_VERDICT_WORDS = {
    AS_TRAINED: "as trained (predicted)",
    FAILS: "fails (predicted)",
}
# the verdict where the engine feeds the taps of a training side that is itself a guess
AS_ASSUMED = "the assumed training taps, which no file settles (predicted)"
_KIND_WORDS = {
    "defaults-used": "its default layers, not the configured ones",
    "shifted-slot": "slots shifted by one",
    "different-width": "another number of slots",
    "post-norm": "the final norm differs",
    "other": "other taps",
}
_LEVEL_WORDS = {
    "declared": "declared by you",
    "assumed": "assumed from the config",
    "recorded": "recorded by the run",
}


@dataclass(frozen=True)
class RowGroup:
    """Consecutive matrix rows of one engine that say the same thing."""

    rows: tuple[MatrixRow, ...]

    @property
    def first(self) -> MatrixRow:
        """The group's first row (all say the same)."""
        return self.rows[0]

    def engine_text(self) -> str:
        """'SGLang 0.5.11 to 0.5.23', 'SGLang 0.5.4', 'vLLM 0.32.0 to 0.33.0, V1 runner', 'vLLM
        0.34.0, V2 runner (the only one)'."""
        e = self.first.engine
        last = self.rows[-1].engine.rules_version()
        span = f" to {last}" if len(self.rows) > 1 else ""
        if e.name == "vllm":
            runner = e.vllm_runner()
            only = all(vllm_runners_of(r.engine.rules_version()) == (runner,) for r in self.rows)
            role = " (the only one)" if only else " (the default)" if runner == "v2" else ""
            return f"vLLM {e.rules_version()}{span}, {runner.upper()} runner{role}"
        return f"SGLang {e.rules_version()}{span}"


def _release_free(row: MatrixRow, text: str | None) -> str | None:
    """A row's text with its own release named generically, so that releases whose reasons
    differ only by their version number group together."""
    engine = row.engine
    name = "SGLang" if engine.name == "sglang" else "vLLM"
    return (
        None if text is None else text.replace(f"{name} {engine.rules_version()}", "this release")
    )


def _same(a: MatrixRow, b: MatrixRow) -> bool:
    keys = ("verdict", "kind", "decode_kind", "fix", "dual_key_ok")
    da, db = a.to_dict(), b.to_dict()
    return (
        a.engine.name == b.engine.name
        and a.engine.runner == b.engine.runner
        and a.served.layout == b.served.layout
        and a.served.decode_layout == b.served.decode_layout
        and _release_free(a, a.served.error) == _release_free(b, b.served.error)
        and _release_free(a, a.why_not) == _release_free(b, b.why_not)
        and all(da[k] == db[k] for k in keys)
    )


def grouped(matrix: ServingMatrix) -> list[RowGroup]:
    """The rows, consecutive ones that say the same thing merged."""
    groups: list[list[MatrixRow]] = []
    for row in matrix.rows:
        if groups and _same(groups[-1][-1], row):
            groups[-1].append(row)
        else:
            groups.append([row])
    return [RowGroup(tuple(g)) for g in groups]


def fix_text(row: MatrixRow, grouped_releases: bool = False, assumed: bool = False) -> str:
    """The config.json keys that make this engine serve the draft as trained, in JSON (for a
    group of releases, its reason names none of them); against an `assumed` training side,
    said to be for the assumed taps."""
    if assumed:
        return "for the assumed taps: " + fix_text(row, grouped_releases)
    if row.load_fix is not None:
        ids = fix_text(replace(row, load_fix=None), grouped_releases)
        return f"{row.load_fix} (it refuses the draft at load); then {ids}"
    if row.fix == {}:
        return "nothing to change"
    if row.fix is None:
        why = _release_free(row, row.why_not) if grouped_releases else row.why_not
        return f"no ids do it: {why}" if why else "no ids do it"
    return json.dumps(row.fix)[1:-1]


def verdict_text(row: MatrixRow, training: Layout, assumed: bool = False) -> str:
    """'as trained (predicted)', 'shifted: every slot one block earlier (predicted)', 'fails:
    <why> (predicted)'; against an `assumed` training side, never 'as trained'."""
    if row.verdict == FAILS:
        return f"fails: {row.served.error} (predicted)"
    if row.verdict == AS_TRAINED:
        return AS_ASSUMED if assumed else _VERDICT_WORDS[AS_TRAINED]
    if row.kind == "identical" and row.decode_kind is not None:
        decode = _KIND_WORDS.get(row.decode_kind, "other taps")
        return f"shifted in CUDA-graph decode steps: {decode} (predicted)"
    if row.kind == "off-by-one":
        later = row.served.layout[0].depth > training[0].depth
        return f"shifted: every slot one block {'later' if later else 'earlier'} (predicted)"
    return f"shifted: {_KIND_WORDS.get(row.kind, 'other taps')} (predicted)"


def taps_text(row: MatrixRow, num_layers: int) -> str:
    """The taps fed, as depths and in words; the decode taps too when they differ."""
    layout = row.served.layout
    text = f"{format_layout(layout) or '-'} ({describe_layout(layout, num_layers) or 'none'})"
    decode = row.served.decode_layout
    if decode is not None and decode != layout:
        text += f"; decode: {format_layout(decode)}"
    return text


def matrix_frame(matrix: ServingMatrix) -> pd.DataFrame:
    """The table: one row per group of engine releases."""
    n = matrix.num_layers
    dual = matrix.dual_key is not None
    assumed = matrix.training.result.assumed is not None
    rows = []
    for g in grouped(matrix):
        row = g.first
        cells = {
            "Engine": g.engine_text(),
            "Taps fed to the slots": taps_text(row, n),
            "Against training": verdict_text(row, matrix.training.layout, assumed),
            "Config that fixes it": fix_text(row, len(g.rows) > 1, assumed),
        }
        if dual:
            cells["With the dual-key config"] = "as trained" if row.dual_key_ok else "not fixed"
        rows.append(cells)
    return pd.DataFrame(rows)


def training_text(matrix: ServingMatrix) -> str:
    """The training side the matrix is judged against, with its evidence level."""
    side = matrix.training
    n = matrix.num_layers
    level = _LEVEL_WORDS.get(side.level, side.level)
    who = f"{side.trainer}'s reading of the config" if side.trainer else "the layout you gave"
    if side.record is not None:
        who = f"{side.trainer}'s reading of the ids in the run's {side.record}"
    taps = f"{format_layout(side.layout)} ({describe_layout(side.layout, n)})"
    if side.result.assumed is not None:
        text = f"Training side unknown: {side.result.assumed}. Assumed here: {taps}, {who}."
        others = "; ".join(f"{r.trainer}: {format_layout(r.layout)}" for r in side.others)
        return text + (f" Other plausible readings: {others}." if others else "")
    text = f"Training fed {taps}: {level}, {who}."
    if side.others:
        others = "; ".join(f"{r.trainer}: {format_layout(r.layout)}" for r in side.others)
        text += (
            f" Other readings of the same files disagree ({others}): give the training layout "
            "to settle it."
        )
    return text


def summary_text(matrix: ServingMatrix) -> str:
    """One sentence: where it is served as trained, where not."""
    good = [g.engine_text() for g in grouped(matrix) if g.first.verdict == AS_TRAINED]
    bad = [g.engine_text() for g in grouped(matrix) if g.first.verdict != AS_TRAINED]
    assumed = matrix.training.result.assumed is not None
    parts = []
    if good:
        served = "fed the assumed training taps" if assumed else "served as trained"
        parts.append(f"{served} on " + "; ".join(good))
    if bad:
        served = "not fed the assumed training taps" if assumed else "not as trained"
        parts.append(f"{served} on " + "; ".join(bad))
    head = "By the engines' rules (predicted, no server asked"
    head += ", against a training side no file settles): " if assumed else "): "
    return head + ", and ".join(parts) + "."


def dual_key_text(matrix: ServingMatrix) -> str | None:
    """The one config.json for both engines, when both can feed the training taps."""
    fix = matrix.dual_key
    if fix is None:
        return None
    return (
        f"One config.json for SGLang {fix.sglang_version} and vLLM {fix.vllm_version} (every "
        f"runner it has), feeding {taps_phrase(fix.target, matrix.num_layers)}: "
        f"{json.dumps(fix.config())[1:-1]} (SGLang reads only the nested list; vLLM reads the "
        "top-level one first)."
    )


def matrix_lines(matrix: ServingMatrix) -> list[str]:
    """The matrix as plain text lines, for the CLI."""
    n = matrix.num_layers
    assumed = matrix.training.result.assumed is not None
    lines = [training_text(matrix), summary_text(matrix), ""]
    for g in grouped(matrix):
        row = g.first
        lines.append(f"{g.engine_text()}: {taps_text(row, n)}")
        lines.append(f"  {verdict_text(row, matrix.training.layout, assumed)}")
        lines.append(f"  fix: {fix_text(row, len(g.rows) > 1, assumed)}")
        for note in row.served.notes:
            lines.append(f"  note: {note}")
    lines.append("")
    lines.append(dual_key_text(matrix) or no_dual_key_text(matrix))
    return lines


def no_dual_key_text(matrix: ServingMatrix) -> str:
    """Why the matrix offers no one config.json for both engines."""
    if not matrix.loads_as_is:
        return (
            "No one config.json for both engines: the engines refuse this file as it is; convert "
            "it first (each row's fix), then read the converted copy."
        )
    return "No one config.json makes both engines feed the training taps."


def matrix_section(path: str, key: str) -> None:
    """The Checkpoints page's 'Where can this draft be served?' section for one checkpoint:
    the target's depth and architecture (and the training taps, when known) in, the matrix out."""
    # imported here: the CLI prints the matrix with this module and needs no Streamlit
    import streamlit as st

    from eagle3dash.checkpoint import inspect
    from eagle3dash.layout import parse_layout
    from eagle3dash.serving_matrix import serving_matrix
    from eagle3dash.ui import widgets
    from eagle3dash.ui.fmt import md_escape

    with st.expander("Where can this draft be served?"):
        st.caption(
            f"Each SGLang release read and vLLM {', '.join(KNOWN_VLLM_VERSIONS)} (each runner "
            "the release has: no V1 from 0.34.0): the taps it feeds this draft's slots by its "
            "rules, against the training side."
        )
        cols = st.columns(3)
        n = cols[0].number_input(
            "Target decoder layers (N)",
            min_value=4,
            max_value=10_000,
            value=None,
            step=1,
            key=f"{key}_layers",
        )
        arch = cols[1].text_input(
            "Target architecture", value="llama", key=f"{key}_arch", help="e.g. llama, kimi"
        )
        taps = cols[2].text_input(
            "Training taps, when known", key=f"{key}_taps", placeholder="e.g. 2,12,22"
        )
        if n is None:
            st.caption("Give the target's layer count to see where this draft can be served.")
            return
        try:
            training = parse_layout(taps) if taps.strip() else None
        except ValueError as e:
            st.error(md_escape(str(e)))
            return
        found = widgets.guard(inspect, path)
        if found is None:
            return
        matrix = widgets.guard(
            serving_matrix,
            found.spec,
            int(n),
            arch.strip() or "llama",
            training=training,
            card=found.provenance,
        )
        if matrix is None:
            return
        st.markdown(md_escape(training_text(matrix)))
        st.markdown(md_escape(summary_text(matrix)))
        widgets.text_table(matrix_frame(matrix))  # its verdicts and fixes wrap in the page
        dual = dual_key_text(matrix)
        if dual and matrix.dual_key is not None:
            st.markdown("**One file for both engines**")
            st.code(json.dumps(matrix.dual_key.config()), language="json", wrap_lines=True)
            st.caption(md_escape(dual))
        elif not matrix.loads_as_is:
            st.caption(md_escape(no_dual_key_text(matrix)))
