"""eagle3dash: the dashboard. `streamlit run app.py` (port, upload size: .streamlit/config.toml).

The pages live in views/ and draw with eagle3dash.ui; the home folder is EAGLE3DASH_HOME. (Not in
pages/: that folder name turns on Streamlit's old multipage mode, whose deep links skip this file;
see ARCHITECTURE.md.) It listens on 127.0.0.1; on a network address it runs behind serve.py's access
gate (eagle3dash.ui.access), and refuses to draw without it.
"""

import streamlit as st

from eagle3dash.ui.access import require_access
from eagle3dash.ui.home import store_faults_shown

st.set_page_config(page_title="eagle3dash", page_icon="🦅", layout="wide")
require_access()  # a network bind asks for the token first (loopback: nothing to ask)
page = st.navigation(
    [
        st.Page("views/runs.py", title="Runs", icon="📋", default=True),
        st.Page("views/new_run.py", title="New run", icon="➕"),
        st.Page("views/run.py", title="Run", icon="🔎"),
        st.Page("views/compare.py", title="Compare", icon="⚖️"),
        st.Page("views/checkpoints.py", title="Checkpoints", icon="📦"),
        st.Page("views/sweep.py", title="Sweep", icon="📈"),
    ]
)
with store_faults_shown():  # a database that cannot be read is one message, on any page
    page.run()
