"""New run's and Checkpoints' Streamlit pieces: the demo in one click, where the checkpoint and
the prompts come from, the warnings before submit, and a checkpoint's runs.

The demo's endpoints are SGLang API doubles, each in a process of its own (`demo.serve`), held by
`st.cache_resource` for the life of the app process and reused by every rerun and session.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import streamlit as st

from eagle3dash import store as db
from eagle3dash.checkpoint import InspectReport, inspect
from eagle3dash.demo import DELAY_S, DRAFT_STEP_S, FIXTURES, SGLANG_VERSION
from eagle3dash.diagnosis.options import SCHEMA, DiagnoseOptions, Kind
from eagle3dash.diagnosis.stored_run import StoredRun, read_checkpoint_runs
from eagle3dash.errors import InputError
from eagle3dash.findings import Finding
from eagle3dash.probe import Probe, before_submit
from eagle3dash.roots import data_roots, within_roots
from eagle3dash.store import CheckpointRow
from eagle3dash.ui import inputs, widgets, words
from eagle3dash.ui.fmt import md_escape, size, status_label, when
from eagle3dash.ui.home import get_store

# Where the checkpoint comes from (the radio's entries, key ckpt_source).
REGISTERED, PATH, UPLOAD = "A registered checkpoint", "A path on this machine", "An upload"
CHECKPOINT_SOURCES = (REGISTERED, PATH, UPLOAD)
# Where the prompts come from (key prompt_source).
BUILTIN, PROMPT_FILE, PROMPT_UPLOAD = (
    "Built-in set",
    "A file on this machine",
    "Upload a JSONL file",
)
PROMPT_SOURCES = (BUILTIN, PROMPT_FILE, PROMPT_UPLOAD)
STEPS_FROM_SERVER = "_steps_from_server"  # the steps value last taken from a probe
DEMO_ON = "_demo_urls"  # (endpoint, baseline, deployment) of the demo this session started

DOUBLE_WORDS = (
    f"the SGLang API double, a test and demo double that answers like SGLang {SGLANG_VERSION} "
    "on this machine's CPU with tiny models (not a serving engine)"
)
COST_MODEL_WORDS = (
    f"Its tok/s and speedup come from the double's cost model (each target forward takes at "
    f"least {DELAY_S * 1000:g} ms, each draft step {DRAFT_STEP_S * 1000:g} ms), not from "
    "measured serving."
)
DEMO_LABELS = {
    "mismatched": "mismatched: draft A as shipped",
    "correct": "correct: draft B, the control",
    "fixed": "fixed: draft A with the fix applied",
    "format": "format: draft C, needs the chat template",
    "vllm-v1": "vLLM V1: draft B's SpecForge config on vLLM's V1 runner",
    "vllm-dual-key": "vLLM fixed: draft B with both engines' keys",
}
VLLM_DOUBLE_WORDS = (
    "the vLLM API double, a test and demo double that answers like vLLM 0.33 on this machine's "
    "CPU with tiny models (not a serving engine), for the endpoint and the baseline alike"
)


def _served_by(name: str) -> tuple[str, str]:
    """Which double serves a demo deployment, and what its tok/s mean (one cost model for
    both engines' doubles), in words."""
    return (VLLM_DOUBLE_WORDS if name.startswith("vllm-") else DOUBLE_WORDS), COST_MODEL_WORDS


# --- the demo ----------------------------------------------------------------------------------


@st.cache_resource(show_spinner=False)
def _demo_slot() -> dict[str, Any]:
    """The one demo this app process serves ({"demo": DemoEndpoints}), shared by every session:
    choosing another deployment stops the one before (each double is a process of its own)."""
    return {}


def demo_endpoints(name: str = "mismatched") -> Any:
    """The demo deployment `name` (`demo.serve.DemoEndpoints`), each double a process of its
    own: started on first use, started again if it stopped or another deployment was served."""
    from eagle3dash.demo.serve import start_demo

    slot = _demo_slot()
    demo = slot.get("demo")
    if demo is not None and demo.name == name and demo.alive():
        return demo
    if demo is not None:
        demo.stop()
        slot.pop("demo")
    slot["demo"] = start_demo(name, get_store().home)
    return slot["demo"]


def stop_demo() -> None:
    """Stop the demo's doubles, if any run."""
    demo = _demo_slot().pop("demo", None)
    if demo is not None:
        demo.stop()


def fill_form(options: DiagnoseOptions) -> None:
    """Put a diagnosis's options into New run's widgets (before they are drawn in this run)."""
    st.session_state.update(
        {
            "ckpt_source": PATH,
            "ckpt_path": options.draft,
            "endpoint": options.endpoint,
            "baseline": options.baseline or "",
            "prompt_source": PROMPT_FILE,
            "prompt_path": options.prompts,
            "opt_target": options.target or "",
            "opt_num_prompts": options.num_prompts,
            "opt_max_new_tokens": options.max_new_tokens,
            "opt_concurrency": options.concurrency,
            "opt_steps": options.steps,
            STEPS_FROM_SERVER: options.steps,
        }
    )


def try_the_demo() -> Any:
    """ "Try it on the demo": one click starts a demo deployment and a baseline on this machine
    (each in a process of its own) and fills in the form; then Run the diagnosis reproduces that
    deployment's demo run. The slot where `demo_banner` says so, once the form is drawn."""
    from eagle3dash.demo.serve import DEMO_NAMES, demo_description

    with st.container(border=True):
        st.markdown("**New here? Try it on the demo.**")
        st.caption(
            "Starts the built-in demo on this machine, served by "
            + md_escape(DOUBLE_WORDS)
            + " (or, for the vLLM deployments, by its vLLM counterpart): a tiny target with one "
            "of the demo's drafts (hidden states returned), and the same target without "
            "speculation as the baseline. It fills in the form with the "
            "draft, both endpoints, the local target and the demo's prompts."
        )
        name = st.selectbox(
            "Demo deployment",
            DEMO_NAMES,
            format_func=lambda n: DEMO_LABELS[n],
            key="demo_pick",
            help="mismatched: the incident (the fix is in its findings); correct: the control; "
            "fixed: draft A with that fix applied; format: a draft that needs the chat template; "
            "vLLM V1 / vLLM fixed: a SpecForge draft on vLLM, shifted and fixed",
        )
        st.caption(md_escape(demo_description(name)))
        if st.button("Try it on the demo", key="demo_try", icon="🧪"):
            try:
                with st.spinner("Starting the demo's endpoints (a few seconds)..."):
                    demo = demo_endpoints(name)
            except (InputError, OSError) as e:
                widgets.show_error(InputError(f"the demo's endpoints did not start: {e}"))
            else:
                fill_form(demo.options())
                st.session_state[DEMO_ON] = (demo.endpoint.url, demo.baseline.url, name)
        return st.empty()


def demo_banner(slot: Any) -> None:
    """Say in `slot` which demo deployment serves the filled-in form. Called once the whole form
    and its Run button are drawn: a banner shown earlier invited a click on widgets the browser
    had not redrawn yet, which sent their old, empty values with it (seen in Chromium: a demo run
    without its baseline and target)."""
    shown = st.session_state.get(DEMO_ON)
    if not shown:
        return
    endpoint, baseline, served = shown
    double, cost = _served_by(served)
    slot.info(
        f"The demo runs on this machine: endpoint {md_escape(endpoint)} "
        f"({md_escape(DEMO_LABELS[served])}) and baseline {md_escape(baseline)} (no "
        f"speculation), both served by {md_escape(double)}. "
        f"{md_escape(cost)} The form below is filled in: press **Run the diagnosis**.",
        icon="🧪",
    )


# --- the form's sources ------------------------------------------------------------------------


def inside_roots(path: str, label: str) -> str:
    """A typed path, resolved, if it lies under the data roots (the demo's own fixtures, which
    "Try it on the demo" fills in, too); else OutsideRootsError, whether or not it exists."""
    return within_roots(path, data_roots(), label, also=(FIXTURES,))


def inspect_typed(path: str) -> InspectReport:
    """Inspect a typed checkpoint path, once it is known to lie under the data roots."""
    return inspect(inside_roots(path, "Checkpoint folder"))


def check_typed_paths(values: Mapping[str, Any]) -> None:
    """The form's path options (local target, training states) under the data roots, or
    OutsideRootsError before anything looks at them."""
    for name, option in SCHEMA.items():
        value = values.get(name)
        if option.kind is Kind.PATH and isinstance(value, str) and value.strip():
            inside_roots(value, option.label)


def preselect_checkpoint(live_ids: list[int]) -> None:
    """`?checkpoint=<id>` (Checkpoints' "New run with this checkpoint"): pick it, once."""
    picked, bad = widgets.query_int("checkpoint")
    if picked is None and bad is None:
        return
    if picked in live_ids:
        st.session_state["ckpt_source"] = REGISTERED
        st.session_state["ckpt_pick"] = picked
    else:
        st.warning(f"No registered checkpoint #{md_escape(str(bad or picked))}: pick one below.")
    del st.query_params["checkpoint"]


def prompt_file_input() -> str | None:
    """A JSONL prompt file on this machine, checked; its path, or None."""
    from eagle3dash.servebench import load_prompts

    path = st.text_input(
        'JSONL file on this machine: one {"prompt": ...}, {"messages": [...]} or '
        '{"input_ids": [...]} a line',
        key="prompt_path",
    ).strip()
    if not path:
        return None
    prompts = widgets.guard(lambda: load_prompts(inside_roots(path, "Prompt file")))
    if prompts is None:
        return None
    st.caption(f"{len(prompts)} prompts in {md_escape(path)}")
    return path


def follow_server_steps(found: Probe | None) -> None:
    """Draft steps evaluated takes the server's --speculative-num-steps from the probe, unless
    the user has set a value of their own."""
    spec = found.server.speculative if found is not None else None
    steps = spec.num_steps if spec is not None else None
    if not isinstance(steps, int) or steps < 1:
        return
    current = st.session_state.get("opt_steps")
    taken = st.session_state.get(STEPS_FROM_SERVER)
    untouched = current is None or current == (SCHEMA["steps"].default if taken is None else taken)
    if untouched and current != steps:
        st.session_state["opt_steps"] = steps
        st.session_state[STEPS_FROM_SERVER] = steps


def ask_what_the_server_does_not_say(found: Probe | None) -> None:
    """On a vLLM server with dev endpoints off: the draft and steps the form must ask for."""
    text = words.unsaid_by_server(found.server) if found is not None else None
    if text is not None:
        st.info(md_escape(text), icon="💬")


def propose_target(found: Probe | None) -> None:
    """When the served model's folder is on this machine, offer it as the local target path
    (with its size: capturing every tap loads the whole target once)."""
    target = found.target if found is not None else None
    if target is None or st.session_state.get("opt_target"):
        return
    try:  # a server names any folder: offer only those the app may read
        inside_roots(target.path, SCHEMA["target"].label)
    except InputError:
        return
    st.info(
        f"The served model is on this machine: {md_escape(target.path)} "
        f"({target.num_layers} layers, {size(target.weight_bytes)} of weights). Given as "
        f"the '{md_escape(SCHEMA['target'].label)}', the run measures the training side and "
        "which taps the server really feeds, from one forward of the target.",
        icon="💡",
    )
    if st.button("Use it as the local target path", key="use_served_target"):
        st.session_state["opt_target"] = target.path
        st.rerun()


def local_target_input() -> str:
    """The local target path, outside the collapsed options: it decides whether the training
    side and the served taps are measured or assumed."""
    value = inputs.option_input(st, "target")
    st.caption(
        "Why it matters: with a local copy of the target (its Hugging Face folder on this "
        "machine), the run measures what the draft was trained on and which taps the server "
        "really feeds it; without one, both are assumed from the config and the serving "
        "engine's rules."
    )
    return value


# --- before submit -----------------------------------------------------------------------------


def _show(finding: Finding) -> None:
    text = f"**{md_escape(finding.title)}**"
    if finding.fix:
        text += "  \nFix: " + md_escape(finding.fix)
    if finding.severity == "critical":
        st.error(text, icon="🛑")
    elif finding.severity == "warning":
        st.warning(text, icon="⚠️")
    else:
        st.info(text, icon="ℹ️")


def before_submit_warnings(found: Probe | None, draft_path: str | None) -> list[Finding]:
    """What the probe says about this run before it is submitted: the server's settings, whether
    it serves the chosen checkpoint, whether its algorithm fits it. Returns the findings."""
    if found is None:
        return []
    with st.spinner("Checking the server against the checkpoint..."):
        findings = before_submit(found, draft_path, cache=get_store())
    st.markdown("**Before you submit**")
    if not findings:
        st.success("No problems found in the server's settings or against this checkpoint.")
    for finding in findings:
        _show(finding)
    if not draft_path:
        st.caption("Choose the draft checkpoint above to check the server against it too.")
    return findings


# --- checkpoints -------------------------------------------------------------------------------


def run_link_label(run: StoredRun) -> str:
    """'Run #1 · ✅ succeeded · <when> · demo: mismatched, fixed by run #3 · endpoint stopped'."""
    label = f"Run #{run.id} · {status_label(run.status)} · {when(run.created_at)}"
    if run.demo:
        label += f" · demo: {run.demo}"
        if run.demo_fixed_run:
            label += f", fixed by run #{run.demo_fixed_run}"
    if run.endpoint_stopped_at:
        label += " · endpoint stopped"
    return label


def checkpoint_runs(checkpoint: CheckpointRow, limit: int = 10) -> None:
    """The runs that used a checkpoint (links to their pages), and a new run with it."""
    store = get_store()
    checkpoint_id = checkpoint.id
    total = db.count_checkpoint_runs(store, checkpoint_id)
    if total:
        st.caption(
            f"Used by {total} run{'s' if total != 1 else ''}"
            + (f" (the latest {limit}):" if total > limit else ":")
        )
        read = read_checkpoint_runs(store, checkpoint_id, limit)
        for problem in read.unreadable:
            st.caption("🚫 " + md_escape(str(problem)))
        for run in read.runs:
            st.page_link(
                widgets.RUN_PAGE,
                label=run_link_label(run),
                query_params={"run": str(run.id)},
            )
    else:
        st.caption("No run has used it yet.")
    if not checkpoint.removed:
        st.page_link(
            widgets.NEW_RUN_PAGE,
            label="New run with this checkpoint",
            icon="➕",
            query_params={"checkpoint": str(checkpoint_id)},
        )


def remove_with_confirmation(checkpoint: CheckpointRow) -> str | None:
    """Remove asks first; returns the notice once removed (else None)."""
    checkpoint_id = checkpoint.id
    asking = f"_confirm_remove_{checkpoint_id}"
    if not st.session_state.get(asking):
        if st.button("Remove", key=f"remove-{checkpoint_id}"):
            st.session_state[asking] = True
            st.rerun()
        return None
    what = (
        "Its uploaded files are deleted from the home folder."
        if checkpoint.uploaded
        else "Your files stay where they are; it is only unregistered."
    )
    st.warning(
        f"Remove checkpoint #{checkpoint_id} {md_escape(checkpoint.name)}? {what} Runs that "
        "used it keep their results.",
        icon="⚠️",
    )
    yes, no, _ = st.columns([1, 1, 4])
    if no.button("Keep it", key=f"remove-no-{checkpoint_id}"):
        del st.session_state[asking]
        st.rerun()
    if yes.button("Yes, remove it", key=f"remove-yes-{checkpoint_id}", type="primary"):
        del st.session_state[asking]
        deleted = db.remove_checkpoint(get_store(), checkpoint_id)
        return f"Removed checkpoint #{checkpoint_id}" + (
            "; its uploaded files were deleted." if deleted else "; no files were touched."
        )
    return None
