"""eagle3dash: the dashboard. `streamlit run app.py` (port, upload size: .streamlit/config.toml).

The pages live in views/ and draw with eagle3dash.ui; the home folder is EAGLE3DASH_HOME. (Not in
pages/: that folder name turns on Streamlit's old multipage mode, whose deep links skip this file;
see ARCHITECTURE.md.) It listens on 127.0.0.1; on a network address it runs behind serve.py's access
gate (eagle3dash.ui.access), and refuses to draw without it.
"""

import streamlit as st

from eagle3dash.ui import icons
from eagle3dash.ui.access import require_access
from eagle3dash.ui.home import store_faults_shown

st.set_page_config(page_title="eagle3dash", page_icon=icons.APP, layout="wide")
require_access()  # a network bind asks for the token first (loopback: nothing to ask)
page = st.navigation(
    [
        st.Page("views/runs.py", title="Runs", icon=icons.RUNS, default=True),
        st.Page("views/new_run.py", title="New run", icon=icons.NEW_RUN),
        st.Page("views/run.py", title="Run", icon=icons.RUN),
        st.Page("views/compare.py", title="Compare", icon=icons.COMPARE),
        st.Page("views/checkpoints.py", title="Checkpoints", icon=icons.CHECKPOINTS),
        st.Page("views/sweep.py", title="Sweep", icon=icons.SWEEP),
    ],
    position="top",  # no sidebar: the tables get the window's width (1240 px of 1400)
)
with store_faults_shown():  # a database that cannot be read is one message, on any page
    page.run()
