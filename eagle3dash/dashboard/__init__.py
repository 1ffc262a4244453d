"""The dashboard as Streamlit runs it, shipped inside the package: `serve.py` (the app behind its
access gate: what `eagle3dash app` and `make run` serve), `app.py` (the navigation), `views/` (the
pages, scripts Streamlit runs) and `.streamlit/config.toml` (read beside the script it serves).
The checkout's `serve.py` and `.streamlit` are links to these, for `streamlit run serve.py`."""

from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVE_SCRIPT = HERE / "serve.py"
