"""Shared pieces of the Streamlit app (`app.py`, `views/`).

- `home`: `get_store()`, the store on EAGLE3DASH_HOME for this script run.
- `fmt`: numbers, times, severities, and `md_escape` for text shown through Markdown.
- `words`: a diagnosis's values in words (sources, taps, what was not checked, the verdict).
- `tables`: DataFrames for every table (runs, training vs serving, layout diff, reports, compare),
  read from a run's one stored diagnosis (`tables.stored_diagnosis(run)`: the typed read of
  eagle3dash/diagnosis/stored.py, any schema) and its summary columns.
- `charts`: altair charts (acceptance per draft position and per step, accept length and tok/s
  per request, layouts, slot matching), one colour-blind-safe style per side.
- `data`: the server report of a run (the diagnosis's, else the endpoint's last probe).
- `progress`: what a run's page shows while its jobs run (`progress_view`: stage, elapsed time,
  an estimate), and `cancel_run`.
- The Streamlit drawing of all of the above, by what it draws: `widgets` (what every page shares:
  the pages' paths, share links, error boxes, `guard`, query ints, wrapping tables), `verdict`
  (the verdict banner, findings, why a run stopped), `layouts` (training vs serving, the layout
  diff, the detective), `run_panels` (the Runs table, charts, progress, logs, exports, Compare's
  headline), `reports` (checkpoint and server reports), `inputs` (option widgets, the upload),
  `probe_panel` (an endpoint's probe, recorded through `probe.probe_and_record`).

`words`, `tables`, `charts`, `data` and `progress` import no Streamlit and are tested directly.
"""
