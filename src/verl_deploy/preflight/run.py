"""Run every probe in parallel, turn what they found into detected values, then judge the chosen run.

Two stages. First the probes that need nothing chosen (devices, network, Docker, Ray, SwanLab,
package versions, model and dataset candidates) run side by side; their facts fill in the values
the user left at their defaults (the detected layer of the sources). Then the checks that
depend on those choices (requested devices, the chosen model and datasets, disk for checkpoints,
package fit) run, again side by side, against the spec with the detected layer in it.
"""

from __future__ import annotations

import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from verl_deploy.findings import Finding
from verl_deploy.preflight import accelerators, containers, datasets, host, models, ray_cluster, software
from verl_deploy.preflight.commands import ContainerRunner, Runner
from verl_deploy.preflight.context import SEARCH_ROOTS, Context
from verl_deploy.preflight.report import Area, finding_dict
from verl_deploy.profiles import Profile, profile_for
from verl_deploy.spec import RunSpec

ORDER = ("accelerators", "ascend", "software", "stack", "docker", "models", "datasets", "network", "ray", "disk", "swanlab",
         "verify", "storage", "fabric")


@dataclass
class CheckResult:
    spec: RunSpec
    areas: dict[str, Area]
    detected: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def findings(self) -> list[Finding]:
        return [f for area_id in ORDER if area_id in self.areas for f in self.areas[area_id].findings()]

    @property
    def ok(self) -> bool:
        return not any(f.level == "error" for f in self.findings)

    def given_fields(self) -> set[str]:
        """Fields the user chose (flag, env, file): not probed this time."""
        return {name for name, source in self.spec.sources.items() if source not in ("default", "detected", "derived")}

    def verdict(self) -> str:
        errors = sum(f.level == "error" for f in self.findings)
        warnings = sum(f.level == "warning" for f in self.findings)
        accel = self.areas["accelerators"].data
        free = [d for d in accel.get("devices", []) if d["id"] in self.spec.devices and not d["busy"]]
        kind = (accel.get("kind") or self.spec.device).upper()
        if errors:
            return f"not ready: {errors} error(s), {warnings} warning(s)"
        devices = f"{len(free)} {kind}{'s' if len(free) != 1 else ''} free" if accel.get("devices") else "no devices seen"
        return f"ready: {devices}" + (f", {warnings} warning(s)" if warnings else "") + f" ({self.seconds:.1f} s)"

    def as_dict(self) -> dict:
        accel = self.areas["accelerators"].data
        return {
            "ok": self.ok,
            "verdict": self.verdict(),
            "accelerators": {"kind": accel.get("kind"), "driver_version": accel.get("driver_version"),
                             "devices": accel.get("devices", [])},
            "areas": {area_id: {"title": area.title, "status": area.status, "seconds": round(area.seconds, 3),
                                "rows": [row.__dict__ for row in area.rows], "data": area.data}
                      for area_id, area in self.areas.items()},
            "detected": self.detected,
            "findings": [finding_dict(f) for f in self.findings],
            "seconds": round(self.seconds, 3),
        }


def _timed(area_id: str, title: str, probe: Callable[[], Area]) -> Area:
    started = time.monotonic()
    try:
        area = probe()
    except Exception as exc:  # a probe bug must not hide the other areas' answers
        area = Area(area_id, title)
        area.error("probe", f"the {title.lower()} probe failed: {type(exc).__name__}: {exc}",
                   "please report this; the other areas are still valid")
    area.seconds = time.monotonic() - started
    return area


def _parallel(jobs: dict[str, tuple[str, Callable[[], Area]]]) -> dict[str, Area]:
    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
        futures = {area_id: pool.submit(_timed, area_id, title, probe) for area_id, (title, probe) in jobs.items()}
        return {area_id: future.result() for area_id, future in futures.items()}


def _pick(candidates: list[str], default: str, hints: tuple[str, ...]) -> str | None:
    base = os.path.basename(default.rstrip("/")).lower()
    for test in (lambda c: os.path.basename(c).lower() == base,
                 *[(lambda h: (lambda c: h in os.path.basename(c).lower()))(h) for h in hints]):
        match = next((c for c in candidates if test(c)), None)
        if match:
            return match
    return None


def detect(context: Context, areas: Mapping[str, Area], versions: Mapping[str, Any]) -> dict[str, Any]:
    """Values for the fields the user left at their defaults, from what the probes found."""
    found = _from_accelerators(context, areas["accelerators"].data)
    found.update(_from_network(context, areas["network"].data))
    found.update(_from_files(context, areas))
    verl = versions.get("verl")
    if verl and verl != "present" and not context.given("verl_version"):
        version = software.release(verl)
        if isinstance(profile_for(version), Profile):  # a release this tool plans (else the default stays)
            found["verl_version"] = version
    nccl_version = _nccl_version(versions)
    # the Python that runs the training: the running container's, or this host's when no container is named
    trains_here = isinstance(context.runner, ContainerRunner) or not context.spec.container
    if nccl_version and trains_here and found.get("device", context.spec.device) == "gpu" \
            and not context.given("nccl_version"):
        found["nccl_version"] = nccl_version
    return found


def _nccl_version(versions: Mapping[str, Any]) -> str | None:
    """The NCCL the training's torch loads: the nvidia-nccl-cu12 wheel's release, else the one a PyPI torch wheel
    pins (a torch with a local build tag, e.g. NGC's 2.6.0a0+...nv25.01, brings its own NCCL: unknown)."""
    from verl_deploy.memory.nccl import nccl_for_torch, parse_version, version_text

    wheel = parse_version(versions.get("nccl"))
    if wheel:
        return version_text(wheel)
    torch = str(versions.get("torch") or "")
    pinned = nccl_for_torch(torch) if re.fullmatch(r"\d+\.\d+\.\d+(\+cu\d+)?", torch) else None
    return version_text(pinned) if pinned else None


def _from_accelerators(context: Context, accel: Mapping[str, Any]) -> dict[str, Any]:
    """The device kind, the usable device ids (healthy and free, else all), their memory and name, A2 or A3."""
    found: dict[str, Any] = {}
    if not accel.get("devices"):
        return found
    if not context.given("device") and accel.get("kind"):
        found["device"] = accel["kind"]
    if not context.given("devices"):
        usable = [d["id"] for d in accel["devices"] if d["health"].upper() == "OK" and not d["busy"]]
        found["devices"] = usable or [d["id"] for d in accel["devices"]]
    found.update(_device_memory(context, accel["devices"]))
    if accel.get("kind") == "npu" and not context.given("npu_type"):
        # A3 (Atlas 800T A3) shows two chips per NPU; an A2 (910B) one
        found["npu_type"] = "a3" if any(d.get("chip") == 1 for d in accel["devices"]) else "a2"
    return found


def _from_network(context: Context, network: Mapping[str, Any]) -> dict[str, Any]:
    """The interface for HCCL/NCCL/GLOO and, on several nodes, this host's address as the head's."""
    found: dict[str, Any] = {}
    if not context.given("socket_ifname") and network.get("suggested_ifname"):
        found["socket_ifname"] = network["suggested_ifname"]
    if context.spec.nnodes > 1 and not context.given("master_addr") and network.get("suggested_master_addr"):
        found["master_addr"] = network["suggested_master_addr"]
    return found


def _from_files(context: Context, areas: Mapping[str, Area]) -> dict[str, Any]:
    """A model directory and train/test parquet files found on this host, where the default path is absent."""
    spec, found = context.spec, {}
    wanted = (("model_path", areas["models"].data.get("candidates", []), ("qwen3-8b", "qwen")),
              ("train_file", areas["datasets"].data.get("candidates", []), ("dapo", "train")),
              ("test_file", areas["datasets"].data.get("candidates", []), ("aime", "test", "val")))
    for name, candidates, hints in wanted:
        if not context.given(name) and not context.runner.exists(getattr(spec, name)):
            pick = _pick(candidates, getattr(spec, name), hints)
            if pick:
                found[name] = pick
    return found


def _device_memory(context: Context, devices: list[dict]) -> dict[str, Any]:
    """The memory estimate's device facts: the smallest device's HBM, its name, this host's RAM."""
    import psutil

    found: dict[str, Any] = {}
    totals = [d["hbm_total_mb"] for d in devices if isinstance(d.get("hbm_total_mb"), int) and d["hbm_total_mb"] > 0]
    if totals and not context.given("device_memory_gb"):
        found["device_memory_gb"] = round(min(totals) / 1024, 2)
    names = [str(d.get("name") or "") for d in devices if d.get("name")]
    if names and not context.given("device_name"):
        found["device_name"] = names[0][:100]
    if not context.given("host_memory_gb"):
        found["host_memory_gb"] = round(psutil.virtual_memory().total / 2 ** 30, 1)
    return found


INSIDE_CONTAINER = ("software", "ascend", "stack")  # areas about the environment the training runs in


def _host_stands_in(areas: dict[str, Area], container: str) -> None:
    """The container is stopped or not made yet: what the host lacks is not what the container lacks.

    Its errors become warnings that say so, instead of blocking a launch that would start the container."""
    for area_id in INSIDE_CONTAINER:
        for row in areas[area_id].rows if area_id in areas else ():
            if row.status == "error":
                row.status = "warning"
                row.value = f"{row.value} [host; container {container} is not running, not checked inside]"
                row.fix = f"`docker start {container}` then `verl-deploy check --container {container}`; else: {row.fix}"


def run_check(resolve_spec: Callable[[Mapping[str, Any]], RunSpec], *, search_roots: list[str] | None = None,
              timeout: float = 10.0) -> CheckResult:
    """`resolve_spec(detected)` builds the spec from every source plus the detected layer."""
    started = time.monotonic()
    spec = resolve_spec({})
    host_runner = Runner(timeout)
    runner = host_runner
    if spec.container:  # probe inside it when it runs; a stopped or future container: the host stands in
        running = host_runner.run(["docker", "inspect", "-f", "{{.State.Running}}", "--", spec.container])
        if running.ok and running.stdout.strip() == "true":
            runner = ContainerRunner(spec.container, timeout)
    context = Context(spec, runner, host_runner, list(search_roots or SEARCH_ROOTS), timeout)
    versions_box: dict[str, Any] = {}

    def versions_probe() -> Area:
        versions_box["versions"], versions_box["problem"] = software.collect_versions(context)
        return Area("software", "Python packages")

    first = _parallel({
        "accelerators": ("Accelerators", lambda: accelerators.probe_accelerators(context)),
        "docker": ("Docker", lambda: containers.probe_docker(context)),
        "network": ("Network", lambda: host.probe_network(context)),
        "ray": ("Ray", lambda: ray_cluster.probe_ray(context)),
        "swanlab": ("SwanLab", lambda: host.probe_swanlab(context)),
        "models": ("Models", lambda: models.probe_model_candidates(context)),
        "datasets": ("Datasets", lambda: datasets.probe_dataset_candidates(context)),
        "software": ("Python packages", versions_probe),
    })
    versions = versions_box.get("versions", {})
    detected = detect(context, first, versions)
    final = resolve_spec(detected)
    context = Context(final, runner, host_runner, context.search_roots, timeout)
    accelerators.judge_devices(first["accelerators"], final.devices, context.given("devices"))

    def model_and_disk() -> Area:
        facts = models.judge_model(first["models"], context)
        return host.probe_disk(context, facts.get("parameters"))

    def datasets_judge() -> Area:
        datasets.judge_datasets(first["datasets"], context)
        return first["datasets"]

    second_jobs = {
        "software": ("Python packages", lambda: software.probe_packages(context, versions, versions_box.get("problem"))),
        "disk": ("Disk", model_and_disk),
        "datasets": ("Datasets", datasets_judge),
    }
    if final.device == "npu":
        second_jobs["ascend"] = ("Ascend software", lambda: software.probe_ascend(context))
    second = _parallel(second_jobs)
    second["software"].seconds += first["software"].seconds
    second["datasets"].seconds += first["datasets"].seconds
    areas = {**first, **second}
    if final.device == "npu":
        from verl_deploy.preflight.stack import judge_stack

        areas["stack"] = judge_stack(final.verl_version, versions, second["ascend"].data.get("cann_version"))
    if spec.container and runner is host_runner:
        _host_stands_in(areas, spec.container)
    ordered = {area_id: areas[area_id] for area_id in ORDER if area_id in areas}
    return CheckResult(final, ordered, detected, time.monotonic() - started)
