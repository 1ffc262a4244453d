"""Checkpoint problems: a code plus data, worded in one place (the rules match them by code:
tests/test_findings.py)."""

from __future__ import annotations

from eagle3dash.checkpoint_problems import CheckpointProblem, ProblemCode

# Every name a sentence may use, once: a code without words, or words naming data no problem
# carries, fails here rather than on a user's checkpoint.
ANY_DATA = {
    **{"tensor": "t", "other": "o", "name": "n", "rows": 3, "q": 4, "kv": 2, "shape": [1, 2]},
    **{"width": 6, "target_hidden_size": 4, "hidden_size": 3, "expected": [2], "dtype": "f"},
    **{"count": 2, "ids": [1, 2], "num_aux": 3, "top": [2, 3], "draft_vocab_size": 8},
    **{"vocab_size": 16, "nan": 1, "inf": 0},
}


def test_every_code_has_its_sentence() -> None:
    for code in ProblemCode:
        text = CheckpointProblem(code, ANY_DATA).text
        assert text and "{" not in text, code


def test_the_sentence_is_made_from_the_data() -> None:
    problem = CheckpointProblem(ProblemCode.QKV_ROWS, {"tensor": "qkv", "rows": 7, "q": 4, "kv": 2})
    assert problem.text == "shape mismatch: qkv has 7 rows, config implies 4+2+2 (q, k, v)"
    assert str(problem) == problem.text
    ids = CheckpointProblem(ProblemCode.AUX_IDS_ORDER, {"ids": [5, 3]})
    assert ids.text.startswith("aux layer ids [5, 3] are not strictly ascending")
