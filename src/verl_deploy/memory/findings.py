"""The estimate as findings: what `plan`, `generate` and `launch` say about memory, one line each."""

from __future__ import annotations

from verl_deploy.findings import Finding, info, warning


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
        over = estimate.over()
        worst = max(over, key=lambda p: estimate.phase_gb(p) if p in estimate.phases else 0)
        why = estimate.observed.get(worst) or (
            f"needs {estimate.phase_gb(worst):.1f} GiB, more than the {estimate.limit_gb:.1f} GiB a device can hold"
            if estimate.phase_gb(worst) > estimate.limit_gb else
            f"the rollout budget leaves {estimate.kv_left.gb:.1f} GiB of KV cache, one sequence needs "
            f"{estimate.kv_needed.gb:.1f} GiB")
        needs = ", ".join(estimate.needs) or "more devices"
        if estimate.alternatives:
            needs += "; or without a new feature: " + ", ".join(estimate.alternatives)
        found.append(warning("memory", f"the memory estimate says {', '.join(over)} will not fit: {worst} {why}",
                             f"{needs} (launch adds the memory features itself; --no-estimate to not)"))
    if estimate.host_fits is False:
        found.append(warning("memory", f"host memory: about {estimate.host_gb_per_node:.0f} GiB per node with this "
                                       f"offload, the host has {estimate.host_total_gb:.0f} GiB",
                             "offload less, or use more nodes"))
    return found
