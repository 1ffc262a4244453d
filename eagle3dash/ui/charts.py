"""Altair charts of a run: plain functions from DataFrames to charts (None when no data).

The numbers come from `tables.diagnosis_metrics` (a diagnosis's long rows; draft steps from 1)
and `tables.layout_points`.

Colors are fixed per source so that training, serving, the measured endpoint and the baseline
look the same in every chart.
"""

from __future__ import annotations

import altair as alt
import pandas as pd

SOURCES = ["training", "serving", "measured", "baseline"]
COLORS = ["#1f77b4", "#d62728", "#ff7f0e", "#7f7f7f"]


def source_scale(present) -> alt.Scale:
    """The fixed source colors, for the sources present only (so legends list only those)."""
    have = set(map(str, present))
    pairs = [(s, c) for s, c in zip(SOURCES, COLORS, strict=True) if s in have]
    return alt.Scale(domain=[s for s, _ in pairs], range=[c for _, c in pairs])


def acceptance_chart(metrics: pd.DataFrame) -> alt.Chart | None:
    """Draft accuracy and acceptance per step, one line per layout (training, serving)."""
    df = metrics[
        metrics["source"].isin(["training", "serving"])
        & metrics["name"].isin(["accuracy", "acceptance"])
        & metrics["step"].notna()
    ].copy()
    if df.empty:
        return None
    df["draft step"] = df["step"].astype(int)
    df["layout"] = df["source"].astype(str)
    df["metric"] = df["name"].astype(str)
    return (
        alt.Chart(df[["draft step", "layout", "metric", "value"]])
        .mark_line(point=True)
        .encode(
            x=alt.X("draft step:O", title="draft step"),
            y=alt.Y("value:Q", title="fraction of positions", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("layout:N", scale=source_scale(df["layout"].unique()), title="layout"),
            strokeDash=alt.StrokeDash("metric:N", title="metric"),
            tooltip=["layout", "metric", "draft step", alt.Tooltip("value:Q", format=".3f")],
        )
        .properties(title="Standalone draft: accuracy and acceptance per step", height=280)
    )


def accept_length_chart(metrics: pd.DataFrame) -> alt.LayerChart | alt.FacetChart | None:
    """Measured accept length per request (bars), with the simulated ones as horizontal rules."""
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
    scale = source_scale([*per_request["source"].unique(), *simulated["source"].unique()])
    layers = []
    if not per_request.empty:
        per_request["request"] = per_request["request"].astype(int)
        per_request["source"] = per_request["source"].astype(str)
        layers.append(
            alt.Chart(per_request[["request", "source", "value"]])
            .mark_bar(opacity=0.8)
            .encode(
                x=alt.X("request:O", title="request"),
                y=alt.Y("value:Q", title="accept length"),
                color=alt.Color("source:N", scale=scale, title="source"),
                tooltip=["source", "request", alt.Tooltip("value:Q", format=".2f")],
            )
        )
    if not simulated.empty:
        simulated["source"] = simulated["source"].astype(str)
        simulated["label"] = "simulated (" + simulated["source"] + ")"
        layers.append(
            alt.Chart(simulated[["source", "label", "value"]])
            .mark_rule(strokeDash=[6, 3], size=2)
            .encode(
                y=alt.Y("value:Q", title="accept length"),
                color=alt.Color("source:N", scale=scale, title="source"),
                tooltip=["label", alt.Tooltip("value:Q", format=".2f")],
            )
        )
    return alt.layer(*layers).properties(
        title="Accept length per request (dashed: simulated by the standalone draft)", height=280
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
    df["source"] = df["source"].astype(str)
    return (
        alt.Chart(df[["request", "source", "value"]])
        .mark_bar()
        .encode(
            x=alt.X("request:O", title="request"),
            xOffset="source:N",
            y=alt.Y("value:Q", title="output tok/s"),
            color=alt.Color("source:N", scale=source_scale(df["source"].unique()), title="source"),
            tooltip=["source", "request", alt.Tooltip("value:Q", format=".1f")],
        )
        .properties(title="Output tok/s per request", height=240)
    )


def layout_chart(
    points: pd.DataFrame, num_layers: int | None = None
) -> alt.LayerChart | alt.FacetChart | None:
    """Slots to taps: each fc slot's training and serving depth, joined red where they differ."""
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
                scale=alt.Scale(domain=["same", "differs"], range=["#bbbbbb", "#d62728"]),
                title="slot",
            ),
        )
    )
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
            shape=alt.Shape(
                "side:N",
                scale=alt.Scale(domain=["training", "serving"], range=["circle", "triangle-up"]),
            ),
            fill=alt.Fill("side:N", scale=source_scale(["training", "serving"]), title="fed in"),
            stroke=alt.value("black"),
            tooltip=["side", "slot", "tap", "feeds"],
        )
    )
    labels = (
        alt.Chart(points)
        .mark_text(dy=-14, fontSize=11)
        .encode(x=alt.X("depth:Q", scale=x_scale), y=y, text="feeds:N", color=alt.value("#444"))
    )
    return alt.layer(rules, dots, labels).properties(
        title="Layer layout: the tap each fc slot gets in training and in serving",
        height=60 + 50 * int(points["slot"].nunique()),
    )


def compare_acceptance_chart(metrics: dict[str, pd.DataFrame]) -> alt.Chart | None:
    """Draft accuracy per step of several runs (run label -> metrics), both layouts."""
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
    return (
        alt.Chart(df[["run", "layout", "draft step", "value"]])
        .mark_line(point=True)
        .encode(
            x=alt.X("draft step:O"),
            y=alt.Y("value:Q", title="draft accuracy", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("run:N"),
            strokeDash=alt.StrokeDash("layout:N"),
            tooltip=["run", "layout", "draft step", alt.Tooltip("value:Q", format=".3f")],
        )
        .properties(title="Draft accuracy per step", height=260)
    )
