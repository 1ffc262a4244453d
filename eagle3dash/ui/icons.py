"""The icons the pages draw, by what each says: Material Symbols, whose font Streamlit serves
with the app, never emoji (a browser draws an emoji only from a font of its own machine; Debian's
Chromium without one draws blank boxes). Each is a `:material/name:` code, which Streamlit takes as
an `icon=` and inside Markdown; a table cell gets words instead (tests/test_browser_pages.py fails
on an emoji or a glyph no installed font has)."""

from __future__ import annotations

# the pages (app.py's navigation)
RUNS = ":material/list:"
NEW_RUN = ":material/add_circle:"
RUN = ":material/search:"
COMPARE = ":material/compare_arrows:"
CHECKPOINTS = ":material/inventory_2:"
SWEEP = ":material/trending_up:"
APP = ":material/speed:"

# what a message is
OK = ":material/check_circle:"
NOTE = ":material/info:"
NOT_CHECKED = ":material/remove_circle_outline:"
REFUSED = ":material/block:"
LOCKED = ":material/lock:"
DEMO = ":material/science:"
REAL_ENGINE = ":material/dns:"  # a real serving engine on this machine
TIP = ":material/lightbulb:"
ASK = ":material/help:"
FIX = ":material/build:"
DETECTIVE = ":material/search:"
STORED = ":material/inventory_2:"
