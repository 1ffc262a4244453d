"""The diagnosis options' one schema: DiagnoseOptions.parse checks what the CLI and the app pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from eagle3dash.diagnosis.options import EXCLUSIVE, SCHEMA, DiagnoseOptions, Kind
from eagle3dash.errors import InputError
from eagle3dash.layout import Tap

BASE = {"draft": "/d", "endpoint": "gpubox:30000"}


def parse(naming: str = "label", **values: object) -> DiagnoseOptions:
    return DiagnoseOptions.parse({**BASE, **values}, naming=naming)


def test_empty_values_take_the_defaults() -> None:
    options = parse(baseline="", arch="  ", target_layers=None, trainer=None, prompts="")
    assert options == DiagnoseOptions(draft="/d", endpoint="http://gpubox:30000")
    assert options.prompts == "all" and options.num_prompts == 16 and options.steps == 5
    assert options.device == "cpu" and options.dtype == "float32" and options.trainer is None


def test_text_from_the_cli_becomes_typed_values(tmp_path: Path) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hi"}\n')
    options = parse(
        naming="flag",
        endpoint=" http://gpubox:30000/ ",
        baseline="gpubox:30001",
        prompts=str(prompts),
        num_prompts="2",
        max_new_tokens="16",
        concurrency="1",
        target=str(tmp_path),
        target_layers="61",
        arch="kimi",
        trainer="speculators",
        training_layout=" emb, 3, 31 ",
        steps="3",
        device="cuda",
        dtype="bfloat16",
        capture_dir="/data/cap",
    )
    assert options == DiagnoseOptions(
        draft="/d",
        endpoint="http://gpubox:30000",
        baseline="http://gpubox:30001",
        prompts=str(prompts),
        num_prompts=2,
        max_new_tokens=16,
        concurrency=1,
        target=str(tmp_path.resolve()),
        target_layers=61,
        arch="kimi",
        trainer="speculators",
        training_layout=(Tap(0), Tap(3), Tap(31)),
        steps=3,
        device="cuda",
        dtype="bfloat16",
        capture_dir="/data/cap",
    )


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"draft": None}, "Draft checkpoint is required"),
        (
            {"endpoint": " "},
            "Endpoint URL (the server running the target with this draft) is required",
        ),
        ({"endpoint": "ftp://x"}, "'ftp://x' is not a valid endpoint URL"),
        ({"baseline": "http://gpubox:30000/"}, "must be another server than the endpoint"),
        ({"prompts": "/no/such.jsonl"}, "Prompt set: '/no/such.jsonl' is not a built-in set"),
        ({"num_prompts": 0}, "Number of prompts: must be between 1 and 100000, got 0"),
        ({"max_new_tokens": 65_537}, "Max new tokens: must be between 1 and 65536, got 65537"),
        ({"concurrency": "four"}, "Concurrency: must be a whole number, got 'four'"),
        ({"steps": 2.5}, "Draft steps evaluated: must be a whole number, got 2.5"),
        ({"target_layers": -3}, "Target layers N: must be between 1 and 10000, got -3"),
        ({"target": "/no/such/target"}, "/no/such/target does not exist on this machine"),
        ({"train_states": "/no/such/dump"}, "Training states folder: /no/such/dump does not"),
        ({"training_layout": "a,b"}, "Training layout override (taps the training data used)"),
        ({"trainer": "nope"}, "Trainer (id convention): must be one of specforge"),
        ({"device": "tpu"}, "Device for the standalone draft: must be one of cpu, cuda, got"),
        ({"dtype": "int8"}, "dtype: must be one of float32, bfloat16, float16, got 'int8'"),
    ],
)
def test_each_bad_value_is_named_by_its_form_label(values: dict, message: str) -> None:
    with pytest.raises(InputError) as error:
        parse(**values)
    assert message in str(error.value)


def test_the_cli_names_the_flag() -> None:
    with pytest.raises(InputError, match="^--target-layers: must be between 1 and 10000, got 0$"):
        parse(naming="flag", target_layers="0")
    with pytest.raises(InputError, match="^--endpoint is required$"):
        parse(naming="flag", endpoint=None)


def test_a_local_target_and_training_states_exclude_each_other(tmp_path: Path) -> None:
    assert EXCLUSIVE == (("train_states", "target"),)
    with pytest.raises(InputError, match="^give --train-states or --target, not both$"):
        parse(naming="flag", target=str(tmp_path), train_states=str(tmp_path))


def test_a_name_outside_the_schema_is_a_programming_error() -> None:
    with pytest.raises(TypeError, match="not options of a diagnosis: json, timeout"):
        parse(json=True, timeout=3)


def test_the_schema_holds_every_user_option_in_field_order() -> None:
    assert list(SCHEMA) == [
        "draft",
        "endpoint",
        "baseline",
        "draft_config",
        "prompts",
        "num_prompts",
        "max_new_tokens",
        "concurrency",
        "train_states",
        "target",
        "target_layers",
        "arch",
        "trainer",
        "training_sglang_version",
        "training_layout",
        "steps",
        "device",
        "dtype",
        "capture_dir",
        "capture_server",
        "profile",
        "temperatures",
    ]
    steps = SCHEMA["steps"]
    assert (steps.flag, steps.kind, steps.bounds) == ("--steps", Kind.INT, (1, 64))
    assert steps.default == 5
    assert SCHEMA["max_new_tokens"].flag == "--max-new-tokens"
    assert SCHEMA["draft"].required and SCHEMA["draft"].default is None
    assert SCHEMA["dtype"].describe() == (
        "the draft's dtype for its standalone evaluation; one of float32, bfloat16, float16; "
        "default float32"
    )


def test_the_profile_switch_and_temperatures() -> None:
    base = {"draft": str(Path(__file__)), "endpoint": "http://127.0.0.1:1"}
    options = DiagnoseOptions.parse(base)
    assert options.profile is True and options.temperatures == (0.0, 0.7)
    options = DiagnoseOptions.parse(base | {"profile": False, "temperatures": " 1, 0.50 ,0"})
    assert options.profile is False and options.temperatures == (0.0, 0.5, 1.0)
    assert SCHEMA["temperatures"].describe().endswith("default 0,0.7")
    with pytest.raises(InputError, match=r"^--temperatures: temperature 5 is outside 0..2$"):
        DiagnoseOptions.parse(base | {"temperatures": "0,5"}, naming="flag")
    assert SCHEMA["profile"].flag == "--no-profile"


def test_options_are_text_only_in_their_json() -> None:
    """A run keeps its options as JSON (the job reads them back): the layout and the
    temperatures as the text a user types, typed again on the way in; a run's labels (the
    demo's name) are not options."""
    options = DiagnoseOptions(
        draft="/d",
        endpoint="http://gpubox:30000",
        training_layout=(Tap(0), Tap(3), Tap(61, post_norm=True)),
        temperatures=(0.0, 0.5, 1.0),
    )
    stored = options.to_json()
    assert stored["training_layout"] == "0,3,61n" and stored["temperatures"] == "0,0.5,1"
    assert stored["num_prompts"] == 16 and stored["baseline"] is None
    assert DiagnoseOptions.from_json({**stored, "demo": "mismatched"}) == options
    older = {"draft": "/d", "endpoint": "http://gpubox:30000", "training_layout": None}
    assert DiagnoseOptions.from_json(older).temperatures == (0.0, 0.7)
