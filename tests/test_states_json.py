"""StatesReader: a /generate reply's hidden states parsed as the bytes arrive."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest

from eagle3dash.engines.sglang import states_json as states_json
from eagle3dash.engines.sglang.states_json import (
    ReplyError,
    StatesReader,
    reply_bound,
    states_width,
)

BLOCK = [[0.5, -1.25, 3.0, 1e-3], [2.0, 0.125, -0.0, 65504.0], [-7.5, 0.25, 1.5, -2.0]]


def reply(hidden: object, compact: bool = True) -> bytes:
    """A /generate reply as SGLang (orjson, compact) or Python's json.dumps (spaces) writes it."""
    body = {
        "text": " hi",
        "output_ids": [11],
        "meta_info": {"id": "r1", "prompt_tokens": 3, "hidden_states": hidden, "e2e_latency": 0.5},
    }
    return orjson.dumps(body) if compact else json.dumps(body, indent=1).encode()


def read(data: bytes, rows: int = 3, width: int = 64, parts: int = 1, piece: int = 0):
    """The reader's (rest as JSON, block) for `data` fed in pieces of `piece` bytes (0: whole)."""
    reader = StatesReader(rows, width, parts)
    step = piece or len(data)
    for i in range(0, len(data), step):
        reader.feed(data[i : i + step])
    rest, block = reader.close()
    return orjson.loads(rest), block


REST = {
    "text": " hi",
    "output_ids": [11],
    "meta_info": {"id": "r1", "prompt_tokens": 3, "hidden_states": None, "e2e_latency": 0.5},
}


@pytest.mark.parametrize("compact", [True, False], ids=["orjson", "json-indent"])
@pytest.mark.parametrize("piece", [0, 1, 7])
def test_block_numbers_and_the_rest(compact, piece):
    # the prefill block, then two decode rows that are skipped
    data = reply([BLOCK, [9.0, 9.0, 9.0, 9.0], [8.0, 8.0, 8.0, 8.0]], compact)
    rest, block = read(data, piece=piece)
    assert rest == REST
    assert block.dtype == np.float32 and block.shape == (1, 3, 4)
    assert block[0].tolist() == [
        [0.5, -1.25, 3.0, 0.0010000000474974513],  # 1e-3 in float32
        [2.0, 0.125, -0.0, 65504.0],
        [-7.5, 0.25, 1.5, -2.0],
    ]


@pytest.mark.parametrize("piece", [0, 1, 5])
def test_parts_are_column_blocks(piece):
    _, block = read(reply([BLOCK]), parts=2, piece=piece)
    assert block.shape == (2, 3, 2)
    assert block[0].tolist() == [[0.5, -1.25], [2.0, 0.125], [-7.5, 0.25]]
    assert block[1].tolist() == [[3.0, 0.0010000000474974513], [-0.0, 65504.0], [1.5, -2.0]]
    assert block[0].flags.c_contiguous and block[1].flags.c_contiguous
    # a width that the parts do not divide stays one part (the capture's width check says why)
    _, block = read(reply([BLOCK]), parts=3)
    assert block.shape == (1, 3, 4)


@pytest.mark.parametrize("compact", [True, False], ids=["orjson", "json-indent"])
def test_batches_of_rows_parse_in_place(monkeypatch, compact):
    monkeypatch.setattr(states_json, "BATCH_BYTES", 8)  # a batch every row or two
    rows = [[float(r * 10 + c) for c in range(3)] for r in range(7)]
    for piece in (0, 1, 4, 13):
        rest, block = read(reply([rows], compact), rows=7, parts=3, piece=piece)
        assert rest == REST
        assert block.shape == (3, 7, 1)
        assert block[:, :, 0].T.tolist() == [
            [0.0, 1.0, 2.0],
            [10.0, 11.0, 12.0],
            [20.0, 21.0, 22.0],
            [30.0, 31.0, 32.0],
            [40.0, 41.0, 42.0],
            [50.0, 51.0, 52.0],
            [60.0, 61.0, 62.0],
        ]


def test_no_hidden_states():
    for hidden in (None, []):
        rest, block = read(reply(hidden))
        assert block is None and rest == REST
    body = {"text": "", "output_ids": [1], "meta_info": {"id": "r2"}}
    rest, block = read(orjson.dumps(body))
    assert block is None and rest == body
    _, block = read(reply([[]]))
    assert block is not None and block.shape == (1, 0, 0)


def test_one_row_entry_and_fewer_rows():
    _, block = read(reply([[1.5, 2.5]]), rows=1)
    assert block.tolist() == [[[1.5, 2.5]]]
    _, block = read(reply([BLOCK[:2]]), rows=3)  # fewer rows: returned as they are
    assert block.shape == (1, 2, 4) and block[0, 1].tolist() == [2.0, 0.125, -0.0, 65504.0]


def test_the_key_as_a_string_value_is_not_the_key():
    body = {
        "text": "hidden_states",
        "meta_info": {"note": "hidden_states", "hidden_states": [BLOCK]},
    }
    rest, block = read(orjson.dumps(body), piece=3)
    assert rest == {
        "text": "hidden_states",
        "meta_info": {"note": "hidden_states", "hidden_states": None},
    }
    assert block.shape == (1, 3, 4)


@pytest.mark.parametrize(
    ("hidden", "rows", "width", "message"),
    [
        (BLOCK, 2, 64, "more rows than the 2 tokens sent"),
        (BLOCK, 3, 3, "rows of 4 numbers, more than the 3 this request can return"),
        ([[1.0, 2.0], [3.0]], 3, 64, "not a [tokens][width] block of numbers"),
        ([[1.0, 2.0], [3.0, 4.0, 5.0]], 3, 64, "not a [tokens][width] block of numbers"),
        ([[1.0, "x"]], 3, 64, "not a [tokens][width] block of numbers"),
        ([[[1.0], [2.0]]], 3, 64, "not a [tokens][width] block of numbers"),
    ],
)
def test_blocks_that_are_refused(hidden, rows, width, message):
    with pytest.raises(ReplyError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read(reply([hidden]), rows=rows, width=width)


def test_other_shapes_are_refused():
    with pytest.raises(ReplyError, match="neither a list nor null"):
        read(reply("yes"))
    with pytest.raises(ReplyError, match="not a"):
        read(reply([3.5]))
    with pytest.raises(ReplyError, match="ends inside meta_info.hidden_states"):
        read(reply([BLOCK])[:-40])


def test_bounds():
    # 2,049 rows (2,048 tokens + 1 new) of twice Kimi's 3 x 7168: 32 bytes a number + 1 MiB
    assert states_width(3, 7168) == 43008
    assert states_width(3, None) == 196608  # MAX_HIDDEN_SIZE = 32768
    assert reply_bound(2049, 43008) == 2_820_997_120
