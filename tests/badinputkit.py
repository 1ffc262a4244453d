"""What both passes of the bad-input tests share (tests/test_bad_inputs.py and
tests/test_bad_inputs_hardening.py): the call timeout, the CLI run in-process down to its one
error line, and the spec of the good tiny draft they break copies of (the `draft` and `place`
fixtures are in tests/conftest.py)."""

from __future__ import annotations

import threading

from eagle3dash import cli
from tests.specs import tiny_spec

CALL_S = 60  # generous: a case that hangs fails here instead of holding the suite
SPEC = tiny_spec(aux_layer_ids=(1, 2, 3), aux_ids_location="eagle_config")


def cli_error(argv: list[str], capsys) -> str:
    """Run the CLI; assert exit 1, one `error:` line last (after progress lines, if any), no
    traceback; return that line."""
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(cli.main(argv)), daemon=True)
    thread.start()
    thread.join(CALL_S)
    assert not thread.is_alive(), f"{argv} still running after {CALL_S} s"
    out, err = capsys.readouterr()
    assert result == [1], (result, out, err)
    assert "Traceback" not in out + err
    lines = err.splitlines()
    assert lines and lines[-1].startswith("error: "), err
    assert [line for line in lines if "error" in line.lower()] == lines[-1:], err
    return lines[-1]
