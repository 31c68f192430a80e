"""`launch --rehearse`: a short run on the same hardware, container, model, layout and features first.

What fails 40 minutes in (the first weight sync, the first checkpoint, the resume) fails in the
rehearsal within minutes: at most 3 steps at a quarter of the prompt and response lengths, in two
runs of their own: the first trains to step 2 (1 when the real run has fewer than 3 steps) and saves
one checkpoint; the second resumes from it and trains the last step without saving. Its checkpoints
go to a folder of their own beside the real ones (the real run never resumes from them), with no OOM
retries (an OOM at a quarter of the lengths is the real run's OOM). Only when both end well does the
real run start; otherwise the failure is diagnosed like any run's and the real run never starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from verl_deploy.runs.record import RunRecord, new_run_id, reload
from verl_deploy.spec import RunSpec

MAX_STEPS = 3
LENGTH_SHARE = 4  # prompt and response lengths are divided by this
MIN_LENGTH = 16  # RunSpec's lower bound


class RehearsalFailed(Exception):
    def __init__(self, message: str, fix: str, record: RunRecord | None = None):
        super().__init__(message)
        self.fix, self.record = fix, record


@dataclass
class Rehearsal:
    runs: list[RunRecord] = field(default_factory=list)
    changes: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"changes": self.changes, "runs": [{"id": r.id, "state": r.state, "step": r.step,
                                                   "resumed_from_step": r.attempts[0].resumed_from_step if r.attempts else None}
                                                  for r in self.runs]}


def rehearsal_changes(spec: RunSpec, folder: str | None = None) -> dict:
    """What the rehearsal changes in the spec (the part that saves; the resume part trains to `train_steps`)."""
    total = min(MAX_STEPS, spec.train_steps or MAX_STEPS)
    prompt = max(MIN_LENGTH, spec.max_prompt_length // LENGTH_SHARE)
    response = max(MIN_LENGTH, spec.max_response_length // LENGTH_SHARE)
    changes: dict = {"train_steps": total, "save_step": max(1, total - 1), "max_prompt_length": prompt,
                     "max_response_length": response, "max_oom_retries": 0, "val_before_train": False,
                     "experiment_name": f"{spec.effective_experiment_name}-rehearsal",
                     "ckpts_dir": folder or f"{spec.effective_ckpts_dir.rstrip('/')}-rehearsal/<run id>"}
    if spec.overlong_buffer_len is not None and spec.overlong_buffer_len >= response:
        changes["overlong_buffer_len"] = max(1, response // 4)
    return changes


def _part(spec: RunSpec, changes: dict, *, steps: int, save_freq: int) -> RunSpec:
    values = {k: v for k, v in changes.items() if k not in ("save_step", "train_steps")}
    return spec.with_changes(source="rehearsal", train_steps=steps, save_freq=save_freq, **values)


def _wait(record: RunRecord, timeout: float) -> RunRecord:
    import time

    from verl_deploy.runs.supervisor import ensure_supervised
    from verl_deploy.runs.record import TERMINAL

    deadline = time.monotonic() + timeout
    while record.state not in TERMINAL:
        if time.monotonic() > deadline:
            raise RehearsalFailed(f"the rehearsal run {record.id} did not end within {timeout:g} s",
                                  f"see `verl-deploy status {record.id}`; stop it with `verl-deploy stop {record.id}`",
                                  record)
        time.sleep(0.5)
        record = ensure_supervised(reload(record))
    return record


def _failed(record: RunRecord, what: str) -> RehearsalFailed:
    failure = record.failure or {}
    cause = failure.get("cause") or f"it ended {record.state} at step {record.step}"
    kind = f"{failure['class']}: " if failure.get("class") else ""
    return RehearsalFailed(f"the rehearsal ({what}, run {record.id}) failed: {kind}{cause}; the real run was not started",
                           (failure.get("fix") or f"`verl-deploy logs {record.id} --errors`") +
                           f" (`verl-deploy status {record.id}`, `verl-deploy bundle {record.id}`)", record)


def rehearse(spec: RunSpec, *, start: Callable[[RunSpec], RunRecord], say: Callable[[str], None],
             timeout: float = 3600) -> Rehearsal:
    """Run both parts with `start` (runs/launch.launch with the real run's backend); RehearsalFailed on any failure."""
    folder = f"{spec.effective_ckpts_dir.rstrip('/')}-rehearsal/{new_run_id()}"
    changes = rehearsal_changes(spec, folder)
    result = Rehearsal(changes=changes)
    save_step, total = changes["save_step"], changes["train_steps"]
    say(f"rehearsal: {total} step(s) at prompt/response lengths {changes['max_prompt_length']}/"
        f"{changes['max_response_length']}, checkpoints in {folder}")
    first = _wait(start(_part(spec, changes, steps=save_step, save_freq=save_step)), timeout)
    result.runs.append(first)
    if first.state != "succeeded":
        raise _failed(first, f"training to step {save_step} and saving")
    if first.last_checkpoint_step != save_step:
        raise RehearsalFailed(f"the rehearsal (run {first.id}) ended but saved no checkpoint of step {save_step}; the real "
                              "run was not started", f"`verl-deploy logs {first.id} --errors`", first)
    say(f"rehearsal: step {save_step} trained and saved (run {first.id})")
    if total <= save_step:
        say("rehearsal: one step only, nothing to resume")
        return result
    second = _wait(start(_part(spec, changes, steps=total, save_freq=-1)), timeout)
    result.runs.append(second)
    if second.state != "succeeded":
        raise _failed(second, f"resuming from step {save_step}")
    resumed = second.attempts[0].resumed_from_step if second.attempts else None
    if resumed != save_step:
        raise RehearsalFailed(f"the rehearsal's resume (run {second.id}) started from {resumed}, not the checkpoint of "
                              f"step {save_step}; the real run was not started",
                              f"`verl-deploy logs {second.id}`: resume_mode and the checkpoint folder", second)
    say(f"rehearsal: resumed from step {save_step} and trained step {total} (run {second.id}): the real run starts")
    return result
