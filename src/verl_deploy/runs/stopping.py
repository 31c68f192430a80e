"""Stopping a run: its training (through its backend), the other nodes, and a record that says `stopped`.

`stop` asks the backend first whether it can reach what runs the attempt (a cluster that refuses our
token): then nothing is touched and the run goes on, supervised. A run whose run.json is damaged is
stopped from the newest attempt's handle.json, and its record is rebuilt saying so.
"""

from __future__ import annotations

import os
import time

from verl_deploy.backends.handle import Handle
from verl_deploy.backends.process import stranger
from verl_deploy.backends.registry import make_backend
from verl_deploy.runs.attempts import backend_for
from verl_deploy.runs.handles import latest_handle
from verl_deploy.runs.record import Attempt, RecordError, RunRecord, read_json, runs_dir, save_keeping_last_good


def stop_run(record: RunRecord) -> str | None:
    """End the run's training and mark it stopped. The backend is asked first whether it can (a cluster that
    refuses us raises rayauth.AuthError): then nothing is touched, and the run goes on, supervised. Returns why
    nothing was signalled, when its recorded pid now belongs to a process this tool did not start (the training
    had ended; the run is marked ended too)."""
    backend = backend_for(record, with_spec=False)
    if record.current:
        backend.check_stop(record.current.handle)
    (record.directory / "stop").touch()
    record.state = "stopped"
    save_keeping_last_good(record)
    why = None
    if record.current:
        why = stranger(record.current.handle)
        backend.stop(record.current.handle)  # signals nothing of a stranger (backends check the identity)
        backend.end_nodes(record.current.handle)
        record.current.ended = time.time()
    save_keeping_last_good(record)
    return why


def stop_damaged(run_id: str, problem: str) -> str:
    """`stop` for a run whose run.json cannot be read: end its processes from handle.json, write a true record.

    The damaged file is kept as run.json.damaged; the new record says `stopped` and why it was rebuilt.
    """
    directory = runs_dir() / run_id
    (directory / "stop").touch()
    data = latest_handle(run_id)
    handle = None
    if data is not None:
        try:
            handle = Handle.from_dict(data["handle"])
            backend = make_backend(data["backend"], data.get("backend_options") or {}, None, data.get("container"),
                                   data.get("run_dir") or "/verl")
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            return f"its handle.json is damaged too ({type(exc).__name__}: {exc}); end its processes by hand"
        backend.stop(handle)
        backend.end_nodes(handle)
    try:
        os.replace(directory / "run.json", directory / "run.json.damaged")
    except OSError:
        pass
    attempts, spec = [], {}
    if data is not None and handle is not None:
        attempts = [Attempt(n=int(data.get("attempt") or 1), features=[], reason="(rebuilt from handle.json)",
                            handle=handle, log=handle.log, ended=time.time())]
        try:
            spec = read_json(directory / f"attempt-{attempts[0].n}" / "scripts" / "plan.json", "plan").get("spec", {})
        except (RecordError, AttributeError):
            pass
    rebuilt = RunRecord(id=run_id, backend=data["backend"] if data else "unknown",
                        spec=spec if isinstance(spec, dict) else {}, state="stopped", attempts=attempts,
                        failure={"class": "damaged_record", "cause": f"run.json was damaged ({problem}); rebuilt when stopped",
                                 "fix": "the damaged file is kept as run.json.damaged", "decision": None})
    try:
        rebuilt.save()
    except OSError:
        pass
    if data is None:
        return "no attempt handle found: nothing had been started; recorded as stopped"
    return f"stopped attempt {attempts[0].n} from its handle file"
