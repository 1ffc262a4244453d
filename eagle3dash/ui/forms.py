"""The New run form without Streamlit: probing an endpoint and turning inputs into options.

Everything a user types is checked here, so a bad value is an `InputError` with a message the page
shows, never a job that fails later (or a traceback).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3dash import store as db
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.errors import InputError
from eagle3dash.findings import Evidence, diagnose
from eagle3dash.layout import parse_layout
from eagle3dash.servebench import BUILTIN_PROMPT_SETS
from eagle3dash.sglang import SGLangClient, normalize_url
from eagle3dash.trainers import TRAINERS

PROBE_TIMEOUT_S = 5.0
DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class Probe:
    """What a probe of an endpoint found: the ServerReport dict and its server-side findings."""

    url: str
    server: dict
    findings: list[dict]


def probe_endpoint(
    store: db.Store | None, url: str, timeout: float = PROBE_TIMEOUT_S, record: bool = True
) -> Probe:
    """Probe an SGLang endpoint (short timeout, one try); EndpointError says what is wrong."""
    with SGLangClient(url, timeout=timeout, retries=1) as client:
        report = client.probe()
    findings = [f.to_dict() for f in diagnose(Evidence(server=report))]
    server = report.to_dict()
    if record and store is not None:
        db.record_probe(store, report.url, server)
    return Probe(url=report.url, server=server, findings=findings)


@dataclass
class RunForm:
    """The New run inputs, as typed."""

    draft: str | None
    endpoint: str
    baseline: str = ""
    prompts: str = "chat"
    num_prompts: int = 16
    max_new_tokens: int = 64
    steps: int = 5
    concurrency: int = 4
    device: str = "cpu"
    dtype: str = "float32"
    training_layout: str = ""
    trainer: str | None = None
    target: str = ""
    train_states: str = ""
    target_layers: int | None = None
    arch: str = ""


def _existing_path(text: str, what: str) -> str | None:
    text = (text or "").strip()
    if not text:
        return None
    path = Path(text).expanduser()
    if not path.exists():
        raise InputError(f"{what} {text!r} does not exist on this machine")
    return str(path.resolve())


def _positive(value: Any, what: str, upper: int) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise InputError(f"{what} must be a whole number, got {value!r}") from None
    if not 1 <= n <= upper:
        raise InputError(f"{what} must be between 1 and {upper}, got {n}")
    return n


def build_options(form: RunForm) -> DiagnoseOptions:
    """Validated DiagnoseOptions from the form; InputError names the first bad input."""
    if not form.draft:
        raise InputError("choose a draft checkpoint: a registered one, a path or an upload")
    if not (form.endpoint or "").strip():
        raise InputError("give the SGLang endpoint URL, e.g. http://gpubox:30000")
    endpoint = normalize_url(form.endpoint)
    baseline = normalize_url(form.baseline) if (form.baseline or "").strip() else None
    if baseline == endpoint:
        raise InputError("the baseline must be another server: the same target without a draft")
    prompts = (form.prompts or "").strip() or "chat"
    if prompts not in BUILTIN_PROMPT_SETS and not Path(prompts).is_file():
        raise InputError(f"prompts {prompts!r}: not a built-in set nor a saved prompt file")
    training_layout = (form.training_layout or "").strip() or None
    if training_layout:
        try:
            parse_layout(training_layout)
        except ValueError as e:
            raise InputError(f"training layout: {e}") from None
    trainer = form.trainer or None
    if trainer is not None and trainer not in TRAINERS:
        raise InputError(f"unknown trainer {trainer!r} (one of {', '.join(TRAINERS)})")
    if form.device not in DEVICES:
        raise InputError(f"device must be one of {', '.join(DEVICES)}")
    if form.dtype not in DTYPES:
        raise InputError(f"dtype must be one of {', '.join(DTYPES)}")
    target_layers = None
    if form.target_layers not in (None, "", 0):
        target_layers = _positive(form.target_layers, "target layers", 10_000)
    return DiagnoseOptions(
        draft=str(form.draft),
        endpoint=endpoint,
        baseline=baseline,
        prompts=prompts,
        num_prompts=_positive(form.num_prompts, "number of prompts", 100_000),
        max_new_tokens=_positive(form.max_new_tokens, "max new tokens", 65_536),
        concurrency=_positive(form.concurrency, "concurrency", 1024),
        steps=_positive(form.steps, "draft steps", 64),
        train_states=_existing_path(form.train_states, "training states folder"),
        target=_existing_path(form.target, "target path"),
        target_layers=target_layers,
        arch=(form.arch or "").strip() or None,
        trainer=trainer,
        training_layout=training_layout,
        device=form.device,
        dtype=form.dtype,
    )
