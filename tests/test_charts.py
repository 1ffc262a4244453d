"""The run page's Altair charts, read back from their Vega-Lite dicts on hand-written metrics.

Each chart is built from a small long-format frame (the shape tables.diagnosis_metrics gives) with
rows the chart must leave out; the tests check the rows it plots, which field drives x, y, colour,
marker and dash, and that each side keeps its Okabe-Ito colour and marker in every chart.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from eagle3dash.ui import charts
from eagle3dash.ui.tables import METRIC_COLUMNS

# Okabe-Ito: training blue, serving orange, the endpoint bluish green; the baseline grey.
BLUE, ORANGE, GREEN, GREY = "#0072B2", "#E69F00", "#009E73", "#999999"
VERMILLION = "#D55E00"  # run B on Compare, and slots that differ
TRAINING, SERVING = "training layout", "serving layout"
MEASURED, BASELINE = "endpoint (measured)", "baseline (no speculation)"


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
        # the endpoint's measured acceptance per draft position
        row("measured", "acceptance", 0.85, step=1),
        row("measured", "acceptance", 0.4, step=2),
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
    lines, points = spec["layer"]
    assert (lines["mark"]["type"], points["mark"]["type"]) == ("line", "point")
    rows = sorted((r["side"], r["metric"], r["draft step"], r["value"]) for r in data_of(spec))
    assert rows == [  # steps shown from 1
        (SERVING, "acceptance", 1, 0.3),
        (SERVING, "acceptance", 2, 0.1),
        (SERVING, "accuracy", 1, 0.3),
        (SERVING, "accuracy", 2, 0.2),
        (TRAINING, "acceptance", 1, 0.9),
        (TRAINING, "acceptance", 2, 0.5),
        (TRAINING, "accuracy", 1, 0.9),
        (TRAINING, "accuracy", 2, 0.6),
    ]
    enc = lines["encoding"]
    assert (enc["x"]["field"], enc["x"]["type"]) == ("draft step", "ordinal")
    assert (enc["y"]["field"], enc["y"]["type"]) == ("value", "quantitative")
    assert enc["y"]["scale"]["domain"] == [0, 1]
    # A colour and a marker per side, a dash per metric; legends named "side" and "metric".
    side = {"domain": [TRAINING, SERVING], "range": [BLUE, ORANGE]}
    assert enc["color"]["field"] == "side" and enc["color"]["scale"] == side
    assert points["encoding"]["color"]["scale"] == side
    assert points["encoding"]["shape"]["scale"] == {
        "domain": [TRAINING, SERVING],
        "range": ["circle", "triangle-up"],
    }
    assert enc["strokeDash"]["field"] == "metric"
    assert enc["strokeDash"]["scale"] == {
        "domain": ["accuracy", "acceptance"],
        "range": [[1, 0], [6, 3]],
    }
    assert enc["color"]["legend"]["title"] == "side"
    assert enc["strokeDash"]["legend"]["title"] == "metric"
    assert enc["strokeDash"]["legend"]["symbolType"] == "stroke"


def test_acceptance_chart_colors_only_the_layouts_present() -> None:
    serving_only = METRICS[METRICS["source"] != "training"]
    spec = charts.acceptance_chart(serving_only).to_dict()
    assert {r["side"] for r in data_of(spec)} == {SERVING}
    lines, points = spec["layer"]
    assert lines["encoding"]["color"]["scale"] == {"domain": [SERVING], "range": [ORANGE]}
    assert points["encoding"]["shape"]["scale"] == {"domain": [SERVING], "range": ["triangle-up"]}
    assert charts.acceptance_chart(METRICS[METRICS["name"] == "tok_s"]) is None


def test_per_position_chart_puts_the_measured_acceptance_beside_both_simulations() -> None:
    spec = charts.per_position_chart(METRICS).to_dict()
    lines, points = spec["layer"]
    rows = sorted((r["side"], r["how"], r["k"], r["value"]) for r in data_of(spec))
    assert rows == [
        (MEASURED, "measured", 1, 0.85),
        (MEASURED, "measured", 2, 0.4),
        (SERVING, "simulated", 1, 0.3),
        (SERVING, "simulated", 2, 0.1),
        (TRAINING, "simulated", 1, 0.9),
        (TRAINING, "simulated", 2, 0.5),
    ]
    enc = lines["encoding"]
    assert (enc["x"]["field"], enc["x"]["title"]) == ("k", "draft position k")
    assert enc["y"]["title"] == "share accepting at least k drafts"
    assert enc["color"]["scale"] == {
        "domain": [TRAINING, SERVING, MEASURED],
        "range": [BLUE, ORANGE, GREEN],
    }
    assert points["encoding"]["shape"]["scale"]["range"] == ["circle", "triangle-up", "square"]
    assert enc["strokeDash"]["scale"] == {
        "domain": ["measured", "simulated"],
        "range": [[1, 0], [6, 3]],
    }
    assert spec["title"] == "Acceptance per draft position: measured on the endpoint vs simulated"
    # A server that predates the histogram: the simulated sides alone.
    simulated_only = METRICS[METRICS["source"] != "measured"]
    spec = charts.per_position_chart(simulated_only).to_dict()
    assert {r["how"] for r in data_of(spec)} == {"simulated"}
    assert charts.per_position_chart(METRICS[METRICS["name"] == "tok_s"]) is None


def test_accept_length_chart_bars_per_request_and_simulated_rules() -> None:
    spec = charts.accept_length_chart(METRICS).to_dict()
    bars, rules = spec["layer"]
    assert bars["mark"]["type"] == "bar"
    assert sorted((r["side"], r["request"], r["value"]) for r in layer_data(spec, bars)) == [
        (MEASURED, 0, 2.5),
        (MEASURED, 1, 3.0),
    ]
    assert (bars["encoding"]["x"]["field"], bars["encoding"]["x"]["type"]) == ("request", "ordinal")
    assert bars["encoding"]["y"]["field"] == "value"
    assert rules["mark"]["type"] == "rule"
    assert sorted((r["simulated"], r["value"]) for r in layer_data(spec, rules)) == [
        ("serving", 1.4),
        ("training", 1.8),
    ]
    assert rules["encoding"]["y"]["field"] == "value" and "x" not in rules["encoding"]
    assert rules["encoding"]["strokeDash"]["scale"] == {
        "domain": ["training", "serving"],
        "range": [[6, 3], [2, 2]],
    }
    scale = {"domain": [TRAINING, SERVING, MEASURED], "range": [BLUE, ORANGE, GREEN]}
    for layer in (bars, rules):  # one legend: both layers share the scale of all present
        assert layer["encoding"]["color"]["field"] == "side"
        assert layer["encoding"]["color"]["scale"] == scale


def test_accept_length_chart_with_only_the_simulated_ones() -> None:
    simulated = METRICS[METRICS["source"].isin(["training", "serving"])]
    spec = charts.accept_length_chart(simulated).to_dict()
    (rules,) = spec["layer"]
    assert rules["mark"]["type"] == "rule"
    assert rules["encoding"]["color"]["scale"] == {
        "domain": [TRAINING, SERVING],
        "range": [BLUE, ORANGE],
    }
    assert charts.accept_length_chart(METRICS[METRICS["name"] == "tok_s"]) is None


def test_tok_s_chart_puts_endpoint_and_baseline_side_by_side() -> None:
    spec = charts.tok_s_chart(METRICS).to_dict()
    assert spec["mark"]["type"] == "bar"
    assert sorted((r["side"], r["request"], r["value"]) for r in data_of(spec)) == [
        (BASELINE, 0, 50.0),
        (BASELINE, 1, 40.0),
        (MEASURED, 0, 100.0),
        (MEASURED, 1, 80.0),
    ]
    enc = spec["encoding"]
    assert (enc["x"]["field"], enc["x"]["type"]) == ("request", "ordinal")
    assert enc["xOffset"]["field"] == "side"
    assert (enc["y"]["field"], enc["y"]["title"]) == ("value", "output tok/s")
    assert enc["color"]["field"] == "side"
    assert enc["color"]["scale"] == {"domain": [MEASURED, BASELINE], "range": [GREEN, GREY]}
    measured_only = METRICS[METRICS["source"] != "baseline"]
    scale = charts.tok_s_chart(measured_only).to_dict()["encoding"]["color"]["scale"]
    assert scale == {"domain": [MEASURED], "range": [GREEN]}


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
    rules, dots, *labels = spec["layer"]
    links = sorted(
        (r["slot"], r["training"], r["serving"], r["match"]) for r in layer_data(spec, rules)
    )
    assert links == [(0, 0, 1, "differs"), (1, 2, 2, "same")]
    enc = rules["encoding"]
    fields = (enc["x"]["field"], enc["x2"]["field"], enc["y"]["field"])
    assert fields == ("training", "serving", "slot")
    assert enc["x"]["scale"]["domain"] == [0, 4]  # up to the target's depth, not the deepest tap
    assert enc["color"]["scale"] == {
        "domain": ["same", "differs"],
        "range": ["#bbbbbb", VERMILLION],
    }
    assert len(layer_data(spec, dots)) == 4
    assert (dots["encoding"]["x"]["field"], dots["encoding"]["y"]["field"]) == ("depth", "slot")
    assert dots["encoding"]["fill"]["scale"] == {
        "domain": ["training", "serving"],
        "range": [BLUE, ORANGE],
    }
    assert dots["encoding"]["shape"]["scale"]["range"] == ["circle", "triangle-up"]
    assert spec["height"] == 140 + 40 * 2
    # Each label beside its own marker, not under it: on the marker's row (the side's offset,
    # as the dots), past its radius (size 160: ~7 px), into the plot (right of a marker in the
    # left half of the 0..4 depths, left of one in the right half).
    assert dots["encoding"]["yOffset"]["field"] == "side"
    assert [label["encoding"]["text"]["field"] for label in labels] == ["feeds", "feeds"]
    assert [label["encoding"]["yOffset"]["field"] for label in labels] == ["side", "side"]
    marks = [(label["mark"]["align"], label["mark"]["dx"]) for label in labels]
    assert marks == [("left", 12), ("right", -12)]
    assert [label["transform"][0]["filter"] for label in labels] == [
        "(datum.depth <= 2.0)",
        "(datum.depth > 2.0)",
    ]
    assert (160 / math.pi) ** 0.5 < 12
    assert charts.layout_chart(points.iloc[:0]) is None


def test_compare_acceptance_chart_one_line_per_run_and_layout() -> None:
    other = metrics_frame([row("serving", "accuracy", 0.8, step=1), row("training", "tok_s", 1.0)])
    spec = charts.compare_acceptance_chart(
        {"A #1": METRICS, "B #2": other, "C": other.iloc[:0]}
    ).to_dict()
    rows = sorted((r["run"], r["layout"], r["draft step"], r["value"]) for r in data_of(spec))
    assert rows == [
        ("A #1", "serving", 1, 0.3),
        ("A #1", "serving", 2, 0.2),
        ("A #1", "training", 1, 0.9),
        ("A #1", "training", 2, 0.6),
        ("B #2", "serving", 1, 0.8),
    ]
    lines, points = spec["layer"]
    enc = lines["encoding"]
    assert (enc["x"]["field"], enc["y"]["field"]) == ("draft step", "value")
    # A and B: blue circles and vermillion squares; the side is the dash.
    assert enc["color"]["scale"] == {"domain": ["A #1", "B #2"], "range": [BLUE, VERMILLION]}
    assert points["encoding"]["shape"]["scale"] == {
        "domain": ["A #1", "B #2"],
        "range": ["circle", "square"],
    }
    assert enc["strokeDash"]["field"] == "layout"
    assert enc["strokeDash"]["scale"] == {
        "domain": ["training", "serving"],
        "range": [[1, 0], [6, 3]],
    }
    assert enc["strokeDash"]["legend"]["title"] == "layout side"
    assert charts.compare_acceptance_chart({"C": other.iloc[:0]}) is None


def test_slot_heatmap_chart_names_the_taps_in_depth_order() -> None:
    heat = pd.DataFrame(
        {
            "slot": ["serving slot 0", "serving slot 0"],
            "tap": ["embedding output", "after the final norm"],
            "score": [0.9, 0.1],
            "cosine": [0.95, 0.2],
            "rms_ratio": [1.0, 3.0],
        }
    )
    spec = charts.slot_heatmap_chart(heat).to_dict()
    assert spec["title"] == "Which tap each slot carries: the match score of every slot and tap"
    assert spec["encoding"]["x"]["sort"] == ["embedding output", "after the final norm"]
    assert spec["encoding"]["x"]["title"] == "target tap"
    assert charts.slot_heatmap_chart(heat.iloc[:0]) is None


@pytest.mark.parametrize("side", ["training", "serving", "measured", "baseline", "trainer"])
def test_each_side_keeps_its_colour_and_marker(side: str) -> None:
    colours = {
        "training": BLUE,
        "serving": ORANGE,
        "measured": GREEN,
        "baseline": GREY,
        "trainer": charts.VERMILLION,
    }
    assert charts.SIDE_COLORS[side] == colours[side]
    assert len(set(charts.SIDE_SHAPES.values())) == 5  # five sources, five markers


def _layers(spec: dict) -> list[dict]:
    return spec.get("layer", [spec])


def test_a_healthy_runs_equal_series_stay_apart() -> None:
    # A healthy run: training, serving and measured acceptance all equal. Each line and marker
    # layer must spread its series along x (an xOffset over a field that tells every series
    # apart), and the plotted rows must hold every series, so no series lies under another.
    same = metrics_frame(
        [
            *(
                row(side, "acceptance", v, step=k)
                for side in ("training", "serving", "measured")
                for k, v in ((1, 0.8), (2, 0.6))
            ),
            *(
                row(side, "accuracy", v, step=k)
                for side in ("training", "serving")
                for k, v in ((1, 0.8), (2, 0.6))
            ),
        ]
    )
    for chart, series in (
        (charts.per_position_chart(same), 3),
        (charts.acceptance_chart(same), 4),  # two sides x two metrics
    ):
        spec = chart.to_dict()
        data = next(iter(spec["datasets"].values()))
        for layer in _layers(spec):
            offset = layer["encoding"]["xOffset"]["field"]
            assert len({r[offset] for r in data}) == series
            # every series at every x: each has its own offset position
            assert (
                len({(r[offset], r[layer["encoding"]["x"]["field"]]) for r in data}) == 2 * series
            )
    compare = charts.compare_acceptance_chart({"A #1": same, "B #2": same}).to_dict()
    data = next(iter(compare["datasets"].values()))
    for layer in _layers(compare):
        assert layer["encoding"]["xOffset"]["field"] == "series"
    assert len({r["series"] for r in data}) == 4  # two runs x two sides, none merged
