"""Probe: Docker client and daemon, verl/Ascend containers and images, and the chosen container's devices."""

from __future__ import annotations

import json
import re

from verl_deploy.preflight.context import Context
from verl_deploy.preflight.report import Area

INTERESTING = re.compile(r"verl|ascend|vllm|mindspeed|cann", re.IGNORECASE)
NPU_MANAGEMENT = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
MIN_SHM = 16 << 30


def parse_json_lines(text: str) -> list[dict]:
    """`docker ps/images --format '{{json .}}'`: one object per line; other lines are skipped."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return rows


def image_ref(row: dict) -> str:
    repository, tag = row.get("Repository", "<none>"), row.get("Tag", "<none>")
    return repository if tag in ("", "<none>") else f"{repository}:{tag}"


def container_devices(inspect: dict) -> dict:
    """From `docker inspect`: NPU device nodes, GPU requests, privileged, shm, network."""
    host = inspect.get("HostConfig") or {}
    state = inspect.get("State") or {}
    return {
        **_device_access(host),
        "privileged": bool(host.get("Privileged")),
        "shm_bytes": host.get("ShmSize"),
        "network": host.get("NetworkMode"),
        "ipc": host.get("IpcMode"),
        "running": bool(state.get("Running")),
        "status": state.get("Status"),
        "image": (inspect.get("Config") or {}).get("Image"),
        "mounts": [{"source": m.get("Source"), "destination": m.get("Destination"), "rw": m.get("RW", True)}
                   for m in inspect.get("Mounts") or [] if isinstance(m, dict)],
    }


def _device_access(host: dict) -> dict:
    """The NPU device nodes, the NPU management nodes, and whether GPUs were requested (or the nvidia runtime)."""
    paths = [d.get("PathInContainer") or d.get("PathOnHost", "") for d in host.get("Devices") or []]
    gpu_requests = [r for r in host.get("DeviceRequests") or []
                    if any("gpu" in caps for caps in (r.get("Capabilities") or []))]
    return {
        "npu_devices": sorted((p for p in paths if re.fullmatch(r"/dev/davinci\d+", p)), key=lambda p: int(p[12:])),
        "npu_management": [p for p in NPU_MANAGEMENT if p in paths],
        "gpus": bool(gpu_requests) or host.get("Runtime") == "nvidia",
    }


def probe_docker(context: Context) -> Area:
    area = Area("docker", "Docker")
    host, spec = context.host, context.spec
    version = host.run(["docker", "version", "--format", "{{.Client.Version}}"])
    if version.missing:
        level = area.error if spec.container else area.info
        level("client", "docker not found on this host",
              "install Docker, or run verl-deploy inside the training container without --container")
        return area
    server = host.run(["docker", "info", "--format", "{{.ServerVersion}}"])
    if not server.ok or not server.stdout.strip():
        reason = (server.output.strip().splitlines() or ["no answer"])[-1][:200]
        level = area.error if spec.container else area.warning
        level("daemon", f"not reachable: {reason}",
              "start it (systemctl start docker) or check access to /var/run/docker.sock (docker group)")
        area.data = {"client": version.stdout.strip(), "daemon": None}
        return area
    area.ok("daemon", f"client {version.stdout.strip()}, server {server.stdout.strip()}")
    containers = [row for row in parse_json_lines(host.run(["docker", "ps", "-a", "--format", "{{json .}}"]).stdout)
                  if INTERESTING.search(row.get("Image", "") + " " + row.get("Names", ""))]
    images = [row for row in parse_json_lines(host.run(["docker", "images", "--format", "{{json .}}"]).stdout)
              if INTERESTING.search(row.get("Repository", ""))]
    area.data = {
        "client": version.stdout.strip(), "daemon": server.stdout.strip(),
        "containers": [{"name": c.get("Names"), "image": c.get("Image"), "state": c.get("State"),
                        "status": c.get("Status")} for c in containers],
        "images": [{"ref": image_ref(i), "id": i.get("ID"), "size": i.get("Size")} for i in images],
    }
    area.info("containers", ", ".join(f"{c.get('Names')} ({c.get('State')}, {c.get('Image')})" for c in containers)
              or "no verl/Ascend container")
    refs = [image_ref(i) for i in images]
    if spec.image in refs:
        area.ok("image", f"{spec.image} is here")
    else:
        area.info("image", (", ".join(refs) or "no verl/Ascend image") + f"; {spec.image} would be pulled",
                  f"docker pull {spec.image}")
    if spec.container:
        _judge_container(area, context)
    return area


def _judge_container(area: Area, context: Context) -> None:
    spec, name = context.spec, context.spec.container or ""  # called only when a container is named
    inspected = context.host.run(["docker", "inspect", "--", name])
    try:
        details = json.loads(inspected.stdout)[0] if inspected.ok else None
    except (ValueError, IndexError):
        details = None
    if details is None:
        area.warning("container", f"{name} does not exist yet; the host was probed instead",
                     f"`verl-deploy launch` (or `container create`) creates it from {spec.image}")
        return
    facts = container_devices(details)
    area.data["container"] = {"name": name, **facts}
    if not facts["running"]:
        area.warning("container", f"{name} is {facts['status']}; the host was probed instead",
                     f"`verl-deploy launch` starts it (docker start {name})")
    else:
        area.ok("container", f"{name} running ({facts['image']})")
    if spec.device == "npu":
        wanted = [f"/dev/davinci{i}" for i in spec.devices]
        if facts["privileged"]:
            area.ok("NPU devices", f"{name} is privileged: every NPU is visible")
        else:
            missing = [p for p in wanted if p not in facts["npu_devices"]] + \
                      [p for p in NPU_MANAGEMENT if p not in facts["npu_management"]]
            if missing:
                area.error("NPU devices", f"{name} lacks {', '.join(missing)}",
                           "recreate the container with --device for each of them (or --privileged)")
            else:
                area.ok("NPU devices", ", ".join(facts["npu_devices"] + facts["npu_management"]))
    elif not facts["gpus"]:
        area.error("GPUs", f"{name} was started without GPUs", "recreate it with --gpus all (or --runtime=nvidia)")
    shm = facts["shm_bytes"]
    if facts["ipc"] != "host" and shm is not None and shm < MIN_SHM:
        area.warning("shm", f"/dev/shm is {shm / (1 << 30):.1f} GiB (Ray keeps its object store there)",
                     "recreate the container with --shm-size=64g or --ipc=host")
    _judge_mounts(area, spec, facts["mounts"])
    if spec.nnodes > 1 and facts["network"] != "host":
        area.error("network", f"{name} uses network {facts['network']!r}; nodes must reach each other's ports",
                   "recreate the container with --net=host")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _judge_mounts(area: Area, spec, mounts: list[dict]) -> None:
    """The container's binds, and whether the checkpoints are on one at the same path.

    Checkpoints in the container's own layer vanish with it, and the host-side supervisor reads
    `latest_checkpointed_iteration.txt` at the same path to resume: both need a same-path bind."""
    area.info("mounts", ", ".join(f"{m['source']} -> {m['destination']}{'' if m['rw'] else ' (ro)'}" for m in mounts)
              or "none")
    ckpts = spec.effective_ckpts_dir
    same_path = [m for m in mounts if _under(ckpts, m["destination"]) and m["source"]
                 and ckpts.replace(m["destination"], m["source"], 1) == ckpts]
    if same_path and not same_path[0]["rw"]:
        area.error("checkpoints", f"{ckpts} is on a read-only mount", "mount it read-write")
    elif not same_path:
        area.warning("checkpoints", f"{ckpts} is not on a bind mount at the same path: checkpoints would stay in "
                     f"the container's layer (lost with it) where resume on OOM cannot find them",
                     f"recreate the container with -v {ckpts}:{ckpts} (or --mount), or pass --ckpts-dir under a mount")
    else:
        area.ok("checkpoints", f"{ckpts} on {same_path[0]['source']} (same path inside)")
