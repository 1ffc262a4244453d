"""Compare's "what differs": the settings that changed between two stored diagnoses, the layer
ids before -> after, the baseline that measured differently, the modelled-cost captions."""

from __future__ import annotations

from eagle3dash.diagnosis.stored import StoredDiagnosis, load_diagnosis
from eagle3dash.diagnosis.stored_run import StoredRun, run_from_row
from eagle3dash.ui.compare import baseline_note, cost_notes, differences, ids_change


def diagnosis(ids, digest="a" * 64, steps=4, num_prompts=8, delay=0.01) -> StoredDiagnosis:
    """A stored diagnosis with what Compare reads of it; the rest left out."""
    return load_diagnosis(
        {
            "schema": 3,
            "training": {},
            "serving": {},
            "checkpoint": {"aux_layer_ids": ids, "path": f"/d/{digest[:4]}", "format": "specforge"},
            "draft_identity": {"checkpoint_digest": digest},
            "server": {
                "url": "http://127.0.0.1:30000",
                "version": "0.5.23",
                "speculative": {"algorithm": "EAGLE3", "num_steps": steps},
                "server_info": {"eagle3dash_double": True, "eagle3dash_double_delay_s": delay},
            },
            "options": {
                "draft": "/d",
                "endpoint": "e",
                "prompts": "p.jsonl",
                "num_prompts": num_prompts,
            },
        }
    )


def test_the_fix_shows_as_the_ids_change_and_only_what_changed() -> None:
    # The mismatched draft and its fixed copy: the ids and the folder (and so the digest) differ,
    # the server's version and the prompts do not. The path is where it is stored, not a change.
    a = diagnosis([0, 1, 2], digest="a" * 64)
    b = diagnosis([-1, 0, 1], digest="b" * 64)
    assert ids_change(a, b) == "[0, 1, 2] → [-1, 0, 1]"
    assert differences(a, b) == [
        {
            "what": "draft config",
            "setting": "aux_layer_ids",
            "run A": "[0, 1, 2]",
            "run B": "[-1, 0, 1]",
        },
        {
            "what": "draft weights",
            "setting": "weights digest",
            "run A": "a" * 12,
            "run B": "b" * 12,
        },
    ]
    assert ids_change(a, a) is None and differences(a, a) == []


def test_server_settings_prompts_and_the_modelled_cost_are_listed() -> None:
    a = diagnosis([1, 2, 3])
    b = diagnosis([1, 2, 3], steps=6, num_prompts=16, delay=0.02)
    assert [(r["what"], r["setting"], r["run A"], r["run B"]) for r in differences(a, b)] == [
        ("server (speculative)", "num_steps", "4", "6"),
        ("server (modelled cost)", "eagle3dash_double_delay_s", "0.01", "0.02"),
        ("prompts and options", "num_prompts", "8", "16"),
    ]
    # Two different modelled costs: one caption per run; the same cost: one caption.
    notes = cost_notes(a, b)
    assert len(notes) == 2 and notes[0].startswith("Run A: ") and "at least 10 ms" in notes[0]
    assert "at least 20 ms" in notes[1]
    assert len(cost_notes(a, a)) == 1


def run(**row) -> StoredRun:
    """A run as the store lists it, with only `row`'s columns set."""
    return run_from_row({"id": 1, **row})


def test_the_same_baseline_measured_differently_gets_a_note() -> None:
    a = run(baseline_url="http://b:30001", baseline_tok_s=57.1)
    b = run(baseline_url="http://b:30001", baseline_tok_s=49.2)
    note = baseline_note(a, b)
    assert note is not None and "measured 57.1 tok/s in run A and 49.2 tok/s in run B" in note
    # 57.1 vs 55.0 is 3.7% of their mean: within the drift, no note; other URLs: no note.
    assert baseline_note(a, run(baseline_url="http://b:30001", baseline_tok_s=55.0)) is None
    assert baseline_note(a, run(baseline_url="http://c:30001", baseline_tok_s=49.2)) is None
    assert baseline_note(a, run(baseline_url="http://b:30001", baseline_tok_s=None)) is None
