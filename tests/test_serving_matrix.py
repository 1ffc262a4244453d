"""Where can this draft be served? The serving matrix: the library, its words, the CLI's `matrix`
and the Checkpoints page's section.

Expected taps are written by hand from issue 22's rules: SGLang's Llama id i -> Tap(i + 1) (and
CUDA-graph decode steps capture the defaults up to 0.5.10); vLLM id k -> Tap(k); vLLM V1 reads
the nested ids as stored; V2 never reads them and feeds 2, N//2, N-3.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eagle3dash import store as db
from eagle3dash.checkpoint import save
from eagle3dash.layout import Tap
from eagle3dash.serving_matrix import AS_TRAINED, FAILS, SHIFTED, serving_matrix
from eagle3dash.testing.tensors import random_tensors
from eagle3dash.ui.matrix import grouped, matrix_frame, matrix_lines
from tests.appkit import app, frame_with, no_exception, texts
from tests.specs import SPECFORGE_GPT_OSS, SPECULATORS_TOP, run_cli, tiny_spec

N = 24
NESTED = SPECFORGE_GPT_OSS  # nested [1, 11, 21]
TOP = SPECULATORS_TOP  # top-level [2, 12, 22], norm_before_residual written


def row(matrix, name: str, version: str, runner: str | None = None):
    (found,) = [
        r
        for r in matrix.rows
        if r.engine.name == name and r.engine.version == version and r.engine.runner == runner
    ]
    return found


def depths(layout) -> list[int]:
    return [t.depth for t in layout]


def test_specforge_nested_ids_across_engines():
    """SpecForge gpt-oss-20B ids [1, 11, 21], N=24, trained as taps 2, 12, 22."""
    m = serving_matrix(NESTED, N, "GptOssForCausalLM")
    assert depths(m.training.layout) == [2, 12, 22]
    assert m.training.level == "assumed" and m.training.trainer == "specforge"
    new = row(m, "sglang", "0.5.23")
    assert depths(new.served.layout) == [2, 12, 22] and new.verdict == AS_TRAINED
    assert new.fix == {}
    old = row(m, "sglang", "0.5.10")  # CUDA-graph decode steps capture 2, 12, 21
    assert old.verdict == SHIFTED and depths(old.served.decode_layout) == [2, 12, 21]
    assert old.fix is None and "--disable-cuda-graph" in (old.why_not or "")
    v1 = row(m, "vllm", "0.33.0", "v1")
    assert depths(v1.served.layout) == [1, 11, 21] and v1.kind == "off-by-one"
    assert v1.fix == {"eagle_aux_hidden_state_layer_ids": [2, 12, 22]}
    v2 = row(m, "vllm", "0.33.0", "v2")
    assert depths(v2.served.layout) == [2, 12, 21] and v2.kind == "defaults-used"
    assert v2.fix == {"eagle_aux_hidden_state_layer_ids": [2, 12, 22]}
    assert m.dual_key is not None
    assert m.dual_key.config() == {
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 11, 21]},
        "eagle_aux_hidden_state_layer_ids": [2, 12, 22],
    }
    # the dual-key config serves as trained wherever ids can do it (not under CUDA-graph bugs)
    assert new.dual_key_ok and v1.dual_key_ok and v2.dual_key_ok and not old.dual_key_ok


def test_speculators_top_level_ids_as_trained_on_vllm_not_on_sglang():
    """Top-level [2, 12, 22] (vLLM numbering): both vLLM runners feed 2, 12, 22; SGLang reads
    no nested ids and feeds its defaults 2, 12, 21, fixed by nested [1, 11, 21]."""
    m = serving_matrix(TOP, N)
    assert depths(m.training.layout) == [2, 12, 22]
    for runner in ("v1", "v2"):
        r = row(m, "vllm", "0.33.0", runner)
        assert r.verdict == AS_TRAINED and depths(r.served.layout) == [2, 12, 22]
    s = row(m, "sglang", "0.5.23")
    assert depths(s.served.layout) == [2, 12, 21] and s.verdict == SHIFTED
    assert s.fix == {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 11, 21]}}


def test_declared_training_layout_and_a_failing_engine():
    """Declared taps 0, 12, 22 (the embedding) on a Kimi target of 24 layers: vLLM cannot
    capture the embedding on DeepSeek-family targets, so no vLLM fix and no dual-key config."""
    m = serving_matrix(NESTED, N, "kimi", training=(Tap(0), Tap(12), Tap(22)))
    assert m.training.level == "declared" and m.training.trainer is None
    v2 = row(m, "vllm", "0.33.0", "v2")
    assert v2.fix is None and "DeepSeek" in (v2.why_not or "")
    assert m.dual_key is None


def test_capture_off_fails_everywhere():
    spec = tiny_spec(use_aux_hidden_state=False, aux_layer_ids=(1, 11, 21))
    m = serving_matrix(spec, N)
    assert row(m, "vllm", "0.33.0", "v2").verdict == FAILS
    assert row(m, "sglang", "0.5.23").verdict == FAILS


def test_words_group_releases_and_never_show_a_green_light():
    m = serving_matrix(NESTED, N, "GptOssForCausalLM")
    engines = [g.engine_text() for g in grouped(m)]
    assert engines == [
        "SGLang 0.5.4 to 0.5.10",
        "SGLang 0.5.11 to 0.5.23",
        "vLLM 0.32.0 to 0.33.0, V1 runner",
        "vLLM 0.32.0 to 0.34.0, V2 runner (the default)",
    ]
    frame = matrix_frame(m)
    assert all("(predicted)" in v for v in frame["Against training"])
    assert list(frame["With the dual-key config"]) == [
        "not fixed",
        "as trained",
        "as trained",
        "as trained",
    ]
    text = "\n".join(matrix_lines(m))
    assert "on this release CUDA-graph decode steps" in text  # a group names no one release


@pytest.fixture
def tiny_draft(tmp_path) -> Path:
    """A tiny SpecForge checkpoint with nested ids [1, 11, 21]."""
    return save(NESTED, random_tensors(NESTED, seed=5), tmp_path / "draft", "specforge")


def test_cli_matrix(tiny_draft):
    out = run_cli("matrix", "--draft", str(tiny_draft), "--target-layers", "24", "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    by_engine = {(r["engine"], r["version"], r["runner"]): r for r in d["rows"]}
    v2 = by_engine[("vllm", "0.33.0", "v2")]
    assert [t["depth"] for t in v2["served"]["layout"]] == [2, 12, 21]
    assert v2["fix"] == {"eagle_aux_hidden_state_layer_ids": [2, 12, 22]}
    assert d["dual_key"]["nested_ids"] == [1, 11, 21]
    assert d["dual_key"]["top_level_ids"] == [2, 12, 22]
    text = run_cli("matrix", "--draft", str(tiny_draft), "--target-layers", "24")
    assert text.returncode == 0, text.stderr
    assert "vLLM 0.32.0 to 0.34.0, V2 runner (the default): 2,12,21" in text.stdout
    assert '"eagle_aux_hidden_state_layer_ids": [2, 12, 22]' in text.stdout


def test_cli_matrix_bad_training_layout_is_one_line(tiny_draft):
    out = run_cli(
        "matrix", "--draft", str(tiny_draft), "--target-layers", "24", "--training-layout", "x"
    )
    assert out.returncode == 1
    assert "not a tap" in out.stderr and "Traceback" not in out.stderr


def test_checkpoints_page_shows_the_matrix(home, tiny_draft):
    checkpoint_id = db.add_checkpoint(home, tiny_draft, name="draft")
    at = app("checkpoints")
    no_exception(at)
    assert "Give the target's layer count" in texts(at, "caption")
    at.number_input(key=f"matrix_{checkpoint_id}_layers").set_value(24).run()
    no_exception(at)
    frame = frame_with(at, "Against training").set_index("Engine")
    v2 = frame.loc["vLLM 0.32.0 to 0.34.0, V2 runner (the default)", "Taps fed to the slots"]
    assert v2.startswith("2,12,21")
    assert frame.loc["SGLang 0.5.11 to 0.5.23", "Against training"] == "as trained (predicted)"
    assert '"eagle_aux_hidden_state_layer_ids": [2, 12, 22]' in texts(at, "code")
    at.text_input(key=f"matrix_{checkpoint_id}_taps").set_value("2,x").run()
    no_exception(at)
    assert "not a tap" in texts(at, "error")
