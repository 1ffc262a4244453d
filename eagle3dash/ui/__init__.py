"""Shared pieces of the Streamlit app (`app.py`, `views/`).

- `home`: `get_store()`, the store on EAGLE3DASH_HOME for this script run.
- `fmt`: numbers, times, severities, and `md_escape` for text shown through Markdown.
- `tables`: DataFrames for every table (runs, training vs serving, layout diff, reports, compare).
- `charts`: altair charts (acceptance per step, accept length and tok/s per request, layouts).
- `progress`: what a run's page shows while its jobs run (`progress_view`), and `cancel_run`.
- `widgets`: the Streamlit drawing of all of the above.

`tables`, `charts` and `progress` import no Streamlit and are tested directly.
"""
