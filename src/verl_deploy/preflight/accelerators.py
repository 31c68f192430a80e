"""Probe: which NPUs or GPUs are here, their health, memory and who is using them."""

from __future__ import annotations

from verl_deploy.preflight.commands import Result
from verl_deploy.preflight.context import Context
from verl_deploy.preflight.devices import (QUERY_ARGS, DeviceTable, dcmi_error, parse_npu_smi, parse_nvidia_csv,
                                           parse_nvidia_smi)
from verl_deploy.preflight.report import Area

NPU_FIX = ("on an Ascend host install the driver (npu-smi comes with it); in a container mount it: "
           "-v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi -v /usr/local/dcmi:/usr/local/dcmi "
           "-v /usr/local/Ascend/driver/lib64/:/usr/local/Ascend/driver/lib64/ plus the /dev/davinci* devices")
DCMI_FIX = ("start the container with --device /dev/davinciN for each NPU plus /dev/davinci_manager, /dev/devmm_svm, "
            "/dev/hisi_hdc (or --privileged), make sure no other container holds the NPUs, then `source ~/.bashrc`")


def _npu(context: Context) -> tuple[DeviceTable | None, str | None, Result]:
    result = context.runner.run(["npu-smi", "info"])
    dcmi = dcmi_error(result.output)
    if dcmi:
        return None, dcmi, result
    problem = result.problem(context.runner.timeout)
    if problem:
        return None, problem, result
    table = parse_npu_smi(result.stdout)
    if not table.devices:
        first = next((line for line in result.output.splitlines() if line.strip()), "")
        return None, f"npu-smi printed no device table ({first[:120]!r})", result
    return table, None, result


def _gpu(context: Context) -> tuple[DeviceTable | None, str | None, Result]:
    result = context.runner.run(["nvidia-smi"])
    problem = result.problem(context.runner.timeout)
    if problem:
        return None, problem, result
    table = parse_nvidia_smi(result.stdout)
    if not table.devices:  # an unfamiliar table layout: ask for CSV, which does not change
        query = context.runner.run(["nvidia-smi", *QUERY_ARGS])
        if query.ok:
            csv_table = parse_nvidia_csv(query.stdout)
            csv_table.driver_version = table.driver_version
            table = csv_table
    if not table.devices:
        return None, "nvidia-smi listed no GPU", result
    return table, None, result


def describe_device(device) -> str:
    memory = (f"HBM {device.hbm_used_mb}/{device.hbm_total_mb} MB" if device.hbm_total_mb else "memory unknown")
    if device.processes:
        users = ", ".join(f"pid {p.pid}" + (f" {p.name}" if p.name else "") +
                          (f" {p.memory_mb} MB" if p.memory_mb is not None else "") for p in device.processes)
        return f"{device.name}, {memory}, busy: {users}"
    return f"{device.name}, {memory}, idle"


def probe_accelerators(context: Context) -> Area:
    """The accelerators npu-smi / nvidia-smi report (the kind asked for, else whichever answers), each judged."""
    area = Area("accelerators", "Accelerators")
    wanted: str | None = context.spec.device if context.given("device") else None
    kinds: list[str] = [wanted] if wanted else ["npu", "gpu"]
    found, problems = _device_tables(context, kinds)
    kind: str = wanted or next(iter(found), "")
    table = found.get(kind) if kind else None
    if table is None:
        for failed_kind, problem in problems.items():
            fix = DCMI_FIX if "DCMI" in problem else (NPU_FIX if failed_kind == "npu" else
                                                      "install the NVIDIA driver; in a container start it with --gpus all")
            level = area.error if (wanted or len(problems) == len(kinds)) else area.info
            level("npu-smi" if failed_kind == "npu" else "nvidia-smi", f"{problem} ({context.runner.where})", fix)
        area.data = {"kind": wanted, "devices": []}
        return area
    tool = "npu-smi" if kind == "npu" else "nvidia-smi"
    version = f" {table.driver_version}" if table.driver_version else ""
    area.ok(tool, f"{len(table.devices)} {kind.upper()}{'s' if len(table.devices) != 1 else ''} ({tool}{version}, "
                  f"{context.runner.where})")
    _judge_each(area, kind, tool, table)
    area.data = table.as_dict()
    return area


def _device_tables(context: Context, kinds: list[str]) -> tuple[dict[str, DeviceTable], dict[str, str]]:
    """kind -> its device table, and kind -> why its tool gave none."""
    found: dict[str, DeviceTable] = {}
    problems: dict[str, str] = {}
    for kind in kinds:
        table, problem, _ = (_npu if kind == "npu" else _gpu)(context)
        if table:
            found[kind] = table
        elif problem:
            problems[kind] = problem
    return found, problems


def _judge_each(area: Area, kind: str, tool: str, table: DeviceTable) -> None:
    """One row per device: unhealthy is an error, busy a warning (with who holds it), else ok."""
    for device in table.devices:
        label = f"{kind.upper()} {device.id}"
        if kind == "npu" and device.chip is not None and any(d.chip for d in table.devices):
            label += f" (NPU {device.npu} chip {device.chip})"
        if not device.healthy:
            area.error(label, f"health {device.health}: {describe_device(device)}",
                       f"check `{tool}` and the driver logs; leave this device out with --devices")
        elif device.busy:
            area.warning(label, describe_device(device),
                         "stop those processes (a previous run? `ray stop --force`) or leave this device out with --devices")
        else:
            area.ok(label, describe_device(device))


def judge_devices(area: Area, requested: list[int], explicit: bool) -> None:
    """Requested device ids against what was found: missing, unhealthy, busy."""
    devices = {d["id"]: d for d in area.data.get("devices", [])}
    if not devices:
        return
    missing = [i for i in requested if i not in devices]
    if missing:
        area.error("devices", f"requested {','.join(map(str, missing))} but this host has "
                   f"{','.join(map(str, sorted(devices)))}",
                   f"pass --devices with ids from {min(devices)}-{max(devices)}")
    bad = [i for i in requested if i in devices and not _healthy(devices[i])]
    if bad:
        area.error("devices", f"requested device(s) {','.join(map(str, bad))} are not healthy",
                   "leave them out with --devices")
    busy = [i for i in requested if i in devices and devices[i]["busy"]]
    if busy:
        area.error("devices", f"requested device(s) {','.join(map(str, busy))} are in use by other processes",
                   "stop them, or choose free devices" + _free_devices(devices))
    if not (missing or bad or busy):
        area.ok("devices", f"requested {','.join(map(str, requested))}: present, healthy, free"
                + ("" if explicit else " (all detected)"))


def _healthy(device: dict) -> bool:
    return device["health"].upper() == "OK"


def _free_devices(devices: dict[int, dict]) -> str:
    """": --devices 2,3" naming the healthy idle devices, or "" when there are none."""
    free = [i for i, d in sorted(devices.items()) if not d["busy"] and _healthy(d)]
    return f": --devices {','.join(map(str, free))}" if free else ""
