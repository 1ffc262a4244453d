"""A run's verdict drawn (the Run and Compare pages): the banner, the findings, the diagnosis's
warnings, a run without a diagnosis, why a run stopped."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from eagle3dash.diagnosis.stored import StoredDiagnosis, finding_from_row
from eagle3dash.engines.seam import ServerReport
from eagle3dash.findings import Finding
from eagle3dash.noise import NOISE_SE
from eagle3dash.severity import Severity
from eagle3dash.store import get_findings
from eagle3dash.ui import icons, words
from eagle3dash.ui.fmt import STATUS_ICONS, is_missing, md_escape, num, ratio, severity_color
from eagle3dash.ui.home import get_store


def verdict_banner(diagnosis: StoredDiagnosis) -> None:
    """The verdict by its status: a problem in red (its root cause, and the fix's one line to
    copy) or yellow (warnings), an incomplete run in blue with what was not checked, a healthy
    one in green with what it rests on; then the measured and simulated accept lengths and the
    speedup, and each check that could not run with the one action that enables it."""
    verdict = diagnosis.verdict
    sentence = f"**{md_escape(words.verdict_sentence(diagnosis))}**"
    status = verdict.status
    root = verdict.root_cause
    if root is not None:
        st.error(sentence, icon=Severity.CRITICAL.icon)
        fix_to_paste(root, diagnosis.server, prose=True)
    elif status == "healthy":
        st.success(sentence, icon=icons.OK)
    elif status == "problem":
        st.warning(sentence, icon=Severity.WARNING.icon)
    else:
        st.info(sentence, icon=icons.NOT_CHECKED)
    steps = diagnosis.steps or "?"
    columns = st.columns(4)
    columns[0].metric(
        "Measured accept length",
        num(verdict.measured_accept_length),
        help="Completion tokens per verify round, from the endpoint's benchmark.",
    )
    sims = (
        (diagnosis.training, verdict.sim_accept_training, verdict.training_source),
        (diagnosis.serving, verdict.sim_accept_serving, verdict.serving_source),
    )
    for column, (side, simulated, source) in zip(columns[1:3], sims, strict=True):
        column.metric(
            f"Simulated, {side.name} layout",
            num(simulated),
            help=md_escape(
                f"Accept length of the standalone draft on the {side.name} side's states at "
                f"{steps} draft steps; its layout is "
                f"{words.source_words(source, diagnosis.server)}."
            ),
        )
        if side.capture_error and is_missing(simulated):  # where the number would be
            column.caption("Not evaluated: " + md_escape(side.capture_error))
    columns[3].metric(
        "Speedup vs baseline",
        ratio(verdict.speedup, verdict.speedup_noise),
        help="The endpoint's output tok/s over the baseline's (the target without speculation), "
        f"± {NOISE_SE:g} standard errors of both benchmarks' per-request tok/s, measured in "
        "alternating waves.",
    )
    double = words.double_note(diagnosis.server)
    if double:
        st.caption(f"{icons.NOTE} " + md_escape(double))
    for item in diagnosis.not_checked:
        st.info(
            "Not checked: " + md_escape(words.not_checked_text(item, "app")),
            icon=icons.NOT_CHECKED,
        )


def fix_to_paste(finding: Finding, server: ServerReport | None, prose: bool = False) -> None:
    """A finding's fix block (a complete JSON object or command: `words.fix_block`) with what to
    do beside it, never inside; `prose`: the fix's words too, where no block can be made."""
    block = words.fix_block(finding, server)
    if block is None:
        if prose and finding.fix:
            st.markdown("Fix: " + md_escape(finding.fix))
        return
    beside = f"The fix, to paste. {block.where}" + (f" {block.note}." if block.note else "")
    st.caption(md_escape(beside))
    st.code(block.code, language=block.language, wrap_lines=True)


def findings_list(
    findings: Sequence[Finding], compact: bool = False, server: ServerReport | None = None
) -> None:
    """Each finding: severity badge, title, evidence, the fix in words and, when it has one, its
    block to paste (`server`: the endpoint's report, for the command that serves its model)."""
    if not findings:  # the verdict says whether that is healthy or only what was checked
        st.caption("No findings.")
        return
    for f in findings:
        severity = str(f.severity or "info")
        with st.container(border=True):
            st.badge(md_escape(severity.upper()), color=severity_color(severity))
            st.markdown(f"**{md_escape(f.title)}**")
            if f.id:
                st.caption(f"rule {md_escape(f.id)}")
            evidence, fix = f.evidence, f.fix
            if compact:
                if fix:
                    st.caption("Fix: " + md_escape(fix))
                continue
            if evidence:
                lead, numbers = words.evidence_parts(evidence)
                st.markdown("Evidence: " + md_escape(lead))
                if numbers:
                    with st.expander("The numbers behind it"):
                        st.markdown(md_escape(numbers))
            if fix:
                st.markdown("Fix: " + md_escape(fix))
                fix_to_paste(f, server)


def diagnosis_warnings(diagnosis: StoredDiagnosis) -> None:
    """The diagnosis's warnings (what it could do only in part)."""
    for item in diagnosis.warnings:
        st.warning(md_escape(item), icon=Severity.WARNING.icon)


def stored_findings(run_id: int) -> list[Finding]:
    """A run's findings as the store's findings table keeps them."""
    return [finding_from_row(row) for row in get_findings(get_store(), run_id)]


def without_diagnosis(findings: Sequence[Finding]) -> None:
    """A run with no stored diagnosis (failed, cancelled, or stored by an older version): the
    findings recorded for it, if any."""
    st.caption(
        "No diagnosis is stored for this run: it did not finish, or an older version of "
        "eagle3dash made it. "
        + (
            "Only the findings recorded for it are shown."
            if findings
            else "No findings were recorded for it."
        )
    )
    if findings:
        st.header("Findings")
        findings_list(findings)


def stopped_notice(status: str, reason: str | None) -> None:
    """Why a run has no results: a failure in red, a cancel said neutrally."""
    text = md_escape(words.stopped_text(status, reason))
    if status == "cancelled":
        st.info(text, icon=STATUS_ICONS["cancelled"])
    else:
        st.error(text, icon=STATUS_ICONS["failed"])
