"""The acceptance profile on the Run page: frames, charts and words from a diagnosis's `profile`
(`profile.Profile`, as the loader in eagle3dash/diagnosis/stored.py reads it back), and the
section that shows them.

Every number may be null (not measured) and every list may be empty; a diagnosis without a profile
(`--no-profile`, or a run stored before the profile existed) has no section at all. The frames and
charts are plain functions (tested without Streamlit); `profile_section` draws them.
"""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from eagle3dash.diagnosis.stored import StoredDiagnosis
from eagle3dash.profile import CategoryRow, FormatRow, Profile, TemperatureRow
from eagle3dash.profile_export import profile_csv, profile_json
from eagle3dash.severity import Severity
from eagle3dash.ui import charts, icons, words
from eagle3dash.ui.fmt import DASH, is_missing, md_escape, num, ratio
from eagle3dash.ui.provenance import trainer_rows
from eagle3dash.ui.tables import metrics_frame

# per_position's lists, as the sources the per-position chart names.
POSITION_SOURCES = (
    ("simulated_training", "training"),
    ("simulated_serving", "serving"),
    ("measured", "measured"),
)
# The category matrix's columns: the field, its name, how its values read.
CATEGORY_METRICS = (
    ("measured_accept_length", "measured: accept length", "length"),
    ("sim_accept_training", "simulated: training layout", "length"),
    ("sim_accept_serving", "simulated: serving layout", "length"),
    ("tok_s", "output tok/s", "tok/s"),
    ("speedup", "speedup", "speedup"),
)
# Which accept length ranks the categories: the measured one, else the simulation of serving.
WEAKEST_WORDS = {
    "measured_accept_length": "measured accept length",
    "sim_accept_serving": "simulated accept length (serving layout)",
}
WEAKEST_BY = tuple(WEAKEST_WORDS)
PART_NAMES = {
    "per_position": "per draft position",
    "per_category": "per category",
    "prompt_format": "prompt format",
    "temperature": "temperature",
    "steps_advice": "steps advice",
}
SOURCE_NAMES = {
    "measured": "the server's histogram (measured)",
    "simulated": "the standalone draft (simulated)",
}
STEP_COSTS_SOURCES = {
    "baseline": "the verify cost is the baseline's time per token",
}


# --- per draft position -------------------------------------------------------------------------


def per_position_metrics(profile: Profile) -> pd.DataFrame:
    """The profile's acceptance per draft position in `tables.diagnosis_metrics`'s long rows
    (source training / serving / measured, name "acceptance", step = the position), for
    `charts.per_position_chart`; positions without a value are left out."""
    per_position = profile.per_position
    return metrics_frame(
        (source, "acceptance", int(position), None, value)
        for field, source in POSITION_SOURCES
        for position, value in zip(
            per_position.positions, getattr(per_position, field) or [], strict=False
        )
    )


# --- per category -------------------------------------------------------------------------------


def _metric(row: CategoryRow, field: str) -> float | None:
    """One of a category row's numbers by its field name (CATEGORY_METRICS, WEAKEST_BY)."""
    value = getattr(row, field)
    return None if is_missing(value) else float(value)


def weakest_category(profile: Profile) -> tuple[str, str] | None:
    """The category with the lowest accept length (measured, else simulated on the serving
    layout) and the field it was ranked by; None with fewer than two categories to compare."""
    for field in WEAKEST_BY:
        ranked = [
            (value, row.category)
            for row in profile.per_category
            if (value := _metric(row, field)) is not None
        ]
        if len(ranked) >= 2:
            return min(ranked)[1], field
    return None


def weakest_text(profile: Profile) -> str | None:
    """The weakest category in words, with its accept length beside the others'."""
    found = weakest_category(profile)
    if found is None:
        return None
    name, field = found
    values = {
        row.category: value
        for row in profile.per_category
        if (value := _metric(row, field)) is not None
    }
    others = sorted(v for k, v in values.items() if k != name)
    spread = num(others[0]) if others[0] == others[-1] else f"{num(others[0])} to {num(others[-1])}"
    what = WEAKEST_WORDS[field]
    return (
        f"Weakest category: {name}, {what} {num(values[name])} against {spread} for the other "
        f"categories."
    )


def _category_label(kind: str, value: float | None, row: CategoryRow) -> str:
    if value is None:
        return DASH
    if kind == "speedup":
        return ratio(value, row.speedup_noise)
    return num(value, 1 if kind == "tok/s" else 2)


def category_frame(profile: Profile) -> pd.DataFrame:
    """The category x metric matrix in long rows: category, prompts, metric (its name), value,
    share (the value over the best category's for that metric: the cell's colour), label (the
    value as shown), weakest (the row of the weakest category). Metrics no category has are
    left out."""
    rows = profile.per_category
    weakest = weakest_category(profile)
    out = []
    for field, name, kind in CATEGORY_METRICS:
        values = [_metric(row, field) for row in rows]
        present = [v for v in values if v is not None]
        if not present:
            continue
        best = max(present)
        for row, value in zip(rows, values, strict=True):
            out.append(
                {
                    "category": row.category,
                    "prompts": row.prompts,
                    "metric": name,
                    "value": value,
                    "share": None if value is None or best <= 0 else value / best,
                    "label": _category_label(kind, value, row),
                    "weakest": weakest is not None and row.category == weakest[0],
                }
            )
    columns = ["category", "prompts", "metric", "value", "share", "label", "weakest"]
    return pd.DataFrame(out, columns=columns)


def category_chart(profile: Profile) -> alt.LayerChart | alt.FacetChart | None:
    """A heatmap of the categories (rows) by metric (columns): each cell coloured by its share of
    the best category's value for that metric and labelled with the value; the weakest
    category's row outlined in vermillion."""
    df = category_frame(profile)
    if df.empty:
        return None
    categories = list(dict.fromkeys(df["category"]))
    metrics = list(dict.fromkeys(df["metric"]))
    x = alt.X(
        "metric:N",
        sort=metrics,
        title=None,
        # a label per line before and after its colon: "simulated" over "training layout"
        axis=alt.Axis(
            orient="top",
            labelAngle=0,
            labelLimit=0,
            labelOverlap=False,
            labelExpr="split(datum.label, ': ')",
        ),
    )
    y = alt.Y("category:N", sort=categories, title="prompt category")
    base = alt.Chart(df).encode(
        x=x,
        y=y,
        tooltip=["category", "prompts", "metric", alt.Tooltip("label:N", title="value")],
    )
    cells = base.mark_rect(stroke="white", strokeWidth=1).encode(
        color=alt.Color(
            "share:Q",
            scale=alt.Scale(scheme="blues", domain=[0, 1]),
            # under the grid, across: beside it, a few categories' rows are too short for
            # the gradient and its end labels, and the svg cuts "0%" off
            legend=alt.Legend(
                title="of the best category",
                format="%",
                orient="bottom",
                direction="horizontal",
                gradientLength=160,
            ),
        )
    )
    text = base.mark_text(fontSize=13).encode(
        text="label:N",
        color=alt.condition("datum.share > 0.6", alt.value("white"), alt.value("black")),
    )
    outline = (
        alt.Chart(df[df["weakest"]])
        .mark_rect(fillOpacity=0, stroke=charts.VERMILLION, strokeWidth=3)
        .encode(x=x, y=y)
    )
    return alt.layer(cells, text, outline).properties(
        title="Per category: accept length, tok/s and speedup",
        height=alt.Step(36),
    )


# --- prompt format and temperature --------------------------------------------------------------


def _with_noise(row: FormatRow | TemperatureRow) -> str:
    """'2.41 ± 0.12': a measured accept length and its noise over the requests."""
    noise = row.accept_length_noise
    value = num(row.measured_accept_length)
    return value if noise is None or value == DASH else f"{value} ± {num(noise)}"


def format_frame(profile: Profile) -> pd.DataFrame:
    """One row per prompt format: prompts, measured and simulated accept length, tok/s (text)."""
    rows = [
        {
            "prompt format": row.format,
            "prompts": DASH if is_missing(row.prompts) else str(row.prompts),
            "measured accept length": _with_noise(row),
            "simulated accept length (serving layout)": num(row.sim_accept_serving),
            "output tok/s": num(row.tok_s, 1),
        }
        for row in profile.prompt_format
    ]
    columns = [
        "prompt format",
        "prompts",
        "measured accept length",
        "simulated accept length (serving layout)",
        "output tok/s",
    ]
    return pd.DataFrame(rows, columns=columns)


def temperature_frame(profile: Profile) -> pd.DataFrame:
    """One row per sampling temperature: prompts, measured accept length and tok/s (text)."""
    rows = [
        {
            "temperature": num(row.temperature, 1),
            "prompts": DASH if is_missing(row.prompts) else str(row.prompts),
            "measured accept length": _with_noise(row),
            "output tok/s": num(row.tok_s, 1),
        }
        for row in profile.temperature
    ]
    columns = ["temperature", "prompts", "measured accept length", "output tok/s"]
    return pd.DataFrame(rows, columns=columns)


# --- steps advice -------------------------------------------------------------------------------


def steps_frame(profile: Profile) -> pd.DataFrame:
    """The steps advice in numbers: num_steps, predicted tok/s with its interval (low, high:
    ± the measured per-request noise; NaN when not known) and accept length, where the per-step
    acceptance comes from (in words)."""
    rows = []
    for row in profile.steps_advice:
        tok_s, spread = row.predicted_tok_s, row.tok_s_noise
        bounds = (
            (None, None) if tok_s is None or spread is None else (tok_s - spread, tok_s + spread)
        )
        rows.append(
            {
                "num_steps": int(row.num_steps),
                "predicted tok/s": tok_s,
                "low": bounds[0],
                "high": bounds[1],
                "predicted accept length": row.predicted_accept_length,
                "acceptance from": SOURCE_NAMES.get(row.source or "", row.source),
            }
        )
    columns = [
        "num_steps",
        "predicted tok/s",
        "low",
        "high",
        "predicted accept length",
        "acceptance from",
    ]
    return pd.DataFrame(rows, columns=columns)


def settings_frame(profile: Profile) -> pd.DataFrame:
    """The one setting the steps chart marks: the recommendation, labelled with the served
    setting ('recommended: 4 (the served setting)', 'recommended: 1 (served: 4)')."""
    rec = profile.recommended
    rows = []
    if rec is not None:
        served = rec.current_num_steps
        label = f"recommended: {rec.num_steps}" + (
            " (the served setting)" if served == rec.num_steps else f" (served: {served})"
        )
        rows.append({"setting": "recommended", "num_steps": rec.num_steps, "label": label})
    return pd.DataFrame(rows, columns=["setting", "num_steps", "label"])


STEPS_HEIGHTS = {"predicted tok/s": 300, "predicted accept length": 280}  # px, titles included
STEPS_FIELDS = tuple(STEPS_HEIGHTS)


def steps_chart(
    profile: Profile, field: str = "predicted tok/s", knob: str = "draft steps"
) -> alt.LayerChart | alt.FacetChart | None:
    """The steps advice's `field` (one of STEPS_FIELDS) by the draft steps (`knob`: what the
    engine calls them, words.steps_knob): points coloured by where the acceptance per step comes
    from, tok/s with error bars (± the measured per-request noise, where known), and the one
    recommendation as a labelled vertical rule."""
    df = steps_frame(profile)
    if df[field].isna().all():  # nothing to draw: an empty frame says nothing
        return None
    marks = settings_frame(profile)
    steps = [*df["num_steps"], *marks["num_steps"]]
    x_scale = alt.Scale(domain=[min(steps) - 0.5, max(steps) + 0.5], nice=False)
    x = alt.X(
        "num_steps:Q",
        title=knob,
        scale=x_scale,
        axis=alt.Axis(tickMinStep=1, format="d"),
    )
    present = [name for name in SOURCE_NAMES.values() if name in set(df["acceptance from"])]
    colors = {SOURCE_NAMES["measured"]: charts.GREEN, SOURCE_NAMES["simulated"]: charts.ORANGE}
    base = alt.Chart(df).encode(
        x=x,
        y=alt.Y(f"{field}:Q", title=field, scale=alt.Scale(zero=False, padding=12)),
        tooltip=[
            "num_steps",
            alt.Tooltip("predicted tok/s:Q", format=".1f"),
            alt.Tooltip("predicted accept length:Q", format=".2f"),
            "acceptance from",
        ],
    )
    line = base.mark_line(color=charts.GREY, strokeWidth=2)
    points = base.mark_point(size=80, filled=True, opacity=1).encode(
        color=alt.Color(
            "acceptance from:N",
            scale=alt.Scale(domain=present, range=[colors[p] for p in present]),
            legend=alt.Legend(title="acceptance per step from", labelLimit=0),
        )
    )
    layers: list[Any] = []  # the rule first: the points go over it
    if not marks.empty:
        mark_x = alt.X("num_steps:Q", scale=x_scale)
        layers.append(alt.Chart(marks).mark_rule(color="black", strokeWidth=2).encode(x=mark_x))
        layers.append(
            alt.Chart(marks)
            .mark_text(align="left", dx=4, baseline="top", y=2, fontSize=12)
            .encode(x=mark_x, text="label:N")
        )
    bounded = df.dropna(subset=["low", "high"])
    if field == "predicted tok/s" and not bounded.empty:
        layers.append(
            alt.Chart(bounded)
            .mark_rule(color=charts.GREY, strokeWidth=1.5)
            .encode(x=x, y="low:Q", y2="high:Q", tooltip=["num_steps", "low", "high"])
        )
    return alt.layer(*layers, line, points).properties(
        title=f"Steps advice: {field} by draft steps", height=STEPS_HEIGHTS[field]
    )


def step_costs_text(profile: Profile) -> str | None:
    """The costs the prediction rests on, in milliseconds, and where they come from."""
    costs = profile.step_costs
    if costs is None:
        return None
    parts = [
        ("one verify forward", costs.verify_s),
        ("one draft step", costs.draft_step_s),
        ("a request's fixed cost", costs.request_fixed_s),
    ]
    known = [f"{name} {num(v * 1000)} ms" for name, v in parts if v is not None]
    if not known:
        return None
    source = costs.source
    where = f" ({STEP_COSTS_SOURCES.get(source, source)})" if source else ""
    return f"From this run's own timings{where}: " + ", ".join(known) + "."


# --- not profiled -------------------------------------------------------------------------------


def not_profiled_texts(profile: Profile, part: str | None) -> list[str]:
    """The items of one part that could not be measured (None: those naming no part the section
    shows), each with the New-run field or the action that enables it."""
    return [
        f"Not profiled, {PART_NAMES.get(item.part or '', item.part or 'a part')}: "
        + words.not_checked_text(item)
        for item in profile.not_profiled
        if item.part == part or (part is None and item.part not in PART_NAMES)
    ]


# --- the section --------------------------------------------------------------------------------


def profile_section(run_id: int, diagnosis: StoredDiagnosis) -> None:
    """The acceptance profile of a diagnosis that has one: per draft position, per category,
    prompt format and temperature, steps advice, what was not profiled, and the downloads."""
    profile = diagnosis.profile
    if profile is None:
        return

    def not_profiled(part: str | None) -> None:
        for text in not_profiled_texts(profile, part):
            st.info(md_escape(text), icon=icons.NOTE)

    st.subheader("Per draft position")
    trainer = metrics_frame(trainer_rows(diagnosis.checkpoint))
    chart = charts.per_position_chart(pd.concat([per_position_metrics(profile), trainer]))
    if chart is not None:
        st.altair_chart(chart, width="stretch")
        note = words.per_position_note(diagnosis)
        if note:
            st.caption(f"{icons.NOTE} " + md_escape(note))
    not_profiled("per_position")

    st.subheader("Per category")
    chart = category_chart(profile)
    if chart is not None:
        st.altair_chart(chart, width="stretch")
        weakest = weakest_text(profile)
        if weakest:
            st.markdown(f"{Severity.WARNING.icon} " + md_escape(weakest))
    not_profiled("per_category")

    sent = None if diagnosis.measured is None else diagnosis.measured.num_requests
    for title, frame_of, rows, part in (
        ("Prompt format", format_frame, profile.prompt_format, "prompt_format"),
        ("Temperature", temperature_frame, profile.temperature, "temperature"),
    ):
        st.subheader(title)
        frame = frame_of(profile)
        if not frame.empty:
            st.dataframe(frame, hide_index=True, width="stretch")
            note = words.rows_prompts_note(rows, sent)
            if note:
                st.caption(md_escape(note))
        not_profiled(part)

    knob = words.steps_knob(diagnosis.server)
    st.subheader(f"Which {knob}")
    for field in STEPS_FIELDS:
        chart = steps_chart(profile, field, knob)
        if chart is not None:
            st.altair_chart(chart, width="stretch")
        elif profile.steps_advice:
            st.caption(f"{icons.NOTE} No chart of the {field}: no setting has one to draw.")
    recommendation = words.recommendation_text(profile, diagnosis)
    if recommendation:
        st.markdown(md_escape(recommendation))
    recommended = profile.recommended
    # one block to paste a run: while a root cause stands, its fix under the verdict; a steps
    # change for the broken draft waits on the acceptance that fix changes
    fix_first = diagnosis.verdict.root_cause is not None
    if fix_first and recommended is not None and recommended.changes:
        st.caption("No command for this setting yet: apply the fix under the verdict first.")
    elif recommended is not None and recommended.flags and recommended.changes:
        block = words.command_block(recommended.flags, diagnosis.server)
        if block is None:
            st.markdown(f"Flags: `{recommended.flags.replace('`', '')}`")
        else:
            st.caption(md_escape(block.where))
            st.code(block.code, language=block.language, wrap_lines=True)
    costs = step_costs_text(profile)
    if costs:
        st.caption(
            md_escape(
                costs + " The prediction holds for one request at a time on a chain (topk 1); "
                "batching, tree drafting and adaptive speculation change it."
            )
        )
    not_profiled("steps_advice")

    not_profiled(None)

    downloads = (("JSON", profile_json, "application/json"), ("CSV", profile_csv, "text/csv"))
    for column, (kind, export, mime) in zip(st.columns(2), downloads, strict=True):
        column.download_button(
            f"Download the profile ({kind})",
            data=export(diagnosis.document) or "",
            file_name=f"eagle3dash-run-{run_id}-profile.{kind.lower()}",
            mime=mime,
            key=f"profile-{kind.lower()}",
            on_click="ignore",  # a download needs no rerun of the page
        )
