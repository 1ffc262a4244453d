"""Compare's "what differs": the settings that changed between two stored diagnoses, the layer
ids before -> after, the baseline that measured differently, the modelled-cost captions."""

from __future__ import annotations

from eagle3dash.diagnosis.stored import StoredDiagnosis, load_diagnosis
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


def with_baseline(url: str, tok_s: float, per_request: list[float]) -> StoredDiagnosis:
    """A stored diagnosis whose baseline at `url` measured `tok_s`, per request `per_request`."""
    return load_diagnosis(
        {
            "schema": 4,
            "training": {},
            "serving": {},
            "options": {"draft": "/d", "endpoint": "e", "baseline": url},
            "baseline": {
                "url": url,
                "num_requests": len(per_request),
                "concurrency": 1,
                "max_new_tokens": 32,
                "warmup": 1,
                "wall_s": 1.0,
                "completion_tokens": 64,
                "output_tok_s_aggregate": tok_s,
                "output_tok_s_per_request": per_request,
            },
        }
    )


def test_baselines_apart_beyond_their_noise_get_a_note() -> None:
    # Run A's baseline: 57.1 tok/s, requests at 56 and 58: 2 standard errors of 1.0 over their
    # mean of 57 is 3.5%, 2.00 tok/s; run B's: 49.2, requests at 49.0 and 49.4: 0.4 tok/s. They
    # are 7.9 tok/s apart (16% of 49.2), beyond the noise of both, hypot(2.00, 0.40) = 2.04.
    a = with_baseline("http://b:30001", 57.1, [56.0, 58.0])
    b = with_baseline("http://b:30001", 49.2, [49.0, 49.4])
    assert baseline_note(a, b) == (
        "The same baseline endpoint (http://b:30001) measured 57.1 tok/s in run A and 49.2 "
        "tok/s in run B, 16% apart, beyond their noise (±2.0 tok/s): the server, its load or "
        "the machine changed between the runs, so compare the speedups (each against its own "
        "baseline), not the tok/s."
    )
    # Each run's own baseline (the demo's): said as well.
    other = with_baseline("http://c:30001", 49.2, [49.0, 49.4])
    note = baseline_note(a, other)
    assert note is not None and note.startswith(
        "The baselines measured 57.1 tok/s in run A (http://b:30001) and 49.2 tok/s in run B "
        "(http://c:30001), 16% apart"
    )
    # 55.5 with requests at 55 and 56 (noise 1.0): 1.6 tok/s apart, within hypot(2.00, 1.0).
    assert baseline_note(a, with_baseline("http://b:30001", 55.5, [55.0, 56.0])) is None
    assert baseline_note(a, diagnosis([1, 2, 3])) is None  # no baseline: nothing to compare
