"""The run page's Altair charts, read back from their Vega-Lite dicts on hand-written metrics.

Each chart is built from a small long-format frame (the shape tables.diagnosis_metrics gives) with
rows the chart must leave out; the tests check the rows it plots, which field drives x, y, color
and strokeDash, and the fixed source colors of the sources present.
"""

from __future__ import annotations

import pandas as pd
import pytest

from eagle3dash.ui import charts
from eagle3dash.ui.tables import METRIC_COLUMNS

BLUE, RED = "#1f77b4", "#d62728"  # training, serving
ORANGE, GREY = "#ff7f0e", "#7f7f7f"  # measured, baseline


def row(source: str, name: str, value: float | None, step=None, request=None) -> dict:
    return {"source": source, "name": name, "step": step, "request": request, "value": value}


def metrics_frame(rows: list[dict]) -> pd.DataFrame:
    """Long metric rows typed as tables.diagnosis_metrics types them (draft steps from 1)."""
    df = pd.DataFrame(rows, columns=list(METRIC_COLUMNS))
    for col in ("step", "request"):
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("Int64")
    return df.astype({"source": "string", "name": "string", "value": "float64"})


METRICS = metrics_frame(
    [
        # per step: training and serving accuracy and acceptance
        row("training", "accuracy", 0.9, step=1),
        row("training", "accuracy", 0.6, step=2),
        row("training", "acceptance", 0.9, step=1),
        row("training", "acceptance", 0.5, step=2),
        row("serving", "accuracy", 0.3, step=1),
        row("serving", "accuracy", 0.2, step=2),
        row("serving", "acceptance", 0.3, step=1),
        row("serving", "acceptance", 0.1, step=2),
        # simulated accept lengths (scalars) and one per step that no chart plots
        row("training", "accept_length", 1.8),
        row("serving", "accept_length", 1.4),
        row("serving", "accept_length", 1.3, step=3),
        # the endpoint, per request and in total
        row("measured", "accept_length", 2.5, request=0),
        row("measured", "accept_length", 3.0, request=1),
        row("measured", "accept_length", 2.75),
        row("baseline", "accept_length", None, request=0),  # no speculation: no value
        row("measured", "tok_s", 100.0, request=0),
        row("measured", "tok_s", 80.0, request=1),
        row("baseline", "tok_s", 50.0, request=0),
        row("baseline", "tok_s", 40.0, request=1),
        row("measured", "tok_s", 90.0),
        # not plotted anywhere: an accuracy with no step, one of the endpoint
        row("training", "accuracy", 0.75),
        row("measured", "accuracy", 0.5, step=1),
    ]
)


def data_of(spec: dict) -> list[dict]:
    """The rows a (layer) spec plots: its named dataset in the top-level `datasets`."""
    return spec["datasets"][spec["data"]["name"]]


def layer_data(chart_dict: dict, layer: dict) -> list[dict]:
    return chart_dict["datasets"][layer["data"]["name"]]


def test_acceptance_chart_plots_both_layouts_per_step() -> None:
    spec = charts.acceptance_chart(METRICS).to_dict()
    assert spec["mark"] == {"type": "line", "point": True}
    rows = sorted((r["layout"], r["metric"], r["draft step"], r["value"]) for r in data_of(spec))
    assert rows == [  # steps shown from 1
        ("serving", "acceptance", 1, 0.3),
        ("serving", "acceptance", 2, 0.1),
        ("serving", "accuracy", 1, 0.3),
        ("serving", "accuracy", 2, 0.2),
        ("training", "acceptance", 1, 0.9),
        ("training", "acceptance", 2, 0.5),
        ("training", "accuracy", 1, 0.9),
        ("training", "accuracy", 2, 0.6),
    ]
    enc = spec["encoding"]
    assert (enc["x"]["field"], enc["x"]["type"]) == ("draft step", "ordinal")
    assert (enc["y"]["field"], enc["y"]["type"]) == ("value", "quantitative")
    assert enc["y"]["scale"]["domain"] == [0, 1]
    assert enc["color"]["field"] == "layout"
    assert enc["color"]["scale"] == {"domain": ["training", "serving"], "range": [BLUE, RED]}
    assert enc["strokeDash"]["field"] == "metric"


def test_acceptance_chart_colors_only_the_layouts_present() -> None:
    serving_only = METRICS[METRICS["source"] != "training"]
    spec = charts.acceptance_chart(serving_only).to_dict()
    assert {r["layout"] for r in data_of(spec)} == {"serving"}
    assert spec["encoding"]["color"]["scale"] == {"domain": ["serving"], "range": [RED]}
    assert charts.acceptance_chart(METRICS[METRICS["name"] == "tok_s"]) is None


def test_accept_length_chart_bars_per_request_and_simulated_rules() -> None:
    spec = charts.accept_length_chart(METRICS).to_dict()
    bars, rules = spec["layer"]
    assert bars["mark"]["type"] == "bar"
    assert sorted((r["source"], r["request"], r["value"]) for r in layer_data(spec, bars)) == [
        ("measured", 0, 2.5),
        ("measured", 1, 3.0),
    ]
    assert (bars["encoding"]["x"]["field"], bars["encoding"]["x"]["type"]) == ("request", "ordinal")
    assert bars["encoding"]["y"]["field"] == "value"
    assert rules["mark"]["type"] == "rule" and rules["mark"]["strokeDash"] == [6, 3]
    assert sorted((r["label"], r["value"]) for r in layer_data(spec, rules)) == [
        ("simulated (serving)", 1.4),
        ("simulated (training)", 1.8),
    ]
    assert rules["encoding"]["y"]["field"] == "value" and "x" not in rules["encoding"]
    scale = {"domain": ["training", "serving", "measured"], "range": [BLUE, RED, ORANGE]}
    for layer in (bars, rules):  # one legend: both layers share the scale of all present
        assert layer["encoding"]["color"]["field"] == "source"
        assert layer["encoding"]["color"]["scale"] == scale


def test_accept_length_chart_with_only_the_simulated_ones() -> None:
    simulated = METRICS[METRICS["source"].isin(["training", "serving"])]
    spec = charts.accept_length_chart(simulated).to_dict()
    (rules,) = spec["layer"]
    assert rules["mark"]["type"] == "rule"
    assert rules["encoding"]["color"]["scale"] == {
        "domain": ["training", "serving"],
        "range": [BLUE, RED],
    }
    assert charts.accept_length_chart(METRICS[METRICS["name"] == "tok_s"]) is None


def test_tok_s_chart_puts_endpoint_and_baseline_side_by_side() -> None:
    spec = charts.tok_s_chart(METRICS).to_dict()
    assert spec["mark"]["type"] == "bar"
    assert sorted((r["source"], r["request"], r["value"]) for r in data_of(spec)) == [
        ("baseline", 0, 50.0),
        ("baseline", 1, 40.0),
        ("measured", 0, 100.0),
        ("measured", 1, 80.0),
    ]
    enc = spec["encoding"]
    assert (enc["x"]["field"], enc["x"]["type"]) == ("request", "ordinal")
    assert enc["xOffset"]["field"] == "source"
    assert (enc["y"]["field"], enc["y"]["title"]) == ("value", "output tok/s")
    assert enc["color"]["field"] == "source"
    assert enc["color"]["scale"] == {"domain": ["measured", "baseline"], "range": [ORANGE, GREY]}
    measured_only = METRICS[METRICS["source"] != "baseline"]
    scale = charts.tok_s_chart(measured_only).to_dict()["encoding"]["color"]["scale"]
    assert scale == {"domain": ["measured"], "range": [ORANGE]}


def test_layout_chart_links_each_slot_and_marks_the_ones_that_differ() -> None:
    # slot 0: training reads the embedding (0), serving block 1's output; slot 1: both block 2
    points = pd.DataFrame(
        {
            "slot": [0, 0, 1, 1],
            "side": ["training", "serving", "training", "serving"],
            "depth": [0, 1, 2, 2],
            "tap": ["0", "1", "2", "2"],
            "feeds": ["embedding output", "block 1", "block 2", "block 2"],
            "same": [False, False, True, True],
        }
    )
    spec = charts.layout_chart(points, num_layers=4).to_dict()
    rules, dots, labels = spec["layer"]
    links = sorted(
        (r["slot"], r["training"], r["serving"], r["match"]) for r in layer_data(spec, rules)
    )
    assert links == [(0, 0, 1, "differs"), (1, 2, 2, "same")]
    enc = rules["encoding"]
    fields = (enc["x"]["field"], enc["x2"]["field"], enc["y"]["field"])
    assert fields == ("training", "serving", "slot")
    assert enc["x"]["scale"]["domain"] == [0, 4]  # up to the target's depth, not the deepest tap
    assert enc["color"]["scale"] == {"domain": ["same", "differs"], "range": ["#bbbbbb", RED]}
    assert len(layer_data(spec, dots)) == 4
    assert (dots["encoding"]["x"]["field"], dots["encoding"]["y"]["field"]) == ("depth", "slot")
    assert dots["encoding"]["fill"]["scale"] == {
        "domain": ["training", "serving"],
        "range": [BLUE, RED],
    }
    assert labels["encoding"]["text"]["field"] == "feeds"
    assert spec["height"] == 60 + 50 * 2
    assert charts.layout_chart(points.iloc[:0]) is None


def test_compare_acceptance_chart_one_line_per_run_and_layout() -> None:
    other = metrics_frame([row("serving", "accuracy", 0.8, step=1), row("training", "tok_s", 1.0)])
    spec = charts.compare_acceptance_chart(
        {"A": METRICS, "B": other, "C": other.iloc[:0]}
    ).to_dict()
    rows = sorted((r["run"], r["layout"], r["draft step"], r["value"]) for r in data_of(spec))
    assert rows == [
        ("A", "serving", 1, 0.3),
        ("A", "serving", 2, 0.2),
        ("A", "training", 1, 0.9),
        ("A", "training", 2, 0.6),
        ("B", "serving", 1, 0.8),
    ]
    enc = spec["encoding"]
    assert (enc["x"]["field"], enc["y"]["field"]) == ("draft step", "value")
    assert (enc["color"]["field"], enc["strokeDash"]["field"]) == ("run", "layout")
    assert charts.compare_acceptance_chart({"C": other.iloc[:0]}) is None


COLORS = {"training": BLUE, "serving": RED, "measured": ORANGE, "baseline": GREY}


@pytest.mark.parametrize("source", list(COLORS))
def test_source_scale_keeps_each_sources_color(source: str) -> None:
    assert charts.source_scale([source]).to_dict() == {
        "domain": [source],
        "range": [COLORS[source]],
    }
