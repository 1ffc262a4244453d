"""Altair charts of a run: plain functions from DataFrames to charts (None when no data).

The numbers come from `tables.diagnosis_metrics` (a diagnosis's long rows; draft steps from 1),
`tables.layout_points` and `tables.slot_heatmap_frame`.

Series stay apart for colour-blind readers and in grey print: each side (training, serving, the
endpoint, the baseline) keeps one colour of the Okabe-Ito palette and one marker in every chart,
and a dash tells the metrics (or measured from simulated) apart; the legends name the side and the
metric. On Compare, run A and run B each have their colour and marker, the dash is the side.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

import altair as alt
import pandas as pd

# The Okabe-Ito palette (Okabe & Ito 2008, "Color Universal Design"), and a neutral grey.
BLUE, ORANGE, GREEN, VERMILLION = "#0072B2", "#E69F00", "#009E73", "#D55E00"
GREY, LIGHT_GREY = "#999999", "#bbbbbb"
Dash = tuple[int, ...]  # Vega's strokeDash: dash, gap, ...
SOLID: Dash = (1, 0)
DASHED: Dash = (6, 3)
DOTTED: Dash = (2, 2)

# Each side keeps its colour and marker in every chart.
SIDES = ("training", "serving", "measured", "baseline", "trainer")
SIDE_COLORS = {
    "training": BLUE,
    "serving": ORANGE,
    "measured": GREEN,
    "baseline": GREY,
    "trainer": VERMILLION,
}
SIDE_SHAPES = {
    "training": "circle",
    "serving": "triangle-up",
    "measured": "square",
    "baseline": "diamond",
    "trainer": "cross",
}
SIDE_NAMES = {
    "training": "training layout",
    "serving": "serving layout",
    "measured": "endpoint (measured)",
    "baseline": "baseline (no speculation)",
    "trainer": "trainer's own eval (converted)",
}
METRIC_DASHES = {"accuracy": SOLID, "acceptance": DASHED}
SIMULATED_DASHES = {"training": DASHED, "serving": DOTTED}  # the simulated accept lengths
# Compare: a colour and a marker per run (A, B), a dash per side.
RUN_COLORS, RUN_SHAPES = (BLUE, VERMILLION), ("circle", "square")
COMPARE_SIDE_DASHES = {"training": SOLID, "serving": DASHED}


def _side_scales(present: Iterable[str]) -> tuple[alt.Scale, alt.Scale]:
    """The colour and marker scales of the sides present (named as SIDE_NAMES), in SIDES order."""
    have = set(map(str, present))
    sides = [s for s in SIDES if SIDE_NAMES[s] in have]
    names = [SIDE_NAMES[s] for s in sides]
    return (
        alt.Scale(domain=names, range=[SIDE_COLORS[s] for s in sides]),
        alt.Scale(domain=names, range=[SIDE_SHAPES[s] for s in sides]),
    )


def _dash_scale(dashes: Mapping[str, Dash], present: Iterable[str]) -> alt.Scale:
    have = set(map(str, present))
    names = [name for name in dashes if name in have]
    return alt.Scale(domain=names, range=[list(dashes[name]) for name in names])


STROKE_SYMBOL_SIZE = 900  # a legend's line segment 30 px long: two repeats of the longest dash


def _legend(title: str, stroke: bool = False) -> alt.Legend:
    """A legend at the right; `stroke`: its symbols are line segments long enough to show each
    dash whole (Vega's default 10 px cuts a dash to a dot)."""
    if stroke:
        return alt.Legend(
            title=title,
            labelLimit=0,
            symbolType="stroke",
            symbolStrokeWidth=2,
            symbolSize=STROKE_SYMBOL_SIZE,
        )
    return alt.Legend(title=title, labelLimit=0)


def _lines_with_markers(
    df: pd.DataFrame,
    x: alt.X,
    y: alt.Y,
    dash_field: str,
    dashes: Mapping[str, Dash],
    dash_title: str,
    tooltip: list,
) -> alt.LayerChart | alt.FacetChart:
    """One line per side and `dash_field` value: colour and marker per side (field 'side', named
    as SIDE_NAMES), dash per `dash_field` value; a legend for each. Each series sits a little
    apart along x (xOffset), so equal values (a healthy run's sides) never hide one another."""
    color_scale, shape_scale = _side_scales(df["side"])
    color = alt.Color("side:N", scale=color_scale, legend=_legend("side"))
    df = df.assign(series=df["side"].astype(str) + " · " + df[dash_field].astype(str))
    base = alt.Chart(df).encode(x=x, xOffset=alt.XOffset("series:N"), y=y, tooltip=tooltip)
    lines = base.mark_line(strokeWidth=2).encode(
        color=color,
        strokeDash=alt.StrokeDash(
            f"{dash_field}:N",
            scale=_dash_scale(dashes, df[dash_field]),
            legend=_legend(dash_title, stroke=True),
        ),
    )
    points = base.mark_point(size=70, filled=True, opacity=1).encode(
        color=color, shape=alt.Shape("side:N", scale=shape_scale, legend=_legend("side"))
    )
    return alt.layer(lines, points)


def acceptance_chart(metrics: pd.DataFrame) -> alt.LayerChart | alt.FacetChart | None:
    """Draft accuracy and acceptance per step of both layouts: a colour and a marker per side, a
    dash per metric."""
    df = metrics[
        metrics["source"].isin(["training", "serving"])
        & metrics["name"].isin(["accuracy", "acceptance"])
        & metrics["step"].notna()
    ].copy()
    if df.empty:
        return None
    df["draft step"] = df["step"].astype(int)
    df["side"] = [SIDE_NAMES[s] for s in df["source"]]
    df["metric"] = df["name"].astype(str)
    return _lines_with_markers(
        df[["draft step", "side", "metric", "value"]],
        alt.X("draft step:O", title="draft step"),
        alt.Y("value:Q", title="fraction of positions", scale=alt.Scale(domain=[0, 1])),
        "metric",
        METRIC_DASHES,
        "metric",
        ["side", "metric", "draft step", alt.Tooltip("value:Q", format=".3f")],
    ).properties(title="Standalone draft: accuracy and acceptance per step", height=280)


def per_position_chart(metrics: pd.DataFrame) -> alt.LayerChart | alt.FacetChart | None:
    """Acceptance per draft position: measured on the endpoint (the share of verify rounds that
    accepted at least k drafts, solid) beside each side's simulation (the share of chains whose
    first k drafts are right, dashed) and the trainer's own eval converted to the same
    definition (dotted), when the run folder recorded one."""
    df = metrics[
        metrics["source"].isin(["measured", "training", "serving", "trainer"])
        & (metrics["name"] == "acceptance")
        & metrics["step"].notna()
    ].copy()
    if df.empty:
        return None
    df["k"] = df["step"].astype(int)
    df["side"] = [SIDE_NAMES[s] for s in df["source"]]
    hows = {"measured": "measured", "trainer": "trainer's eval"}
    df["how"] = [hows.get(s, "simulated") for s in df["source"]]
    return _lines_with_markers(
        df[["k", "side", "how", "value"]],
        alt.X("k:O", title="draft position k"),
        alt.Y("value:Q", title="share accepting at least k drafts", scale=alt.Scale(domain=[0, 1])),
        "how",
        {"measured": SOLID, "simulated": DASHED, "trainer's eval": DOTTED},
        "acceptance",
        ["side", "how", "k", alt.Tooltip("value:Q", format=".3f")],
    ).properties(
        title="Acceptance per draft position: measured on the endpoint vs simulated", height=280
    )


def accept_length_chart(metrics: pd.DataFrame) -> alt.LayerChart | alt.FacetChart | None:
    """Measured accept length per request (bars), with the simulated ones as horizontal rules (a
    colour and a dash per side)."""
    per_request = metrics[
        metrics["source"].isin(["measured", "baseline"])
        & (metrics["name"] == "accept_length")
        & metrics["request"].notna()
        & metrics["value"].notna()
    ].copy()
    simulated = metrics[
        metrics["source"].isin(["training", "serving"])
        & (metrics["name"] == "accept_length")
        & metrics["step"].isna()
        & metrics["request"].isna()
        & metrics["value"].notna()
    ].copy()
    if per_request.empty and simulated.empty:
        return None
    per_request["side"] = [SIDE_NAMES[s] for s in per_request["source"]]
    simulated["side"] = [SIDE_NAMES[s] for s in simulated["source"]]
    color_scale, _ = _side_scales([*per_request["side"], *simulated["side"]])
    color = alt.Color("side:N", scale=color_scale, legend=_legend("side"))
    layers = []
    if not per_request.empty:
        per_request["request"] = per_request["request"].astype(int)
        layers.append(
            alt.Chart(per_request[["request", "side", "value"]])
            .mark_bar(opacity=0.8)
            .encode(
                x=alt.X("request:O", title="request"),
                y=alt.Y("value:Q", title="accept length"),
                color=color,
                tooltip=["side", "request", alt.Tooltip("value:Q", format=".2f")],
            )
        )
    if not simulated.empty:
        simulated["simulated"] = [s.split(" ")[0] for s in simulated["side"]]
        layers.append(
            alt.Chart(simulated[["side", "simulated", "value"]])
            .mark_rule(size=2)
            .encode(
                y=alt.Y("value:Q", title="accept length"),
                color=color,
                strokeDash=alt.StrokeDash(
                    "simulated:N",
                    scale=_dash_scale(SIMULATED_DASHES, simulated["simulated"]),
                    legend=_legend("simulated", stroke=True),
                ),
                tooltip=["side", alt.Tooltip("value:Q", format=".2f")],
            )
        )
    return alt.layer(*layers).properties(
        title="Accept length per request (lines: simulated by the standalone draft)", height=280
    )


def tok_s_chart(metrics: pd.DataFrame) -> alt.Chart | None:
    """Output tok/s per request for the endpoint and the baseline, side by side."""
    df = metrics[
        metrics["source"].isin(["measured", "baseline"])
        & (metrics["name"] == "tok_s")
        & metrics["request"].notna()
        & metrics["value"].notna()
    ].copy()
    if df.empty:
        return None
    df["request"] = df["request"].astype(int)
    df["side"] = [SIDE_NAMES[s] for s in df["source"]]
    color_scale, _ = _side_scales(df["side"])
    return (
        alt.Chart(df[["request", "side", "value"]])
        .mark_bar()
        .encode(
            x=alt.X("request:O", title="request"),
            xOffset="side:N",
            y=alt.Y("value:Q", title="output tok/s"),
            color=alt.Color("side:N", scale=color_scale, legend=_legend("side")),
            tooltip=["side", "request", alt.Tooltip("value:Q", format=".1f")],
        )
        .properties(title="Output tok/s per request", height=240)
    )


LABEL_GAP_PX = 12  # a layout label's distance from its marker's centre (its radius is ~7 px)


def layout_chart(
    points: pd.DataFrame, num_layers: int | None = None
) -> alt.LayerChart | alt.FacetChart | None:
    """Slots to taps: each fc slot's training and serving depth, joined where they differ."""
    if points.empty:
        return None
    wide = points.pivot_table(index="slot", columns="side", values="depth", aggfunc="first")
    links = pd.DataFrame(
        {
            "slot": wide.index,
            "training": wide.get("training"),
            "serving": wide.get("serving"),
        }
    ).dropna()
    same = points.groupby("slot")["same"].first()
    links["match"] = ["same" if same.get(s, False) else "differs" for s in links["slot"]]
    top = max(int(points["depth"].max()), int(num_layers or 0))
    x_scale = alt.Scale(domain=[0, max(top, 1)])
    y = alt.Y("slot:O", title="fc slot")
    rules = (
        alt.Chart(links)
        .mark_rule(size=3)
        .encode(
            x=alt.X("training:Q", scale=x_scale),
            x2="serving:Q",
            y=y,
            color=alt.Color(
                "match:N",
                scale=alt.Scale(domain=["same", "differs"], range=[LIGHT_GREY, VERMILLION]),
                legend=_legend("the slot's taps"),
            ),
        )
    )
    sides = ["training", "serving"]
    dots = (
        alt.Chart(points)
        .mark_point(size=160, filled=True)
        .encode(
            x=alt.X(
                "depth:Q",
                scale=x_scale,
                title="target depth (decoder blocks; 0 = embedding)",
                axis=alt.Axis(tickMinStep=1, format="d"),
            ),
            y=y,
            yOffset=alt.YOffset("side:N"),  # a slot fed the same tap on both sides: both dots
            shape=alt.Shape(
                "side:N", scale=alt.Scale(domain=sides, range=[SIDE_SHAPES[s] for s in sides])
            ),
            fill=alt.Fill(
                "side:N",
                scale=alt.Scale(domain=sides, range=[SIDE_COLORS[s] for s in sides]),
                title="fed in",
            ),
            stroke=alt.value("black"),
            tooltip=["side", "slot", "tap", "feeds"],
        )
    )
    # Each label beside its own marker, on the marker's row (its side's offset), pointing into
    # the plot: right of a marker in the left half, left of one in the right half.
    beside: tuple[tuple[Any, Literal["left", "right"], int], ...] = (
        (alt.datum.depth <= top / 2, "left", LABEL_GAP_PX),
        (alt.datum.depth > top / 2, "right", -LABEL_GAP_PX),
    )
    labels = [
        alt.Chart(points)
        .transform_filter(keep)
        .mark_text(align=align, dx=dx, baseline="middle", fontSize=11)
        .encode(
            x=alt.X("depth:Q", scale=x_scale),
            y=y,
            yOffset=alt.YOffset("side:N"),
            text="feeds:N",
            color=alt.value("#444"),
        )
        for keep, align, dx in beside
    ]
    return alt.layer(rules, dots, *labels).properties(
        title="Layer layout: the tap each fc slot gets in training and in serving",
        height=140 + 40 * int(points["slot"].nunique()),  # the two legends fit beside it
    )


def compare_acceptance_chart(
    metrics: dict[str, pd.DataFrame],
) -> alt.LayerChart | alt.FacetChart | None:
    """Draft accuracy per step of two runs (run label -> metrics), both layouts: a colour and a
    marker per run, a dash per side."""
    frames = []
    for label, df in metrics.items():
        sel = df[
            df["source"].isin(["training", "serving"])
            & (df["name"] == "accuracy")
            & df["step"].notna()
        ].copy()
        if sel.empty:
            continue
        sel["run"] = label
        frames.append(sel)
    if not frames:
        return None
    df = pd.concat(frames, ignore_index=True)
    df["draft step"] = df["step"].astype(int)
    df["layout"] = df["source"].astype(str)
    df["series"] = df["run"] + " · " + df["layout"]  # each series a little apart along x
    runs = list(dict.fromkeys(df["run"]))
    run_colors = alt.Scale(domain=runs, range=list(RUN_COLORS[: len(runs)]))
    run_shapes = alt.Scale(domain=runs, range=list(RUN_SHAPES[: len(runs)]))
    base = alt.Chart(df[["run", "layout", "series", "draft step", "value"]]).encode(
        x=alt.X("draft step:O"),
        xOffset=alt.XOffset("series:N"),
        y=alt.Y("value:Q", title="draft accuracy", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("run:N", scale=run_colors, legend=_legend("run")),
        tooltip=["run", "layout", "draft step", alt.Tooltip("value:Q", format=".3f")],
    )
    lines = base.mark_line(strokeWidth=2).encode(
        strokeDash=alt.StrokeDash(
            "layout:N",
            scale=_dash_scale(COMPARE_SIDE_DASHES, df["layout"]),
            legend=_legend("layout side", stroke=True),
        )
    )
    points = base.mark_point(size=70, filled=True, opacity=1).encode(
        shape=alt.Shape("run:N", scale=run_shapes, legend=_legend("run"))
    )
    return alt.layer(lines, points).properties(title="Draft accuracy per step", height=260)


def slot_heatmap_chart(heat: pd.DataFrame) -> alt.Chart | None:
    """Slot matching: how well each slot's states match each tap of the target (the score), the
    taps named in words, in depth order."""
    if heat.empty:
        return None
    return (
        alt.Chart(heat, title="Which tap each slot carries: the match score of every slot and tap")
        .properties(height=150 + 30 * int(heat["slot"].nunique()))  # room for the tap names
        .mark_rect()
        .encode(
            x=alt.X(
                "tap:N",
                title="target tap",
                sort=list(dict.fromkeys(heat["tap"])),
                axis=alt.Axis(labelAngle=-30, labelLimit=200),
            ),
            y=alt.Y("slot:N", title=None, sort=None),
            color=alt.Color(
                "score:Q", scale=alt.Scale(scheme="viridis"), legend=alt.Legend(title="match")
            ),
            tooltip=[
                "slot",
                "tap",
                alt.Tooltip("score:Q", format=".3f"),
                alt.Tooltip("cosine:Q", format=".3f"),
                alt.Tooltip("rms_ratio:Q", title="RMS ratio", format=".3g"),
            ],
        )
    )
