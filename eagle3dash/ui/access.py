"""Who can reach the app: loopback by default; a network bind needs an access token.

Like TensorBoard, MLflow and Jupyter, the app listens on 127.0.0.1 unless told otherwise (a team
reaches it through an SSH tunnel). Listening on a network address is explicit: `make run
BIND=0.0.0.0` sets EAGLE3DASH_BIND, and then every page asks for the token from EAGLE3DASH_TOKEN
(or Streamlit's secrets, key `token`) once per browser session.
"""

from __future__ import annotations

import hmac
import ipaddress
import os

import streamlit as st

BIND_ENV = "EAGLE3DASH_BIND"
TOKEN_ENV = "EAGLE3DASH_TOKEN"


def bind_address() -> str:
    """The address the app serves on: EAGLE3DASH_BIND, else Streamlit's server.address."""
    return os.environ.get(BIND_ENV) or str(st.get_option("server.address") or "127.0.0.1")


def is_loopback(address: str) -> bool:
    """Whether an address only this machine can reach."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def configured_token() -> str | None:
    """The access token: EAGLE3DASH_TOKEN, else Streamlit's secrets['token'], else None."""
    token = os.environ.get(TOKEN_ENV)
    if token:
        return token
    try:
        return str(st.secrets["token"]) if "token" in st.secrets else None
    except FileNotFoundError:  # no secrets file
        return None


def require_access() -> None:
    """On a network bind, stop every page until this session gave the token."""
    address = bind_address()
    if is_loopback(address) or st.session_state.get("_access_granted"):
        return
    token = configured_token()
    st.title("eagle3dash")
    if not token:
        st.error(
            f"This app listens on {address}, a network address, and no access token is set: set "
            f"{TOKEN_ENV} (or `token` in .streamlit/secrets.toml) and restart, or serve on "
            "127.0.0.1 and reach it through an SSH tunnel.",
            icon="🔒",
        )
        st.stop()
    given = st.text_input("Access token", type="password", key="_access_token")
    if given and hmac.compare_digest(given.encode(), token.encode()):
        st.session_state["_access_granted"] = True
        st.rerun()
    if given:
        st.error("That is not the access token.", icon="🔒")
    st.caption("This app listens on a network address; its token is in EAGLE3DASH_TOKEN.")
    st.stop()
