"""The one severity vocabulary: ranks, colours and icons pinned, stored text read back."""

from __future__ import annotations

import pytest

from eagle3dash.findings import Finding
from eagle3dash.severity import Severity, severity_rank
from eagle3dash.ui.fmt import severity_color, severity_label


def test_each_level_has_its_rank_colour_and_icon() -> None:
    assert [s.value for s in Severity] == ["critical", "warning", "info"]  # as stored
    assert [s.rank for s in Severity] == [3, 2, 1]
    assert [s.color for s in Severity] == ["red", "orange", "blue"]
    assert [s.icon for s in Severity] == [
        ":material/error:",
        ":material/warning:",
        ":material/info:",
    ]


def test_stored_text_reads_back_and_other_text_ranks_lowest() -> None:
    assert Severity.read("critical") is Severity.CRITICAL
    assert Severity.read("WARNING") is Severity.WARNING  # any case, as the store ranked it
    assert Severity.read("error") is None and Severity.read(None) is None
    assert severity_rank("critical") > severity_rank("warning") > severity_rank("info")
    assert severity_rank("info") > severity_rank("no such level") == -1
    assert severity_color("warning") == "orange" and severity_color("bogus") == "gray"
    assert severity_label("info") == ":material/info: info"
    assert severity_label("odd") == ":material/circle: odd"
    assert severity_label(None) == ""


def test_a_finding_holds_a_severity_and_stores_its_value() -> None:
    f = Finding("r", "warning", "t.", "e", "x")  # a rule may give the stored text
    assert f.severity is Severity.WARNING and f.severity.rank == 2
    assert f.to_dict()["severity"] == "warning"
    assert type(f.to_dict()["severity"]) is str  # JSON and SQLite get plain text
    with pytest.raises(ValueError, match="is not one of critical, warning, info"):
        Finding("r", "Critical", "t.", "e", "x")  # stored values are lower case
    with pytest.raises(ValueError, match="'error'"):
        Finding("r", "error", "t.", "e", "x")
