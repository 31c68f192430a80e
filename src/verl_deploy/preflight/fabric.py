"""`check --fabric`: a real all-reduce across every device of every node, where the training will run.

verl's multi-node runs most often hang at the first collective: the wrong network interface
(HCCL/NCCL/GLOO pick one themselves unless *_SOCKET_IFNAME says which), a firewall between the
nodes, one busy or broken device. This runs preflight/fabric_probe.py with the run's python3 (in
its container when it has one; on the other nodes over the launch's SSH), one rank per device, with
the interface the run will use exported, and reads one JSON line per rank back. An interface that
does not exist on a node is said before anything starts. Bus bandwidth is reported per node; a node
far below the others, a rank that failed or never answered is named with the fix.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import time
from pathlib import Path

from verl_deploy.preflight.report import Area
from verl_deploy.spec import RunSpec

PROBE = Path(__file__).with_name("fabric_probe.py")
IFNAME_VARIABLES = ("HCCL_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
SLOW = 0.5  # a node below this share of the fastest node's bus bandwidth is called slow
MB, ITERS = 16.0, 5
STARTUP = 120  # seconds each rank may take to import torch (and torch_npu) before the collective's timeout starts


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def _on_node(spec: RunSpec, index: int, command: list[str]) -> list[str]:
    """argv running `command` on node `index` (0: this host), inside the run's container when it has one."""
    from verl_deploy.backends.nodes import ssh_options

    if spec.container:
        command = ["docker", "exec", "--", spec.container, *command]
    if index == 0:
        return command
    return ["ssh", *ssh_options(), "--", spec.nodes[index], " ".join(shlex.quote(part) for part in command)]


def _interfaces(spec: RunSpec, index: int) -> list[str] | None:
    try:
        done = subprocess.run(_on_node(spec, index, ["ls", "/sys/class/net"]), capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.split() if done.returncode == 0 else None


def _fix_for(error: str, node: str, device: int, kind: str, addr: str, port: int) -> str:
    lowered = error.lower()
    ifname = "/".join(IFNAME_VARIABLES)
    if any(word in lowered for word in ("busy", "in use", "out of memory", "resource", "device or resource")):
        tool = "npu-smi info" if kind == "npu" else "nvidia-smi"
        return f"device {device} on {node} is busy or unusable: see `{tool}` there and end what holds it, or leave it out (--devices)"
    if "no module named" in lowered:
        return (f"the python3 on {node}'s PATH (the one the training runs with) lacks that package: install it there, or "
                "pass --container with the run's container")
    if "unable to find address for" in lowered or "no address" in lowered:
        return (f"the interface given on {node} has no address the collective can use (down, or no IP): pass "
                f"--socket-ifname with the interface whose address reaches the other nodes (`ip -br addr`; exported "
                f"as {ifname})")
    if any(word in lowered for word in ("refused", "timed out", "timeout", "no answer", "connect", "unreachable",
                                        "no route", "address")):
        return (f"{node} could not reach the group at {addr}:{port}: open the ports between the nodes (the master port "
                f"and the ephemeral range; a firewall blocks them), check --master-addr, and pass --socket-ifname with "
                f"the interface that reaches the other nodes (exported as {ifname})")
    return f"see the error above; `verl-deploy check` on {node} shows its devices and software"


def fabric_area(spec: RunSpec, *, timeout: float = 120.0, mb: float = MB, iters: int = ITERS) -> Area:
    area = Area("fabric", "Fabric (all-reduce)")
    started = time.monotonic()
    nodes = spec.nodes if len(spec.nodes) > 1 else [socket.gethostname()]
    ifname = spec.socket_ifname
    for index, node in enumerate(nodes):
        if not ifname:
            break
        names = _interfaces(spec, index)
        if names is not None and ifname not in names:
            area.error("socket_ifname", f"the interface {ifname} does not exist on {node} (it has: {', '.join(names)})",
                       f"pass --socket-ifname with one of those (exported as {'/'.join(IFNAME_VARIABLES)})")
            return area
    addr = spec.master_addr if len(nodes) > 1 else "127.0.0.1"
    port = _free_port()
    env = {name: ifname for name in IFNAME_VARIABLES} if ifname else {}
    source = PROBE.read_text()
    launched = []
    for index, node in enumerate(nodes):
        args = {"node": node, "node_rank": index, "devices": list(spec.devices), "world": len(nodes) * len(spec.devices),
                "master_addr": addr, "master_port": port, "kind": spec.device, "backend": "auto", "mb": mb,
                "iters": iters, "timeout": int(timeout), "startup": STARTUP, "env": env}
        argv = _on_node(spec, index, ["python3", "-c", source, json.dumps(args)])
        try:
            launched.append((node, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                                    stdin=subprocess.DEVNULL, start_new_session=True)))
        except OSError as exc:
            area.error("fabric", f"{node}: the probe could not start: {exc}", "install python3 with torch where the training runs")
            return area
    ranks: list[dict] = []
    headers: dict[str, dict] = {}
    for node, process in launched:
        try:
            out, err = process.communicate(timeout=max(1.0, timeout + STARTUP + 30 - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            out, err = process.communicate()
        lines = [line for line in out.splitlines() if line.startswith("{")]
        for line in lines:
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if "rank" in data:
                ranks.append(data)
            else:
                headers[node] = data
        if not lines:
            last = (err.strip().splitlines() or [f"exit {process.returncode}"])[-1][:300]
            area.error("fabric", f"{node}: the probe did not run: {last}",
                       "the training's python3 needs torch (and torch_npu on NPUs) there")
    return _judge(area, spec, nodes, ranks, headers, addr, port, mb, iters, started)


def _judge(area: Area, spec: RunSpec, nodes: list[str], ranks: list[dict], headers: dict[str, dict], addr: str,
           port: int, mb: float, iters: int, started: float) -> Area:
    backends = {h.get("backend") for h in headers.values()}
    area.data = {"nodes": {}, "ranks": sorted(ranks, key=lambda r: r.get("rank", 0)), "master": f"{addr}:{port}",
                 "message_mb": mb, "iterations": iters, "seconds": round(time.monotonic() - started, 2)}
    for node, header in headers.items():
        if header.get("backend") == "gloo" and spec.device in ("npu", "gpu"):
            area.warning("backend", f"{node}: the all-reduce ran on CPU with gloo ({header.get('why')}): the "
                                    f"{spec.device.upper()}s themselves were not exercised",
                         "run check --fabric where the training's torch sees the devices (--container NAME)")
    failed = [r for r in ranks if not r.get("ok")]
    for rank in failed:
        node, device = rank.get("node", "?"), rank.get("device", "?")
        area.error("fabric", f"rank {rank.get('rank')} (device {device} on {node}): {rank.get('error')}",
                   _fix_for(str(rank.get("error")), node, device, spec.device, addr, port))
    if failed or not ranks:
        return area
    per_node: dict[str, list[float]] = {}
    for rank in ranks:
        per_node.setdefault(rank["node"], []).append(float(rank["busbw_gbps"]))
    best = max(min(values) for values in per_node.values())
    for node, values in per_node.items():
        slowest = min(values)
        header = headers.get(node, {})
        area.data["nodes"][node] = {"ranks": len(values), "busbw_gbps": round(slowest, 3), "python": header.get("python")}
        text = (f"{node}: {len(values)} rank(s), bus bandwidth {slowest:.2f} GB/s ({', '.join(sorted(b for b in backends if b))}, "
                f"{mb:g} MB x {iters})")
        if len(per_node) > 1 and slowest < SLOW * best:
            area.warning("fabric", text + f", under {SLOW:.0%} of the fastest node's {best:.2f} GB/s",
                         f"{node}'s traffic may take a slow interface: pass --socket-ifname with its fast NIC "
                         f"(exported as {'/'.join(IFNAME_VARIABLES)}), and check the link (`ethtool`, `hccn_tool`)")
        else:
            area.ok("fabric", text)
    return area
