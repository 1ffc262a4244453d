"""Text from outside (a URL's query, a search box, a server's reply, a file name), made safe to use.

`str.isdigit` is true for '²' and other digits `int` refuses, and a 25-digit id overflows SQLite's
64-bit INTEGER: `ascii_int` takes ASCII digits only, up to 18 of them. Anything printed to a
terminal may hold control characters or terminal escape codes (a prompt file's category, a
server's model path): `printable` shows them as escapes instead of letting the terminal act on
them, and `one_line` also folds line breaks and shortens, for a message that must stay one line.
"""

from __future__ import annotations

import unicodedata

MAX_ID_DIGITS = 18  # every 18-digit number fits SQLite's 64-bit INTEGER
ONE_LINE_CHARS = 300  # a message's longest quoted value: a 4,000-character name is cut


def ascii_int(text: str, max_digits: int = MAX_ID_DIGITS) -> int | None:
    """The integer written in ASCII digits 0-9 (at most `max_digits`), else None."""
    if 0 < len(text) <= max_digits and text.isascii() and text.isdigit():
        return int(text)
    return None


def _escaped(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """Text with every control or format character but the line break shown as an escape
    (\\x1b for ESC): nothing a terminal would act on."""
    return "".join(
        ch if ch == "\n" or unicodedata.category(ch) not in ("Cc", "Cf") else _escaped(ch)
        for ch in str(text)
    )


def shortened(text: str, limit: int = ONE_LINE_CHARS) -> str:
    """Text cut in the middle to at most `limit` characters ('…' marks the cut)."""
    if len(text) <= limit:
        return text
    half = (limit - 1) // 2
    return text[:half] + "…" + text[len(text) - (limit - 1 - half) :]


def one_line(text: object, limit: int | None = None) -> str:
    """Text as one printable line: whitespace runs (line breaks too) become one space, control
    characters escapes; cut to `limit` characters when given."""
    flat = printable(" ".join(str(text).split()))
    return flat if limit is None else shortened(flat, limit)
