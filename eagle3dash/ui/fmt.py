"""Formatting for the pages: numbers, times, severities, and Markdown-safe text.

Streamlit renders most text as Markdown. Text that comes from users or from a diagnosis (paths,
URLs, findings, error messages) goes through `md_escape` so that it shows literally: no HTML, no
links, no emphasis, no LaTeX, no emoji shortcodes.
"""

from __future__ import annotations

import math
import re
from typing import Any
from urllib.parse import urlencode

from eagle3dash.severity import UNKNOWN_COLOR, UNKNOWN_ICON, BadgeColor, Severity

DASH = "—"
# A run's or a job's status: its Material icon (Streamlit draws `:material/name:` in Markdown).
STATUS_ICONS = {
    "queued": ":material/schedule:",
    "running": ":material/autorenew:",
    "succeeded": ":material/check_circle:",
    "failed": ":material/cancel:",
    "cancelled": ":material/stop_circle:",
}
# Every ASCII punctuation character Markdown, Streamlit's directives or KaTeX could act on.
_MD_SPECIAL = set("\\`*_{}[]()<>#+-.!|~$:&")


# Streamlit's Markdown (remark-gfm) turns URLs, www. names and e-mail addresses in plain text into
# links after escapes are read, so backslashes cannot stop them: a zero-width space inside each
# ("http:\u200b//", "www\u200b.", "@\u200b") leaves the text as it reads and links nothing.
ZERO_WIDTH_SPACE = "\u200b"
_AUTOLINKS = re.compile(r"(?<=:)(?=//)|(?<=www)(?=\.)|(?<=@)", re.IGNORECASE)


def md_escape(text: Any) -> str:
    """Text shown literally by st.markdown (and every Markdown label): specials backslashed, no
    link made of a URL, www. name or e-mail address in it. The one helper every foreign text
    (a server's, a checkpoint's, a file name, a user's) goes through on a page."""
    if text is None:
        return ""
    out = []
    for ch in _AUTOLINKS.sub(ZERO_WIDTH_SPACE, str(text)):
        if ch in _MD_SPECIAL:
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("  \n")  # a hard line break, as in the source text
        else:
            out.append(ch)
    return "".join(out)


_UNBROKEN = re.compile(r"[^\s/]{24,}")  # a run a line cannot break in (a digest, say)


def breakable(text: str) -> str:
    """Text that a narrow cell can wrap: a zero-width space after each '/' of a path and every 16
    characters of a long unbroken run (a content digest), nothing a reader sees."""
    text = text.replace("/", "/" + ZERO_WIDTH_SPACE)
    return _UNBROKEN.sub(
        lambda m: ZERO_WIDTH_SPACE.join(m[0][i : i + 16] for i in range(0, len(m[0]), 16)), text
    )


def is_missing(value: Any) -> bool:
    """None or NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def as_float(value: Any) -> float | None:
    """A stored number as a float; None when missing."""
    return None if is_missing(value) else float(value)


def as_int(value: Any) -> int | None:
    """A stored number as an int; None when missing."""
    return None if is_missing(value) else int(value)


def num(value: Any, digits: int = 2) -> str:
    """A number with `digits` decimals; a dash for None/NaN."""
    if is_missing(value):
        return DASH
    try:
        return f"{float(value):,.{digits}f}"
    except (TypeError, ValueError):
        return str(value)


def pct(value: Any, digits: int = 1) -> str:
    """A fraction as a percentage; a dash for None/NaN."""
    return DASH if is_missing(value) else f"{float(value) * 100:.{digits}f}%"


def ratio(value: Any, spread: Any = None) -> str:
    """A speedup like '0.63x', with its noise when known: '0.63x ±0.05'."""
    if is_missing(value):
        return DASH
    shown = f"{float(value):.2f}x"
    return shown if is_missing(spread) else f"{shown} ±{float(spread):.2f}"


def delta(a: Any, b: Any, digits: int = 2) -> str:
    """b - a with a sign; a dash when either is missing or not a number."""
    if is_missing(a) or is_missing(b):
        return DASH
    try:
        d = float(b) - float(a)
    except (TypeError, ValueError):
        return DASH
    return f"{d:+,.{digits}f}"


def size(num_bytes: int) -> str:
    """A file size in the unit that reads best: '840 KB', '5.9 MB', '2.13 GB', '1.02 TB'."""
    for unit, scale, digits in (("TB", 1e12, 2), ("GB", 1e9, 2), ("MB", 1e6, 1)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:,.{digits}f} {unit}"
    return f"{max(num_bytes, 0) / 1e3:,.0f} KB"


def rows_height(rows: int, row_px: int = 35) -> int:
    """The pixel height of a dataframe that shows `rows` rows of `row_px` (Streamlit's default:
    35) and its header, without a scroll box (the header and border: 38)."""
    return 38 + row_px * max(rows, 1)


def duration(seconds: float) -> str:
    """'42 s', '3 min 05 s', '1 h 02 min'."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def when(iso: str | None) -> str:
    """'2025-11-29T11:00:05.123456Z' -> '2025-11-29 11:00:05 UTC'."""
    if not iso:
        return DASH
    return iso[:19].replace("T", " ") + " UTC"


def severity_color(severity: str | None) -> BadgeColor:
    """The st.badge color of a stored severity; gray for any other text."""
    known = Severity.read(severity)
    return UNKNOWN_COLOR if known is None else known.color


def severity_label(severity: str | None) -> str:
    """':material/warning: warning' (Markdown); empty for None."""
    if not severity:
        return ""
    known = Severity.read(severity)
    return f"{UNKNOWN_ICON if known is None else known.icon} {md_escape(severity)}"


def status_label(status: str | None) -> str:
    """':material/check_circle: succeeded' (Markdown: the word escaped, the icon a code)."""
    return f"{STATUS_ICONS.get(status or '', UNKNOWN_ICON)} {md_escape(status or 'unknown')}"


def page_url(base: str, page: str, **params: Any) -> str:
    """`base/page?k=v` with the None params left out (base '' gives a relative URL)."""
    query = urlencode({k: v for k, v in params.items() if v is not None})
    path = f"{base.rstrip('/')}/{page}" if base else page
    return f"{path}?{query}" if query else path
