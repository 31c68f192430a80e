"""The estimate as findings: what `plan`, `generate` and `launch` say about memory, one line each."""

from __future__ import annotations

from verl_deploy.findings import Finding, info, warning


def _where(estimate, phase: str) -> str:
    """'rollout' or 'actor_update in the trainer pool (8 devices per node)' in the split modes."""
    pool = estimate.pool(phase)
    if pool == "shared":
        return phase
    devices = estimate.pool_devices.get(pool)
    return f"{phase} in the {pool} pool" + (f" ({devices} devices per node)" if devices else "")


def _why(estimate, phase: str) -> str:
    if phase in estimate.observed:
        return estimate.observed[phase]
    if phase in estimate.phases and estimate.phase_gb(phase) > estimate.limit_gb:
        return f"needs {estimate.phase_gb(phase):.1f} GiB, more than the {estimate.limit_gb:.1f} GiB a device can hold"
    return (f"the rollout budget leaves {estimate.kv_left.gb:.1f} GiB of KV cache, one sequence needs "
            f"{estimate.kv_needed.gb:.1f} GiB")


def _does_not_fit(estimate) -> Finding:
    over = estimate.over()
    worst = max(over, key=lambda p: estimate.phase_gb(p) if p in estimate.phases else 0)
    needs = ", ".join(estimate.needs) or "more devices"
    if estimate.alternatives:
        needs += "; or without a new feature: " + ", ".join(estimate.alternatives)
    pools = sorted({estimate.pool(p) for p in over} - {"shared"})
    what = (f"the {' and the '.join(pools)} pool{'s' if len(pools) > 1 else ''} will not fit: " if pools else
            f"{', '.join(over)} will not fit: ")
    return warning("memory", f"the memory estimate says {what}{_where(estimate, worst)} {_why(estimate, worst)}",
                   f"{needs} (launch adds the memory features itself; `launch --no-estimate` to not)")


def _worst_step(estimate) -> Finding | None:
    """Fits at the typical step, not at the worst: say where it starts to run out of memory and what prevents it."""
    lengths = estimate.lengths
    if not estimate.tolerated or lengths is None:
        return None
    phase = max(estimate.tolerated, key=lambda p: estimate.phase_gb(p) if p in estimate.phases else 0)
    when = (f"once a micro-batch's responses average about {lengths.oom_response_len} tokens"
            if lengths.oom_response_len else "at the longest steps")
    fix = "dynamic_batch (each micro-batch then holds at most its token budget)"
    if estimate.worst_needs:
        fix += "; or " + ", ".join(estimate.worst_needs)
    return warning("memory", f"the memory estimate says the typical step fits ({lengths.typical_peak_gb:.1f} GiB with "
                             f"responses of {lengths.typical_response_len} tokens, {lengths.assumed}"
                             + (", the largest micro-batch holding one at the maximum" if not lengths.dynamic else "")
                             + "), the worst step "
                             f"does not: {_where(estimate, phase)} needs {estimate.phase_gb(phase):.1f} GiB at "
                             f"{lengths.max_response_len}-token responses; it runs out of memory {when}", fix)


def memory_findings(estimate, note: str) -> list[Finding]:
    if estimate is None:
        return [info("memory", f"no memory estimate: {note}", "pass --model-path to a directory with config.json")]
    found: list[Finding] = []
    if estimate.device.unknown_name:
        found.append(warning("device_name", estimate.device.unknown_name,
                             "pass --device-memory-gb N, the memory of one device in GB"))
    if estimate.seen_ran:
        found.append(info("memory", f"the memory estimate used the {estimate.seen_ran}",
                          "nothing to do (a change of lengths, batch, layout or features is a new configuration)"))
    if not estimate.fits:
        found.append(_does_not_fit(estimate))
    worst = _worst_step(estimate)
    if worst is not None:
        found.append(worst)
    if estimate.host_fits is False:
        found.append(warning("memory", f"host memory: about {estimate.host_gb_per_node:.0f} GiB per node with this "
                                       f"offload, the host has {estimate.host_total_gb:.0f} GiB",
                             "offload less, or use more nodes"))
    return found
