"""Probe: is a Ray cluster already running here, with which devices; are its ports free or reusable."""

from __future__ import annotations

import re

import psutil

from verl_deploy.preflight.context import Context
from verl_deploy.preflight.report import Area

RESOURCE = re.compile(r"^\s*([\d.]+(?:\s?[KMGTP]?i?B)?)/([\d.]+(?:\s?[KMGTP]?i?B)?)\s+(\S+)\s*$")
NODE = re.compile(r"^\s*(\d+)\s+node_[0-9a-f]+")
DASHBOARD_PORT = 8265


def parse_ray_status(text: str) -> dict:
    """`ray status` (both the `Usage:` and the `Total Usage:` layouts) -> nodes and resources."""
    section, nodes, resources = None, 0, {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.endswith(":") and not stripped.startswith("("):
            section = stripped[:-1].lower()
            continue
        node = NODE.match(line)
        if section in ("active", "healthy", "idle") and node:
            nodes += int(node.group(1))
        elif section in ("usage", "total usage"):
            match = RESOURCE.match(line)
            if match:
                used, total, name = match.groups()
                resources[name] = {"used": _number(used), "total": _number(total)}
    return {"nodes": nodes, "resources": resources}


def _number(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text  # memory sizes such as 2.58TiB stay as printed


def listeners(port: int) -> list[str]:
    """Processes listening on a TCP port of this host ("name (pid N)")."""
    found: list[str] = []
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return found
    for conn in connections:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            try:
                name = psutil.Process(conn.pid).name() if conn.pid else "?"
            except psutil.Error:
                name = "?"
            found.append(f"{name} (pid {conn.pid})" if conn.pid else name)
    return sorted(set(found))


def probe_ray(context: Context) -> Area:
    area = Area("ray", "Ray")
    spec = context.spec
    status = context.runner.run(["ray", "status"], timeout=max(context.timeout, 15))
    cluster = parse_ray_status(status.stdout) if status.ok else None
    area.data = {"running": bool(cluster and cluster["nodes"]), "cluster": cluster}
    if status.missing:
        area.info("ray", f"not installed ({context.runner.where})", "it comes with verl images; pip install 'ray[default]'")
    elif cluster and cluster["nodes"]:
        accel = "NPU" if spec.device == "npu" else "GPU"
        have = cluster["resources"].get(accel, {})
        total, used = have.get("total", 0) or 0, have.get("used", 0) or 0
        value = f"{cluster['nodes']} node(s), {used:g}/{total:g} {accel} in use"
        wanted = len(spec.devices) * spec.nnodes
        if total < wanted:
            area.warning("cluster", value + f"; the run needs {wanted} {accel}",
                         f"restart Ray with the devices (ray stop; ray start --head --resources='{{\"{accel}\": {len(spec.devices)}}}')"
                         if accel == "NPU" else "restart Ray with --num-gpus, or wait for the other nodes")
        elif used:
            area.warning("cluster", value, "another job holds devices: `ray job list`, or `ray stop` if it is a leftover")
        else:
            area.ok("cluster", value + " — will be reused")
    else:
        area.ok("cluster", f"none running ({context.runner.where}); the scripts start one")
    for port, label in ((spec.ray_port, "GCS port"), (DASHBOARD_PORT, "dashboard port")):
        users = listeners(port)
        if not users:
            area.ok(label, f"{port} free")
        elif area.data["running"] or any(u.startswith(("gcs_server", "raylet", "ray::", "dashboard")) for u in users):
            area.info(label, f"{port} used by {', '.join(users)} (Ray)")
        else:
            area.error(label, f"{port} is used by {', '.join(users)}",
                       "stop it, or choose another port (ray_port in the config file)" if port == spec.ray_port
                       else "stop it")
    return area
