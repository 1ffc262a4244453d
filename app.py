"""eagle3dash: the dashboard. `streamlit run app.py` (port, upload size: .streamlit/config.toml).

The pages live in pages/ and draw with eagle3dash.ui; the home folder is EAGLE3DASH_HOME.
"""

import streamlit as st

st.set_page_config(page_title="eagle3dash", page_icon="🦅", layout="wide")
page = st.navigation(
    [
        st.Page("pages/runs.py", title="Runs", icon="📋", default=True),
        st.Page("pages/new_run.py", title="New run", icon="➕"),
        st.Page("pages/run.py", title="Run", icon="🔎"),
        st.Page("pages/compare.py", title="Compare", icon="⚖️"),
        st.Page("pages/checkpoints.py", title="Checkpoints", icon="📦"),
    ]
)
page.run()
