"""eagle3dash behind its access gate: `streamlit run serve.py` (what `make run` starts).

Streamlit finds `app` below and serves the dashboard (app.py) through it, with
eagle3dash.ui.access.AccessGate in front of every request from the first one: on a network
address the page, the websocket, uploads and media all need the access token's cookie.
"""

import streamlit as st
from starlette.middleware import Middleware

from eagle3dash.ui.access import AccessGate

app = st.App("app.py", middleware=[Middleware(AccessGate)])
