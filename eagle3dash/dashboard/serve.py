"""eagle3dash behind its access gate: `eagle3dash app` (or `streamlit run serve.py` in a checkout).

Streamlit finds `app` below and serves the dashboard (app.py beside this file) through it, with
eagle3dash.ui.access.AccessGate in front of every request from the first one: on a network
address the page, the websocket, uploads and media all need the access token's cookie.
"""

from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware

from eagle3dash.ui.access import AccessGate

# resolved: the checkout's serve.py is a link to this file, and app.py lies beside the target
app = st.App(Path(__file__).resolve().with_name("app.py"), middleware=[Middleware(AccessGate)])
