"""The root cause is what explains the measurement, at the evidence it has (issue 41): a side
that is assumed, its cost not measured, gives no critical finding; the root cause's words never
contradict another finding of the same run. The real engine's runs are judged in
tests/test_real_vllm_claims.py."""

from __future__ import annotations

from eagle3dash.engines.serving import ServingEngine
from eagle3dash.findings import Evidence, Finding, diagnose
from eagle3dash.layout import Tap
from eagle3dash.prediction import predict_layouts
from tests.findingskit import Bench, Eval, Server, Side, Spec, report
from tests.specs import tiny_spec

VLLM_V1 = ServingEngine("vllm", "0.32.0", "v1")


def taps(*depths: int) -> tuple[Tap, ...]:
    return tuple(Tap(d) for d in depths)


def on_vllm(spec, measured: Bench, **sides) -> Evidence:
    """A diagnosis's evidence on a vLLM 0.32.0 V1 server of an 8-block target: the training side
    the config's reading (assumed), the serving side vLLM's rules (nested [0, 1, 2]: taps 0, 1,
    2), unless given."""
    layouts = predict_layouts(spec, 8, engine=VLLM_V1)
    served = tuple(layouts.serving.layout)
    return Evidence(
        report=report(spec),
        num_target_layers=8,
        arch="llama",
        server=Server(version="0.32.0", speculative=Spec(num_steps=3)),
        layouts=layouts,
        training=sides.pop("training", Side(tuple(layouts.training.layout), "config")),
        serving=sides.pop("serving", Side(served, "predicted", prediction=served)),
        engine="vllm",
        vllm_runner="v1",
        measured=measured,
        **sides,
    )


def first_critical(found: list[Finding]) -> Finding | None:
    return next((f for f in found if f.severity == "critical"), None)


NESTED_012 = dict(aux_layer_ids=(0, 1, 2), aux_ids_location="eagle_config")


def test_an_observed_d2t_missing_is_the_root_cause_not_an_assumed_layout() -> None:
    """A cut vocabulary without d2t accepts 1.00 on the real vLLM (tests/test_real_vllm_claims.py):
    vLLM reads draft id i as target id i. The config's reading under SpecForge's convention
    (taps 1, 2, 3) against vLLM's taps 0, 1, 2 is an assumption whose cost was not measured."""
    spec = tiny_spec(
        vocab_size=256, draft_vocab_size=128, has_d2t=False, has_t2d=False, **NESTED_012
    )
    found = diagnose(on_vllm(spec, Bench(output_tok_s_aggregate=10.0, accept_length=1.0)))
    root = first_critical(found)
    assert root is not None and root.id == "d2t-missing"
    (layout,) = [f for f in found if f.id == "layout-mismatch"]
    assert layout.severity == "info" and layout.basis == "assumed"
    assert "d2t-missing" in layout.evidence  # beside the finding that explains the measurement
    assert [f.id for f in found if f.severity == "critical" and f.basis == "assumed"] == []


def test_an_assumed_layout_whose_cost_was_not_measured_is_a_warning_that_says_what_settles_it():
    spec = tiny_spec(**NESTED_012)
    found = diagnose(on_vllm(spec, Bench(output_tok_s_aggregate=10.0, accept_length=1.1)))
    (layout,) = [f for f in found if f.id == "layout-mismatch"]
    assert layout.severity == "warning"
    assert "would settle it" in layout.evidence
    assert first_critical(found) is None


def test_the_root_cause_does_not_say_the_sides_feed_alike_beside_a_layout_difference() -> None:
    """Draft C on the real vLLM: fed one block early at little cost, it accepts little on raw
    prompts, and the endpoint is slower than its baseline. The slowdown's fix may not say that
    training and serving feed the draft alike: the layout finding says they do not."""
    spec = tiny_spec(**NESTED_012)
    trained, fed = taps(1, 2, 3), taps(0, 1, 2)
    e = on_vllm(
        spec,
        Bench(output_tok_s_aggregate=5.0, accept_length=1.3),
        training=Side(trained, "layout-detective"),
        serving=Side(fed, "acceptance-matched", prediction=fed),
        baseline=Bench(output_tok_s_aggregate=10.0),
        training_eval=Eval([0.4, 0.2, 0.1], accept_length_per_sequence=[1.2, 2.2, 1.5, 1.9]),
        serving_eval=Eval([0.37, 0.18, 0.1], accept_length_per_sequence=[0.9, 2.4, 1.4, 1.9]),
    )
    found = diagnose(e)
    (layout,) = [f for f in found if f.id == "layout-mismatch"]
    assert layout.severity == "info"
    root = first_critical(found)
    assert root is not None and root.id == "slower-than-baseline"
    assert "feed the draft alike" not in root.fix
    assert "different taps (layout-mismatch)" in root.fix and "does not explain" in root.fix
