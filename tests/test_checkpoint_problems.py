"""Checkpoint problems: a code plus data, worded in one place (the rules match them by code:
tests/test_findings.py)."""

from __future__ import annotations

from eagle3dash.checkpoint_problems import CheckpointProblem, ProblemCode, problem_lines

# Every name a sentence may use, once: a code without words, or words naming data no problem
# carries, fails here rather than on a user's checkpoint.
ANY_DATA = {
    **{"tensor": "t", "other": "o", "name": "n", "rows": 3, "q": 4, "kv": 2, "shape": [1, 2]},
    **{"width": 6, "target_hidden_size": 4, "hidden_size": 3, "expected": [2], "dtype": "f"},
    **{"count": 2, "ids": [1, 2], "num_aux": 3, "top": [2, 3], "draft_vocab_size": 8},
    **{"vocab_size": 16, "nan": 1, "inf": 0, "architectures": ["A"], "fix": "B"},
    **{"configured": 32, "layers": 1, "untrained": 31, "record": "r", "recorded": [1, 2, 3]},
    **{"exported": [2, 3, 4], "key": "k"},
}


def test_every_code_has_its_sentence() -> None:
    for code in ProblemCode:
        text = CheckpointProblem(code, ANY_DATA).text
        assert text and "{" not in text, code


def test_the_sentence_is_made_from_the_data() -> None:
    problem = CheckpointProblem(ProblemCode.QKV_ROWS, {"tensor": "qkv", "rows": 7, "q": 4, "kv": 2})
    assert problem.text == "shape mismatch: qkv has 7 rows, config implies 4+2+2 (q, k, v)"
    assert str(problem) == problem.text
    ids = CheckpointProblem(ProblemCode.AUX_IDS_ORDER, {"ids": [5, 5]})
    assert ids.text.startswith("aux layer ids [5, 5] name a layer more than once")


def missing(tensor: str, shape: list[int]) -> CheckpointProblem:
    return CheckpointProblem(ProblemCode.MISSING_TENSOR, {"tensor": tensor, "expected": shape})


def test_many_missing_tensors_fold_into_one_line() -> None:
    """A config naming 32 layers over one layer's weights misses 31 x 9 tensors: one line says
    how many and where, beside the other problems in their order."""
    names = ["input_layernorm.weight", "self_attn.q_proj.weight", "mlp.down_proj.weight"]
    gone = [missing(f"layers.{i}.{n}", [8]) for i in range(1, 32) for n in names]
    order = CheckpointProblem(ProblemCode.AUX_IDS_ORDER, {"ids": [5, 5]})
    lines = problem_lines([order, *gone, CheckpointProblem(ProblemCode.LM_HEAD_MISSING)])
    assert len(lines) == 3 and lines[0] == order.text and lines[2].startswith("lm_head.weight")
    assert lines[1].startswith(
        "missing 93 tensors (in decoder layers 1 to 31): layers.1.input_layernorm.weight [8], "
        "layers.1.self_attn.q_proj.weight [8], layers.1.mlp.down_proj.weight [8] and 90 more: "
    )
    assert "set it to theirs" in lines[1]
    few = [missing("layers.0.mlp.up_proj.weight", [4]), missing("norm.weight", [2])]
    assert problem_lines(few) == [p.text for p in few]  # a few stay one line each
