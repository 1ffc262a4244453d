"""A /generate reply with hidden states, parsed as its bytes arrive.

SGLang writes hidden states as JSON numbers: at Kimi width (3 x 7168) a 2,048-token prefill block
is 44 M numbers, ~0.8 GB of text. Parsed whole, that is the reply's bytes plus 44 M Python floats
(~1.4 GB) before the float32 block (176 MB) even exists. `StatesReader` takes the reply in pieces:
meta_info.hidden_states[0] goes row batch by row batch (`BATCH_BYTES` of text, parsed by orjson
and copied by numpy) into one preallocated float32 array; the rest of the reply (text, ids,
meta_info) is kept as JSON bytes with `null` in place of the hidden states. Memory holds the
float32 block, one batch of text and its Python floats, and the small rest. The block is stored as
`parts` column blocks, each contiguous ([parts, rows, width / parts]): the K taps of an aux block
need no copy of their own.

`reply_bound` is the size past which a reply cannot be what the request asked for; `states_width`
the widest row a capture of K taps can legitimately receive.
"""

from __future__ import annotations

import re

import numpy as np
import orjson
from numpy.typing import NDArray

__all__ = [
    "BATCH_BYTES",
    "BYTES_PER_NUMBER",
    "MAX_HIDDEN_SIZE",
    "MAX_STATES_WIDTH",
    "REST_BYTES",
    "ReplyError",
    "StatesReader",
    "reply_bound",
    "states_width",
]

# The rows are parsed in batches of about this much text: large enough that orjson and numpy run
# at full speed, small enough to stay in cache (1 MiB parses as fast as the whole block at once).
BATCH_BYTES = 1 << 20
# The longest number orjson writes for a float, "-1.2345678901234567e-308", and its comma take 25
# bytes; 32 leaves room for a server that puts a space after each comma.
BYTES_PER_NUMBER = 32
# Room for everything in a reply besides the hidden states (text, output ids, meta_info).
REST_BYTES = 1 << 20
# A generous cap on a target's hidden size when it is not known: twice Llama-3.1-405B's 16384.
MAX_HIDDEN_SIZE = 32768
# The widest row when not even the number of taps is known: eight taps of MAX_HIDDEN_SIZE.
MAX_STATES_WIDTH = 8 * MAX_HIDDEN_SIZE

_KEY = b'"hidden_states"'
_WS = frozenset(b" \t\r\n")
_BRACKETS = re.compile(rb"[\[\]]")

# stages, in the order a reply goes through them
_HEAD = "head"  # before the value of "hidden_states"
_VALUE = "value"  # the value: a list, or null
_OUTER = "outer"  # inside the list: entry 0 next
_ENTRY = "entry"  # inside entry 0: its first row, or its first number when it is one row
_ROWS = "rows"  # the rows of entry 0
_ROW = "row"  # entry 0 is one row of numbers
_SKIP = "skip"  # the entries after entry 0 (decode rows), up to the end of the list
_TAIL = "tail"  # after the value


class ReplyError(ValueError):
    """A reply whose hidden states are not a [tokens][width] block this request can return."""


def reply_bound(rows: int, width: int) -> int:
    """The most bytes a reply with `rows` hidden-state rows of `width` numbers can take."""
    return rows * width * BYTES_PER_NUMBER + REST_BYTES


def states_width(taps: int, hidden_size: int | None) -> int:
    """The widest row a capture of `taps` taps accepts: twice taps x hidden_size (MAX_HIDDEN_SIZE
    when not known), so that a server capturing more layers than expected still answers and the
    capture's width checks can say so."""
    return 2 * taps * (hidden_size or MAX_HIDDEN_SIZE)


class StatesReader:
    """Fed a /generate reply's bytes in order; keeps meta_info.hidden_states[0] as a float32
    [parts, rows, width / parts] array and the rest of the reply as JSON bytes.

    `rows` is how many rows the prefill block can have (the tokens sent): more is refused, fewer
    are returned as they are (the caller says why). `max_width` bounds the row width before the
    block is allocated. A width that `parts` does not divide is kept as one part. Entries after
    hidden_states[0] (decode rows) are skipped.
    """

    def __init__(self, rows: int, max_width: int, parts: int = 1) -> None:
        self.rows = rows
        self.max_width = max_width
        self.parts = parts
        self._stage = _HEAD
        self._head = bytearray()  # the reply up to and including the ':' after the key
        self._tail = bytearray()  # the reply after the value
        self._buf = bytearray()  # bytes of the value not consumed yet
        self._seen = 0  # _head: where the search for the key resumes
        self._scan = 0  # _buf: where the search for the next row end resumes
        self._depth = 0  # _SKIP: lists open in the hidden_states value
        self._block: NDArray[np.float32] | None = None
        self._filled = 0  # rows of the block received
        self._absent = False  # hidden_states is null or []

    # -- input ------------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Take the next piece of the reply."""
        if self._stage == _TAIL:
            self._tail += data
            return
        if self._stage == _HEAD:
            self._head += data
            if not self._find_key():
                return
        else:
            self._buf += data
        self._advance()

    def close(self) -> tuple[bytes, NDArray[np.float32] | None]:
        """The reply without its hidden states (`null` in their place), and hidden_states[0] as
        a [parts, rows received, width / parts] float32 array (None when the reply has none)."""
        if self._stage == _HEAD:
            return bytes(self._head), None
        if self._stage != _TAIL:
            raise ReplyError("the reply ends inside meta_info.hidden_states")
        rest = bytes(self._head) + b"null" + bytes(self._tail)
        if self._absent:
            return rest, None
        if self._block is None:  # hidden_states[0] == []
            return rest, np.empty((1, 0, 0), np.float32)
        return rest, self._block[:, : self._filled]

    # -- stages -----------------------------------------------------------------------------

    def _find_key(self) -> bool:
        """Move past `"hidden_states":` once it has arrived; what follows goes to _buf."""
        head = self._head
        while True:
            i = head.find(_KEY, self._seen)
            if i < 0:
                self._seen = max(0, len(head) - len(_KEY))
                return False
            j = self._skip_ws(head, i + len(_KEY))
            if j == len(head):
                self._seen = i  # the colon has not arrived yet
                return False
            if head[j] != ord(":"):  # the string "hidden_states" as a value, not the key
                self._seen = i + 1
                continue
            self._buf = head[j + 1 :]
            del head[j + 1 :]
            self._stage = _VALUE
            return True

    def _advance(self) -> None:
        """Consume _buf as far as it goes, stage by stage."""
        while self._buf and self._stage != _TAIL:
            before = (self._stage, len(self._buf))
            if self._stage == _ROWS:
                self._rows_step()
            elif self._stage == _SKIP:
                self._skip_step()
            elif self._stage == _ROW:
                self._row_step()
            else:
                self._token_step()
            if (self._stage, len(self._buf)) == before:
                return  # waiting for more bytes
        if self._stage == _TAIL and self._buf:
            self._tail += self._buf
            self._buf = bytearray()

    def _token_step(self) -> None:
        """_VALUE, _OUTER: one bracket (or null) at a time; _ENTRY: what entry 0 holds."""
        buf = self._buf
        # in _ENTRY, buf[0] is entry 0's own '[': it stays, as the '[' of every batch of rows
        i = self._skip_ws(buf, 1 if self._stage == _ENTRY else 0)
        if i == len(buf):
            if self._stage != _ENTRY:
                del buf[:i]
            return
        c = buf[i]
        if self._stage == _VALUE:
            if c == ord("n"):
                if len(buf) - i < 4:
                    return
                if buf[i : i + 4] != b"null":
                    raise ReplyError("meta_info.hidden_states is neither a list nor null")
                self._absent = True
                del buf[: i + 4]
                self._stage = _TAIL
            elif c == ord("["):
                del buf[: i + 1]
                self._stage = _OUTER
            else:
                raise ReplyError("meta_info.hidden_states is neither a list nor null")
        elif self._stage == _OUTER:
            if c == ord("]"):  # an empty list
                self._absent = True
                del buf[: i + 1]
                self._stage = _TAIL
            elif c == ord("["):
                del buf[:i]
                self._stage = _ENTRY
            else:
                raise ReplyError(_NOT_A_BLOCK)
        elif c == ord("["):  # _ENTRY: rows
            self._scan = i
            self._stage = _ROWS
        elif c == ord("]"):  # _ENTRY: hidden_states[0] == []
            del buf[: i + 1]
            self._depth = 1
            self._stage = _SKIP
        else:  # _ENTRY: hidden_states[0] is one row of numbers
            del buf[:i]
            self._stage = _ROW

    def _rows_step(self) -> None:
        """Find complete rows; parse them a batch at a time, and at the end of the block.

        buf[0] is a '[' (entry 0's own, then the comma after each batch turned into one), so a
        batch is parsed in place: the comma after its last row becomes ']' for the parse."""
        buf = self._buf
        while True:
            k = buf.find(b"]", self._scan)
            if k < 0:
                self._scan = len(buf)
                break
            j = self._skip_ws(buf, k + 1)
            if j == len(buf):
                self._scan = k  # what follows this row has not arrived yet
                break
            if buf[j] == ord(","):  # a row ends: parse the rows so far once they are a batch
                self._scan = j + 1
                if k >= BATCH_BYTES:
                    buf[j] = ord("]")
                    self._parse_in_place(buf, j + 1)
                    buf[j] = ord("[")
                    del buf[:j]
                    self._scan = 1
            elif buf[j] == ord("]"):  # the last row ends, and hidden_states[0] with it
                self._parse_in_place(buf, j + 1)
                del buf[: j + 1]
                self._scan, self._depth = 0, 1
                self._stage = _SKIP
                return
            else:
                raise ReplyError(_NOT_A_BLOCK)

    def _row_step(self) -> None:
        """hidden_states[0] as one row of numbers: its end is the first ']'."""
        buf = self._buf
        k = buf.find(b"]")
        if k < 0:
            return
        self._parse(b"[[" + buf[:k] + b"]]")
        del buf[: k + 1]
        self._depth = 1
        self._stage = _SKIP

    def _skip_step(self) -> None:
        """Drop the rest of the hidden_states list, counting brackets to find its end."""
        buf = self._buf
        depth = self._depth + buf.count(b"[") - buf.count(b"]")
        if depth > 0:
            self._depth = depth
            buf.clear()
            return
        depth, end = self._depth, 0
        for m in _BRACKETS.finditer(buf):
            depth += 1 if m.group() == b"[" else -1
            if depth == 0:
                end = m.end()
                break
        del buf[:end]
        self._stage = _TAIL

    # -- rows -------------------------------------------------------------------------------

    def _parse_in_place(self, buf: bytearray, end: int) -> None:
        """Parse buf[:end], a list of rows, without copying it."""
        view = memoryview(buf)[:end]
        try:
            self._parse(view)
        finally:
            view.release()  # buf can be resized again

    def _parse(self, text: bytes | memoryview) -> None:
        try:
            part = orjson.loads(text)
        except orjson.JSONDecodeError as e:
            raise self._literal_error(bytes(text)) or ReplyError(
                f"{_NOT_A_BLOCK} (invalid JSON: {e})"
            ) from None
        if not part:
            return
        if not isinstance(part[0], list):
            raise ReplyError(_NOT_A_BLOCK)
        if self._block is None:
            width = len(part[0])
            if not width:
                raise ReplyError(_NOT_A_BLOCK)
            if width > self.max_width:
                raise ReplyError(
                    f"meta_info.hidden_states[0] has rows of {width} numbers, more than the "
                    f"{self.max_width} this request can return"
                )
            parts = self.parts if width % self.parts == 0 else 1
            self._block = np.empty((parts, self.rows, width // parts), np.float32)
        parts, _, cols = self._block.shape
        n = len(part)
        if self._filled + n > self.rows:
            raise ReplyError(
                f"meta_info.hidden_states[0] has more rows than the {self.rows} tokens sent"
            )
        rows = slice(self._filled, self._filled + n)
        try:
            with np.errstate(over="ignore"):  # an overflow is refused below, as inf
                if parts == 1:
                    self._block[0, rows] = part
                else:
                    block = np.asarray(part, np.float32)
                    if block.shape != (n, parts * cols):
                        raise ValueError(f"rows of shape {block.shape[1:]}")
                    self._block[:, rows] = block.reshape(n, parts, cols).transpose(1, 0, 2)
        except (TypeError, ValueError) as e:
            raise ReplyError(f"{_NOT_A_BLOCK} ({_shape_problem(e)})") from None
        # null becomes NaN and a number past float32's range inf on the way in: refused here,
        # or a slot would be matched on NaN margins downstream.
        finite = np.isfinite(self._block[:, rows]).all(axis=(0, 2))
        if not finite.all():
            first = self._filled + int(np.argmin(finite))
            raise ReplyError(
                f"meta_info.hidden_states[0] holds a value that is not a finite float32 number "
                f"(null, NaN, or beyond ±3.4e38) in row {first}"
            )
        self._filled += n

    def _literal_error(self, text: bytes) -> ReplyError | None:
        """The refusal of rows holding NaN or Infinity, which a Python server's json.dumps
        writes and JSON has no literal for; None when the rows hold neither."""
        found = _NON_FINITE.search(text)
        if found is None:
            return None
        row = self._filled + text.count(b"]", 0, found.start())  # each earlier row ended
        return ReplyError(
            "meta_info.hidden_states[0] holds a value that is not a finite float32 number "
            f"({found.group().decode()}, which JSON has no literal for) in row {row}"
        )

    @staticmethod
    def _skip_ws(buf: bytes | bytearray, i: int) -> int:
        while i < len(buf) and buf[i] in _WS:
            i += 1
        return i


_NOT_A_BLOCK = "meta_info.hidden_states[0] is not a [tokens][width] block of numbers"
_NON_FINITE = re.compile(rb"-?Infinity|NaN")


def _shape_problem(error: Exception) -> str:
    """numpy's complaint about a block, in words that name the fault (not numpy's)."""
    text = str(error)
    if "sequence" in text or "inhomogeneous" in text or "shape" in text or "broadcast" in text:
        return "its rows differ in length (ragged) or from the first row's width"
    return "it holds something other than numbers"
