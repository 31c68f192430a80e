"""The end of a run in three parts: the cause, the evidence line, and the step that really comes next.

Generic advice ("a larger TP/PP") after an OOM the ladder never got to the end of is wrong: the next
step is the rung not tried yet. Each end names one command to copy — `verl-deploy resume RUN ...`
resumes the same run from its newest complete checkpoint, with what the step changes.
"""

from __future__ import annotations

from verl_deploy.runs.record import RunRecord


def _evidence(failure: dict) -> str | None:
    lines = failure.get("lines") or []
    first = lines[0] if lines and isinstance(lines[0], dict) else None
    if first:
        return f"line {first.get('line')}: {first.get('text')}" if first.get("line") else str(first.get("text"))
    return None


def _features_on(record: RunRecord) -> set[str]:
    attempt = record.current
    if attempt is None:
        return set()
    if attempt.features_on:
        return set(attempt.features_on)
    spec = record.spec
    return {*spec.get("features", []), *spec.get("oom_features", []), *spec.get("estimate_features", [])}


def _oom_step(record: RunRecord) -> tuple[str, str]:
    """The rung of the ladder not tried yet, else fewer tokens per device."""
    from verl_deploy import features as registry

    spec = record.spec
    framework, device = spec.get("framework", "megatron"), spec.get("device", "npu")
    on = _features_on(record)
    ladder = registry.oom_ladder(framework)
    for name in ladder:
        feature = registry.BY_NAME.get(name)
        if feature is not None and feature.applies_to(framework, device) and name not in on:
            return (f"add {name}, the next rung of the OOM ladder (not tried yet)",
                    f"verl-deploy resume {record.id} --features {name}")
    length = int(spec.get("max_response_length") or 0)
    if length >= 1024:
        return (f"every memory feature of the ladder ({', '.join(ladder)}) was on: give each device fewer tokens "
                f"(max_response_length {length} -> {length // 2}), or more devices / a larger TP/PP in a new launch",
                f"verl-deploy resume {record.id} --max-response-length {length // 2}")
    return (f"every memory feature of the ladder ({', '.join(ladder)}) was on: more devices or a larger TP/PP "
            "(a new launch with --train-tp/--train-pp and its own --ckpts-dir)",
            f"verl-deploy launch --dry-run --json   # with the run's flags and a larger --train-tp")


def _kv_step(record: RunRecord) -> tuple[str, str]:
    from verl_deploy.runs.recovery import MIN_UTILIZATION, UTILIZATION_STEP

    now = float(record.spec.get("gpu_memory_utilization") or 0.6)
    lowered = round(now - UTILIZATION_STEP, 2)
    if lowered >= MIN_UTILIZATION:
        return (f"lower the rollout's gpu_memory_utilization {now} -> {lowered}",
                f"verl-deploy resume {record.id} --gpu-memory-utilization {lowered}")
    length = int(record.spec.get("max_response_length") or 0)
    return (f"gpu_memory_utilization is at {now} already: shorten the sequences",
            f"verl-deploy resume {record.id} --max-response-length {max(256, length // 2)}")


def end_of_run(record: RunRecord) -> dict | None:
    """{state, cause, evidence, next, command} for a run that ended (None while it goes on)."""
    from verl_deploy.runs.record import TERMINAL

    if record.state not in TERMINAL:
        return None
    if record.state == "succeeded":
        total = f"/{record.total_steps}" if record.total_steps else ""
        return {"state": "succeeded", "cause": f"the training reached its end (step {record.step}{total})",
                "evidence": None, "next": "look at the results: metrics, plots, attempts",
                "command": f"verl-deploy report {record.id}"}
    if record.state == "stopped":
        return {"state": "stopped", "cause": "stopped by `verl-deploy stop`; checkpoints kept", "evidence": None,
                "next": "resume it from its newest complete checkpoint", "command": f"verl-deploy resume {record.id}"}
    failure = record.failure or {}
    kind = failure.get("class") or "unknown_failure"
    cause = f"{kind}: {failure.get('cause') or failure.get('decision') or 'see the log'}"
    if kind == "device_oom":
        what, command = _oom_step(record)
    elif kind == "rollout_kv_cache_insufficient":
        what, command = _kv_step(record)
    elif kind == "host_oom" and "offload" in _features_on(record) and "offload" not in record.spec.get("features", []):
        what, command = ("host memory ran out with offload on (this tool added it): drop offload",
                         f"verl-deploy resume {record.id} --features -offload")
    else:
        fix = failure.get("fix") or "read `verl-deploy logs RUN --errors`"
        what, command = f"{fix}; then resume from the newest complete checkpoint", f"verl-deploy resume {record.id}"
    return {"state": "failed", "cause": cause, "evidence": _evidence(failure), "next": what, "command": command}


def end_lines(record: RunRecord) -> list[str]:
    """The end as a person reads it (launch --follow, the supervisor's log, notices)."""
    end = end_of_run(record)
    if end is None:
        return []
    lines = [f"run {record.id} {end['state']}: {end['cause']}"]
    if end["evidence"]:
        lines.append(f"evidence: {end['evidence']}")
    lines.append(f"next: {end['next']}")
    lines.append(f"  {end['command']}")
    return lines
