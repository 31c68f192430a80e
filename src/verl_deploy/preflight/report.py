"""What a probe found: one Area per part of the machine, rows of (check, status, value, fix).

Rows with status warning or error are the findings; `data` holds the facts programs want
(the device list, versions, candidates) and is what `--json` prints besides the findings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from verl_deploy.findings import Finding

Status = Literal["ok", "info", "warning", "error"]


@dataclass
class Row:
    check: str
    status: Status
    value: str
    fix: str = ""


@dataclass
class Area:
    id: str
    title: str
    rows: list[Row] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def ok(self, check: str, value: str, fix: str = "") -> None:
        self.rows.append(Row(check, "ok", value, fix))

    def info(self, check: str, value: str, fix: str = "") -> None:
        self.rows.append(Row(check, "info", value, fix))

    def warning(self, check: str, value: str, fix: str = "") -> None:
        self.rows.append(Row(check, "warning", value, fix))

    def error(self, check: str, value: str, fix: str = "") -> None:
        self.rows.append(Row(check, "error", value, fix))

    @property
    def status(self) -> Status:
        for level in ("error", "warning"):
            if any(row.status == level for row in self.rows):
                return level
        return "ok"

    def findings(self) -> list[Finding]:
        return [Finding(row.status, row.check, row.value, row.fix, area=self.id)
                for row in self.rows if row.status in ("warning", "error")]


def finding_dict(finding: Finding) -> dict:
    return {"area": finding.area, "level": finding.level, "check": finding.field, "field": finding.field,
            "message": finding.message, "fix": finding.fix}
