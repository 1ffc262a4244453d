"""New run's and Checkpoints' Streamlit pieces: the demo in one click, where the checkpoint and
the prompts come from, the warnings before submit, and a checkpoint's runs.

The demo's endpoints are SGLang API doubles, each in a process of its own (`demo.serve`), held by
`st.cache_resource` for the life of the app process and reused by every rerun and session.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from eagle3dash import store as db
from eagle3dash.checkpoint import InspectReport, inspect
from eagle3dash.demo import DELAY_S, DRAFT_STEP_S, SGLANG_VERSION
from eagle3dash.diagnosis.options import SCHEMA, DiagnoseOptions
from eagle3dash.diagnosis.stored_run import StoredRun, read_checkpoint_runs
from eagle3dash.errors import InputError
from eagle3dash.findings import Finding
from eagle3dash.probe import PairCheck, Probe, check_pair
from eagle3dash.severity import Severity
from eagle3dash.store import CheckpointRow
from eagle3dash.ui import icons, inputs, widgets, words
from eagle3dash.ui.fmt import DASH, md_escape, size, status_label, when
from eagle3dash.ui.home import get_store
from eagle3dash.ui.paths import CHECKPOINT_LABEL, PROMPT_LABEL, TARGET_NOT_UPLOADED, inside_roots

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
REAL_ON = "_real_vllm"  # (endpoint, baseline, RealVLLMFacts JSON) of the real vLLM filled in
# What a "Try it" button is filling in ({"options": DiagnoseOptions, "shown": {DEMO_ON: ...}}),
# kept until the whole form has been drawn with it; and whether this run filled the form.
FILLING = "_form_filling"
FILLED_NOW = "_form_filled_now"

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


@st.cache_resource(show_spinner=False)
def _real_slot() -> dict[str, Any]:
    """The real vLLM servers this app process runs ({"plain": RealVLLM, "endpoint": RealVLLM}),
    shared by every session: one plain baseline, and one deployment at a time beside it."""
    return {}


def real_vllm_endpoints(name: str) -> tuple[Any, Any]:
    """(the real vLLM server of deployment `name`, the plain baseline), each started when it
    is not already serving (a minute or more); another deployment's server is stopped first."""
    from eagle3dash.demo.real_vllm import start_real_vllm

    slot = _real_slot()
    endpoint, baseline = slot.get("endpoint"), slot.get("plain")
    if endpoint is not None and (endpoint.deployment != name or not endpoint.alive()):
        slot.pop("endpoint").stop()
        endpoint = None
    if baseline is not None and not baseline.alive():
        slot.pop("plain").stop()
        baseline = None
    wanted = [n for n, server in ((name, endpoint), ("plain", baseline)) if server is None]
    for server in start_real_vllm(*wanted, home=get_store().home) if wanted else []:
        slot["plain" if server.deployment == "plain" else "endpoint"] = server
    return slot["endpoint"], slot["plain"]


def stop_real_vllm() -> None:
    """Stop the real vLLM servers this app process runs, if any."""
    slot = _real_slot()
    for name in list(slot):
        slot.pop(name).stop()


def try_a_real_vllm() -> None:
    """ "Try it on a real vLLM (CPU)": where vLLM's CPU build is installed (`make vllm`), one
    click serves a demo draft and the plain target on real vLLM servers of this machine and
    fills in the form; else one line on how to install it."""
    from eagle3dash.demo.real_vllm import NUM_SPECULATIVE_TOKENS, REAL_DEPLOYMENTS, unavailable
    from eagle3dash.demo.serve import demo_options

    why_not = unavailable()
    if why_not is not None:
        st.caption(f"A real vLLM (CPU) could serve the demo here too: {md_escape(why_not)}.")
        return
    drafted = [name for name, plan in REAL_DEPLOYMENTS.items() if plan.draft is not None]
    name = st.selectbox(
        "Real vLLM deployment",
        drafted,
        format_func=lambda n: REAL_DEPLOYMENTS[n].description,
        key="real_vllm_pick",
        help="vLLM's CPU build serves the demo's target with this draft, and the same target "
        "without speculation as the baseline: real accept lengths and the server's own log.",
    )
    if st.button("Try it on a real vLLM (CPU)", key="real_vllm_try", icon=icons.REAL_ENGINE):
        box = _filling()
        try:
            with st.spinner("Starting real vLLM servers on this CPU (a minute or more)..."):
                endpoint, baseline = real_vllm_endpoints(name)
                assert endpoint.draft is not None  # a drafted deployment
                box["options"] = demo_options(
                    endpoint.draft, endpoint.url, baseline.url, steps=NUM_SPECULATIVE_TOKENS
                )
                box["shown"] = {
                    REAL_ON: (endpoint.url, baseline.url, endpoint.facts().to_json()),
                    DEMO_ON: None,
                }
        except (InputError, OSError) as e:
            widgets.show_error(InputError(f"the real vLLM servers did not start: {e}"))
        else:
            _fill_in(box)


def run_labels(options: DiagnoseOptions) -> dict[str, Any]:
    """What a run submitted from New run keeps beside its options: with the form still on the
    real vLLM it filled in, what that server said of itself ({"real_vllm": ...})."""
    from eagle3dash.demo.seed import REAL_LABEL

    shown = st.session_state.get(REAL_ON)
    if not shown or (options.endpoint, options.baseline) != tuple(shown[:2]):
        return {}
    return {"demo": REAL_LABEL + shown[2]["deployment"], "real_vllm": shown[2]}


def _filling() -> dict[str, Any]:
    """This session's record of a fill in progress, emptied. Streamlit checks for a click
    waiting to rerun at each of its calls, a write to session state included, and then cuts this
    run short there, its writes lost; so what the servers' start yields goes into this plain dict
    (no Streamlit call), and the next run fills the form from it (`refill_cut_short`)."""
    box: dict[str, Any] = st.session_state.setdefault(FILLING, {})
    box.clear()
    return box


def _fill_in(box: dict[str, Any]) -> None:
    """Put a started demo's options into New run's widgets (before they are drawn in this run)
    and its banner's state into the session, noting that this run filled the form."""
    options: DiagnoseOptions = box["options"]
    for key, value in box["shown"].items():
        if value is None:
            st.session_state.pop(key, None)
        else:
            st.session_state[key] = value
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
            FILLED_NOW: True,
        }
    )


def try_the_demo() -> Any:
    """ "Try it on the demo": one click starts a demo deployment and a baseline on this machine
    (each in a process of its own) and fills in the form; then Run the diagnosis reproduces that
    deployment's demo run. The slot where `demo_banner` says so, once the form is drawn."""
    from eagle3dash.demo.serve import DEMO_NAMES, demo_description

    refill_cut_short()
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
        if st.button("Try it on the demo", key="demo_try", icon=icons.DEMO):
            box = _filling()
            try:
                with st.spinner("Starting the demo's endpoints (a few seconds)..."):
                    demo = demo_endpoints(name)
                    box["options"] = demo.options()
                    box["shown"] = {
                        DEMO_ON: (demo.endpoint.url, demo.baseline.url, name),
                        REAL_ON: None,
                    }
            except (InputError, OSError) as e:
                widgets.show_error(InputError(f"the demo's endpoints did not start: {e}"))
            else:
                _fill_in(box)
        try_a_real_vllm()
        return st.empty()


def refill_cut_short() -> None:
    """Fill the form again from what a "Try it" button started, when a click cut its run short
    (called before any widget of the form is drawn in this run)."""
    box = st.session_state.get(FILLING)
    if box and "shown" in box:
        _fill_in(box)


def demo_banner(slot: Any, submitted: bool) -> bool:
    """Say in `slot` which demo deployment serves the filled-in form. Called once the whole form
    and its Run button are drawn: a banner shown earlier invited a click on widgets the browser
    had not redrawn yet, which sent their old, empty values with it (seen in Chromium: a demo run
    without its baseline and target). True when this run filled the form: a Run click in it
    carried the values the browser showed before (a click that cut a fill short, or one that
    Streamlit folded into the "Try it" click's run), and New run does not submit them."""
    st.session_state.pop(FILLING, None)  # the whole form is drawn with it
    filled_now = bool(st.session_state.pop(FILLED_NOW, False))
    if filled_now and submitted:
        slot = slot.container()
        slot.warning(
            "The form was still being filled in when you clicked, so nothing was submitted: "
            "check it below, then press **Run the diagnosis** again.",
            icon=icons.NOTE,
        )
    _say_what_serves_the_form(slot)
    return filled_now


def _say_what_serves_the_form(slot: Any) -> None:
    """The banner itself: the real vLLM or the demo deployment filled in, if any."""
    real = st.session_state.get(REAL_ON)
    if real:
        endpoint, baseline, facts = real
        slot.info(
            f"A real vLLM serves the form: endpoint {md_escape(endpoint)} "
            f"({md_escape(facts['deployment'])}) and baseline {md_escape(baseline)} (no "
            "speculation), vLLM's CPU build on this machine. Its accept lengths are measured; "
            "its speedup on a CPU says little about a GPU (the Run page says why). The form "
            "below is filled "
            "in: press **Run the diagnosis**.",
            icon=icons.REAL_ENGINE,
        )
        return
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
        icon=icons.DEMO,
    )


# --- the form's sources ------------------------------------------------------------------------


def inspect_typed(path: str) -> InspectReport:
    """Inspect a typed checkpoint path, once it is known to lie under the data roots."""
    return inspect(inside_roots(path, CHECKPOINT_LABEL))


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
    prompts = widgets.guard(lambda: load_prompts(inside_roots(path, PROMPT_LABEL)))
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
        st.info(md_escape(text), icon=icons.ASK)


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
        icon=icons.TIP,
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
        "engine's rules. " + TARGET_NOT_UPLOADED
    )
    return value


# --- before submit -----------------------------------------------------------------------------


def _show(finding: Finding) -> None:
    text = f"**{md_escape(finding.title)}**"
    if finding.fix:
        text += "  \nFix: " + md_escape(finding.fix)
    if finding.severity == "critical":
        st.error(text, icon=Severity.CRITICAL.icon)
    elif finding.severity == "warning":
        st.warning(text, icon=Severity.WARNING.icon)
    else:
        st.info(text, icon=Severity.INFO.icon)


def before_submit_warnings(found: Probe | None, draft_path: str | None) -> list[Finding]:
    """What the probe says about this run before it is submitted: the server's settings, whether
    it serves the chosen checkpoint, whether its algorithm fits it; then what was checked and
    what was not (never a green light: the run measures what decides the verdict). Returns the
    findings."""
    if found is None:
        return []
    with st.spinner("Checking the server against the checkpoint..."):
        check = check_pair(found, draft_path, cache=get_store())
    st.markdown("**Before you submit**")
    for finding in check.findings:
        _show(finding)
    checked, unchecked = pair_check_words(check)
    if check.findings:
        st.caption(md_escape(checked))
    else:
        st.info(
            md_escape(f"Nothing wrong in what a probe can check. {checked}"), icon=icons.NOT_CHECKED
        )
    st.caption(md_escape(unchecked))
    return check.findings


def pair_check_words(check: PairCheck) -> tuple[str, str]:
    """('Checked: ...', 'Not checked until the run: ...'): what the probe checked of the server
    and the chosen checkpoint, and what only the run measures."""
    checked = ["the server's settings (its speculative algorithm and steps, its hidden states)"]
    unchecked = []
    if check.checkpoint is None:
        unchecked.append("the server against a checkpoint (choose one above)")
    elif check.unreadable is not None:
        unchecked.append(f"the checkpoint, which could not be read ({check.unreadable})")
    else:
        checked.append("the checkpoint's config and weight headers")
        identity = check.identity
        if identity is not None and identity.status != "unknown":
            checked.append(f"whether the server serves this checkpoint ({identity.reason})")
        else:
            why = "the server names no draft" if identity is None else identity.reason
            unchecked.append(f"whether the server serves this checkpoint ({why})")
    unchecked.append(
        "which taps the server feeds the draft against the ones it was trained on, the accept "
        "length and the speedup: the run measures them"
    )
    return "Checked: " + "; ".join(checked) + ".", (
        "Not checked until the run: " + "; ".join(unchecked) + "."
    )


# --- checkpoints -------------------------------------------------------------------------------


def run_link_label(run: StoredRun) -> str:
    """'Run #1 · :material/check_circle: succeeded · <when> · demo: mismatched, fixed by run #3 ·
    endpoint stopped' (Markdown: a page link's label)."""
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
            st.caption(f"{icons.REFUSED} " + md_escape(str(problem)))
        for run in read.runs:
            st.page_link(
                widgets.RUN_PAGE,
                label=run_link_label(run),
                query_params={"run": str(run.id)},
            )
            verdict = words.run_verdict(run)
            if verdict != DASH:  # a run still queued or running has none yet
                st.caption("Verdict: " + md_escape(verdict))
    else:
        st.caption("No run has used it yet.")
    if not checkpoint.removed:
        st.page_link(
            widgets.NEW_RUN_PAGE,
            label="New run with this checkpoint",
            icon=icons.NEW_RUN,
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
        icon=Severity.WARNING.icon,
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
