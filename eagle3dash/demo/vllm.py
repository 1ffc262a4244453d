"""The demo's draft B on the vLLM API double (`testing/vllm_double.py`, a test and demo double,
not a serving engine): what vLLM 0.33's two model runners do with a SpecForge config.

Draft B was trained on taps 1, 2, 3 and stores SpecForge's nested ids [0, 1, 2]
(`eagle_config.eagle_aux_hidden_state_layer_ids`, SGLang's numbering). On vLLM (rules read in the
released wheel vllm 0.33.0, `engines/vllm/rules.py`):

- "vllm-v2": the V2 runner (the default) never reads the nested ids and captures its defaults
  (2, N//2, N-3) = ids 2, 2, 1 on the 4-block demo target; `sorted(set(...))` leaves two states for
  fc's three slots, so vLLM cannot serve it and the double refuses to start with that reason. On a
  deeper target the same config is served the defaults without a word (tests/test_vllm_pipeline.py).
- "vllm-v1": the V1 runner reads the nested ids as vLLM ids (id k = the state after k blocks):
  taps 0, 1, 2, every slot one block early, and acceptance collapses.
- "vllm-dual-key": the fix, both keys in one config.json: the nested SGLang ids [0, 1, 2] and the
  top-level vLLM ids [1, 2, 3]; both runners feed taps 1, 2, 3.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ..testing.vllm_double import VLLMDoubleConfig
from . import DELAY_S, DRAFT_STEP_S, FIXTURES, NUM_STEPS, RANDOM_SEED

VLLM_DEMO_NAMES = ("vllm-v2", "vllm-v1", "vllm-dual-key")
# What New run's "Try it on the demo" says of the two vLLM deployments it serves (V2 cannot start).
VLLM_DESCRIPTIONS = {
    "vllm-v1": "Draft B (SpecForge config: nested ids [0, 1, 2], SGLang's numbering) on the vLLM "
    "double's V1 runner (VLLM_USE_V2_MODEL_RUNNER=0), which reads the nested ids as vLLM ids: "
    "every slot is fed the state one block early.",
    "vllm-dual-key": "Draft B with the fix for both engines: the nested SGLang ids [0, 1, 2] and "
    "the top-level vLLM ids [1, 2, 3] in one config.json, on the vLLM double's V2 runner.",
}
DUAL_KEY_IDS = [1, 2, 3]  # vLLM ids of draft B's training taps 1, 2, 3 (id k = Tap(k))


def dual_key_draft(home: Path, fixtures: Path = FIXTURES) -> Path:
    """Draft B with the top-level vLLM ids written beside its nested SGLang ids (the fix)."""
    out = home / "demo" / "draft-b-dual-key"
    config_path = out / "config.json"
    if not config_path.is_file():
        shutil.copytree(fixtures / "draft-b", out, dirs_exist_ok=True)
        config = json.loads(config_path.read_text())
        config["eagle_aux_hidden_state_layer_ids"] = DUAL_KEY_IDS
        config_path.write_text(json.dumps(config, indent=2))
    return out


def vllm_demo_draft(name: str, home: Path, fixtures: Path = FIXTURES) -> Path:
    """The draft a vLLM demo deployment serves: draft B, or its dual-key copy under `home`."""
    if name not in VLLM_DEMO_NAMES:
        raise ValueError(f"no vLLM demo deployment {name!r}: one of {', '.join(VLLM_DEMO_NAMES)}")
    return dual_key_draft(home, fixtures) if name == "vllm-dual-key" else fixtures / "draft-b"


def vllm_deployment(name: str, home: Path, fixtures: Path = FIXTURES) -> VLLMDoubleConfig:
    """The vLLM double's configuration of one of VLLM_DEMO_NAMES (dev endpoints and per-request
    metrics on, so every check can run)."""
    return vllm_double_config(name, vllm_demo_draft(name, home, fixtures), fixtures=fixtures)


def vllm_double_config(
    name: str, draft: Path | None, baseline: bool = False, fixtures: Path = FIXTURES
) -> VLLMDoubleConfig:
    """The vLLM double serving `draft` as deployment `name` does; `baseline`: the same target
    without speculation (a vLLM double too, so both sides of the speedup pay the same costs)."""
    return VLLMDoubleConfig(
        target_path=fixtures / "target",
        draft_path=None if baseline else draft,
        method=None if baseline else "eagle3",
        num_speculative_tokens=NUM_STEPS,
        runner="v1" if name == "vllm-v1" else "v2",
        dev_endpoints=True,
        per_request_metrics="summary",
        served_model_name="demo-target",
        random_seed=RANDOM_SEED,
        delay_s=DELAY_S,  # the SGLang demo's modelled cost, so the two engines' tok/s compare
        draft_step_s=DRAFT_STEP_S,
    )
