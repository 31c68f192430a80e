"""Findings: every user mistake becomes one of these instead of a traceback.

A finding names the field it is about, says what is wrong in one line and how to
fix it. Checks collect all findings in one pass; the CLI prints them together.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Literal

Level = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class Finding:
    level: Level
    field: str
    message: str
    fix: str = ""
    area: str = "config"

    def line(self) -> str:
        """One line for a terminal: `error: field: message (fix: ...)`."""
        text = f"{self.level}: {self.field}: {self.message}"
        return f"{text} — fix: {self.fix}" if self.fix else text

    def as_dict(self) -> dict:
        return asdict(self)


def error(field: str, message: str, fix: str = "", area: str = "config") -> Finding:
    return Finding("error", field, message, fix, area)


def warning(field: str, message: str, fix: str = "", area: str = "config") -> Finding:
    return Finding("warning", field, message, fix, area)


def info(field: str, message: str, fix: str = "", area: str = "config") -> Finding:
    return Finding("info", field, message, fix, area)


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.level == "error" for f in findings)


class UserError(Exception):
    """Raised when the input cannot even be resolved; carries the findings."""

    def __init__(self, findings: list[Finding]):
        self.findings = findings
        super().__init__("; ".join(f.line() for f in findings))
