"""The probe of an endpoint on the New run page: probed (and recorded) once per URL and
session, its version, model, speculative settings and findings drawn."""

from __future__ import annotations

import streamlit as st

from eagle3dash.errors import InputError
from eagle3dash.probe import Probe, probe_and_record
from eagle3dash.ui.fmt import md_escape
from eagle3dash.ui.home import get_store
from eagle3dash.ui.reports import server_settings
from eagle3dash.ui.verdict import findings_list
from eagle3dash.ui.widgets import show_error
from eagle3dash.ui.words import engine_name

PROBE_TIMEOUT_S = 5.0  # the page waits on a probe: ask briefly, once
HIDDEN_STATES_WORDS = {"full": "on", "last": "last token only", None: "off"}


def probe_panel(
    url: str, key: str, findings_title: str | None = "Server-side findings"
) -> Probe | None:
    """Probe an endpoint once per URL and session; show version, model, speculative settings and
    (under `findings_title`, unless None) the findings a probe alone can make. Returns the
    Probe, or None (error shown)."""
    url = (url or "").strip()
    if not url:
        return None
    probes: dict = st.session_state.setdefault("_probes", {})
    if st.button("Probe again", key=f"{key}-reprobe"):
        probes.pop(url, None)
    if url not in probes:
        with st.spinner(f"Probing {url} ..."):
            try:
                found = probe_and_record(get_store(), url, timeout=PROBE_TIMEOUT_S, retries=1)
            except InputError as e:
                probes[url] = ("error", str(e))
            else:
                probes[url] = ("ok", found)
    status, value = probes[url]
    if status == "error":
        show_error(InputError(value))
        return None
    server = value.server
    spec = server.speculative
    cols = st.columns(4)
    cols[0].metric(f"{engine_name(server)} version", md_escape(server.version or "unknown"))
    cols[1].metric("Speculative", md_escape(spec.algorithm) if spec else "none")
    cols[2].metric("Draft steps", str(spec.num_steps) if spec else "—")
    cols[3].metric("Hidden states", HIDDEN_STATES_WORDS.get(server.hidden_states, "off"))
    st.caption("Model: " + md_escape(server.model_path or "unknown"))
    if spec:
        st.caption("Draft on the server: " + md_escape(spec.draft_model_path or "unknown"))
    if findings_title is not None:
        st.markdown(f"**{md_escape(findings_title)}**")
        findings_list(value.findings)
    with st.expander("Server settings"):
        server_settings(server)
    return value
