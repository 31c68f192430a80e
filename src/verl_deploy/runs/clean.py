"""`verl-deploy clean RUN`: after a crash, end what the run left running on every node, and say what was freed.

Every attempt of the run is visited (a retry's crash can leave the earlier attempt's Ray too). On
this host the attempt's processes are found by the marks recorded at start (backends/leftovers.py:
the VD_LOG environment entry naming the attempt's log, its Ray session and temp dir, its checked
process group); inside its container and on the other nodes (over the same SSH the launch used) by
the Ray temp dir and session recorded for them and the attempt's pid file. Nothing is found by name.
A run still supervised is refused (`stop` ends it); one whose supervisor is gone is marked stopped first,
so a supervisor started later does not retry it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl_deploy.backends.leftovers import Freed
from verl_deploy.runs.attempts import backend_for
from verl_deploy.runs.record import TERMINAL, RunRecord
from verl_deploy.runs.supervisor import supervisor_alive


class CleanRefused(Exception):
    """One line: why nothing was touched, with the fix."""


@dataclass
class CleanResult:
    run: str
    freed: list[Freed] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        devices = sorted({f"{f.node}:{d}" for f in self.freed for d in f.devices})
        return {"run": self.run, "freed": [f.as_dict() for f in self.freed], "devices_freed": devices,
                "still_running": [f.as_dict() for f in self.freed if not f.ended], "notes": self.notes}


def clean_run(record: RunRecord, *, grace: float = 10.0) -> CleanResult:
    if record.state not in TERMINAL and supervisor_alive(record):
        raise CleanRefused(f"run {record.id} is {record.state} and supervised (pid {record.supervisor_pid}); "
                           f"`verl-deploy stop {record.id}` ends it, then `verl-deploy clean {record.id}`")
    result = CleanResult(record.id)
    if record.state not in TERMINAL:  # crashed with its supervisor: no later supervisor may retry it
        said = record.state
        (record.directory / "stop").touch()
        record.state = "stopped"
        record.save()
        result.notes.append(f"the record said {said} with no supervisor: marked stopped")
    handles = [attempt.handle for attempt in reversed(record.attempts)]
    if not handles:  # nothing was started
        return result
    freed, notes = backend_for(record, with_spec=False).clean(record.id, handles, grace)
    result.freed += freed
    result.notes += notes
    return result
