"""eagle3dash: the dashboard. `streamlit run app.py` (port, upload size: .streamlit/config.toml).

The pages live in views/ and draw with eagle3dash.ui; the home folder is EAGLE3DASH_HOME. (Not in
pages/: that folder name turns on Streamlit's old multipage mode, whose deep links skip this file.)
"""

import streamlit as st

st.set_page_config(page_title="eagle3dash", page_icon="🦅", layout="wide")
page = st.navigation(
    [
        st.Page("views/runs.py", title="Runs", icon="📋", default=True),
        st.Page("views/new_run.py", title="New run", icon="➕"),
        st.Page("views/run.py", title="Run", icon="🔎"),
        st.Page("views/compare.py", title="Compare", icon="⚖️"),
        st.Page("views/checkpoints.py", title="Checkpoints", icon="📦"),
    ]
)
page.run()
