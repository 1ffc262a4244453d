"""How bad a finding is: the one severity vocabulary, with each level's rank, badge colour and icon.

The values are the strings stored in `findings.severity` and `runs.worst_severity` since the first
schema, so stored runs read as they were written.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

BadgeColor = Literal["red", "orange", "blue", "green", "gray"]  # those st.badge takes, in use
UNKNOWN_RANK = -1  # a stored text that is no Severity ranks below every level
UNKNOWN_COLOR: BadgeColor = "gray"
UNKNOWN_ICON = ":material/circle:"


class Severity(StrEnum):
    """A finding's severity, worst first."""

    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """Higher is worse."""
        return _RANK[self]

    @property
    def color(self) -> BadgeColor:
        """The st.badge colour it is shown in."""
        return _COLOR[self]

    @property
    def icon(self) -> str:
        """The Material icon before its word (`:material/name:`, as Streamlit draws it)."""
        return _ICON[self]

    @classmethod
    def read(cls, text: str | None) -> Severity | None:
        """A stored severity (any case), None when the text is no severity."""
        try:
            return cls((text or "").lower())
        except ValueError:
            return None


_RANK = {Severity.CRITICAL: 3, Severity.WARNING: 2, Severity.INFO: 1}
_COLOR: dict[Severity, BadgeColor] = {
    Severity.CRITICAL: "red",
    Severity.WARNING: "orange",
    Severity.INFO: "blue",
}
_ICON = {
    Severity.CRITICAL: ":material/error:",
    Severity.WARNING: ":material/warning:",
    Severity.INFO: ":material/info:",
}


def severity_rank(text: str | None) -> int:
    """The rank of a stored severity (higher is worse); UNKNOWN_RANK for any other text."""
    severity = Severity.read(text)
    return UNKNOWN_RANK if severity is None else severity.rank
