"""`attempt-N/handle.json`: what ends an attempt (backend, process group, job id, workers), kept beside the record.

Written when the attempt starts, small and separate from run.json, so `stop` can end the training
when run.json is damaged, and a supervisor can take over an attempt that `launch` started but was
killed before recording.
"""

from __future__ import annotations

from verl_deploy.runs.record import Attempt, RecordError, RunRecord, read_json, runs_dir, write_json
from verl_deploy.spec import RunSpec
from verl_deploy.textnumbers import int_or_none


def write_handle(record: RunRecord, spec: RunSpec, attempt: Attempt) -> None:
    """Beside the record, small: what `stop` needs to end this attempt even when run.json is damaged."""
    data = {"run": record.id, "attempt": attempt.n, "backend": record.backend,
            "backend_options": {k: v for k, v in record.backend_options.items() if k != "env"},
            "container": spec.container, "run_dir": spec.run_dir, "handle": attempt.handle.to_dict()}
    try:
        write_json(record.directory / f"attempt-{attempt.n}" / "handle.json", data)
    except OSError:
        pass  # a full disk: the record still has the handle


def latest_handle(run_id: str) -> dict | None:
    """The newest attempt's handle.json of a run (what survives a damaged run.json); its "handle" as a dict."""
    directory = runs_dir() / run_id
    numbered = []
    for path in directory.glob("attempt-*/handle.json"):
        suffix = path.parent.name.split("-", 1)[1]
        number = int_or_none(suffix, digits=9)
        if number is not None:
            numbered.append((number, path))
    for _, path in sorted(numbered, reverse=True):
        try:
            data = read_json(path, "handle file")
        except RecordError:
            continue
        if isinstance(data, dict) and isinstance(data.get("handle"), dict) and isinstance(data.get("backend"), str):
            return data
    return None
