"""Probes of this host itself: network interfaces, free disk for checkpoints, SwanLab reachability."""

from __future__ import annotations

import os
import shutil
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import psutil

from verl_deploy.preflight.context import Context
from verl_deploy.preflight.report import Area

SWANLAB_CLOUD = "https://swanlab.cn"
# Bytes a Megatron/FSDP checkpoint takes per parameter with optimizer state: bf16 weights (2) plus
# fp32 master weights and Adam moments (12), rounded down for sharding overlap. Qwen3-8B -> ~100 GB.
CHECKPOINT_BYTES_PER_PARAM = 12


def default_route_interface(route_file: str = "/proc/net/route") -> str | None:
    """The interface of the default route (Linux), the one other nodes most likely reach us on."""
    try:
        lines = Path(route_file).read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and fields[1] == "00000000" and fields[2] != "00000000":
            return fields[0]
    for line in lines:
        fields = line.split()
        if len(fields) >= 2 and fields[1] == "00000000":
            return fields[0]
    return None


def interfaces() -> dict[str, list[str]]:
    """Interface -> its IPv4 addresses (the `hostname -I` view, per interface)."""
    found: dict[str, list[str]] = {}
    for name, addresses in psutil.net_if_addrs().items():
        ipv4 = [a.address for a in addresses if a.family == socket.AF_INET]
        if ipv4:
            found[name] = ipv4
    return found


def probe_network(context: Context) -> Area:
    area = Area("network", "Network")
    spec = context.spec
    found = interfaces()
    route = default_route_interface()
    suggested = route if route in found else next((n for n in found if n != "lo" and not n.startswith(("docker", "veth"))), None)
    area.data = {"interfaces": found, "default_route": route, "suggested_ifname": suggested,
                 "suggested_master_addr": found[suggested][0] if suggested else None}
    area.info("interfaces", ", ".join(f"{name} {'/'.join(ips)}" for name, ips in found.items()) or "none with IPv4")
    if spec.socket_ifname:
        if spec.socket_ifname not in found:
            area.error("socket ifname", f"{spec.socket_ifname} is not an interface here with an IPv4 address",
                       f"use one of: {', '.join(found)}" + (f" (default route: {route})" if route else ""))
        else:
            area.ok("socket ifname", f"{spec.socket_ifname} {'/'.join(found[spec.socket_ifname])}")
    elif suggested:
        area.ok("socket ifname", f"{suggested} (carries the default route)" if suggested == route else suggested)
    else:
        area.warning("socket ifname", "no interface besides loopback", "multi-node runs need a routable interface")
    local = {ip for ips in found.values() for ip in ips}
    if spec.nnodes > 1:
        if spec.master_addr in ("127.0.0.1", "localhost"):
            area.error("master address", f"{spec.master_addr} cannot be reached from other nodes",
                       "pass --master-addr with the head's address" + (f" (this host: {found[suggested][0]})" if suggested else ""))
        elif spec.master_addr in local:
            area.ok("master address", f"{spec.master_addr} is this host: this is the head node")
        else:
            area.info("master address", f"{spec.master_addr} is another host: this is a worker node")
    return area


def _free_bytes(context: Context, path: str) -> tuple[int | None, str]:
    """Free bytes where `path` would be created, and the directory actually measured."""
    if context.runner.where == "host":
        probe = Path(path)
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        return shutil.disk_usage(probe).free, str(probe)
    result = context.runner.run(["df", "-Pk", path])
    if not result.ok:
        parent = os.path.dirname(path.rstrip("/")) or "/"
        result = context.runner.run(["df", "-Pk", parent])
    try:
        fields = result.stdout.strip().splitlines()[-1].split()
        return int(fields[3]) * 1024, fields[5]
    except (IndexError, ValueError):
        return None, path


def probe_disk(context: Context, parameters: int | None) -> Area:
    area = Area("disk", "Disk")
    spec = context.spec
    path = spec.effective_ckpts_dir
    free, measured = _free_bytes(context, path)
    need = parameters * CHECKPOINT_BYTES_PER_PARAM if parameters else None
    keep = spec.max_ckpt_to_keep
    area.data = {"ckpts_dir": path, "measured": measured, "free_bytes": free, "checkpoint_bytes": need, "keep": keep}
    if free is None:
        area.warning("checkpoints", f"could not measure free space for {path}", "check with df -h")
        return area
    text = f"{free / 1e9:.0f} GB free at {measured}"
    if need is None:
        area.info("checkpoints", text + " (checkpoint size unknown: model not read)")
    elif free < need:
        area.error("checkpoints", text + f"; one checkpoint needs about {need / 1e9:.0f} GB",
                   "free space, or put checkpoints on a bigger volume with --ckpts-dir")
    elif keep is None:
        area.warning("checkpoints", text + f"; every checkpoint is kept (max_ckpt_to_keep null), ~{need / 1e9:.0f} GB "
                     "each", "set max_ckpt_to_keep (e.g. 2) or make sure the volume holds one per --save-freq steps")
    elif free < need * keep:
        area.warning("checkpoints", text + f"; {keep} checkpoints need about {need * keep / 1e9:.0f} GB",
                     "free space, keep fewer (max_ckpt_to_keep) or raise --save-freq")
    else:
        area.ok("checkpoints", text + f"; {keep} x ~{need / 1e9:.0f} GB fit")
    return area


def swanlab_logged_in(environ=os.environ) -> bool:
    save_dir = Path(environ.get("SWANLAB_SAVE_DIR") or Path.home() / ".swanlab")
    return bool(environ.get("SWANLAB_API_KEY")) or any((save_dir / name).is_file() for name in ("netrc", ".netrc"))


def reachable(url: str, timeout: float) -> tuple[bool, str]:
    """TCP connect, then any HTTP answer (even 404) counts: the host is there."""
    parsed = urlparse(url if "://" in url else f"http://{url}")
    host = parsed.hostname or ""
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    started = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        return False, f"{host}:{port} does not answer ({exc.strerror or exc})"
    try:
        with urllib.request.urlopen(f"{parsed.scheme or 'http'}://{host}:{port}/", timeout=timeout) as response:
            code = response.status
    except urllib.error.HTTPError as exc:
        code = exc.code
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return True, f"{host}:{port} accepts connections but did not answer HTTP ({getattr(exc, 'reason', exc)})"
    return True, f"{host}:{port} answers (HTTP {code}, {1000 * (time.monotonic() - started):.0f} ms)"


def probe_swanlab(context: Context) -> Area:
    area = Area("swanlab", "SwanLab")
    spec = context.spec
    if not spec.swanlab_on:
        area.info("logging", "off (console only)", "turn it on with --swanlab yes")
        return area
    if spec.swanlab_mode in ("local", "offline", "disabled"):
        area.ok("mode", f"{spec.swanlab_mode}: no network needed (view with `swanlab watch {spec.effective_swanlab_log_dir}`)")
        return area
    url = spec.swanlab_host or SWANLAB_CLOUD
    up, detail = reachable(url, timeout=min(context.timeout, 3.0))
    area.data = {"host": url, "reachable": up}
    if up:
        area.ok("host", detail)
    else:
        from verl_deploy.swanlab_setup import host_fix

        area.error("host", f"the SwanLab host {url} refuses connections: {detail}", host_fix(spec))
    if spec.swanlab_api_key or swanlab_logged_in():
        area.ok("login", "API key given" if spec.swanlab_api_key else "found (SWANLAB_API_KEY or ~/.swanlab login)")
    else:
        area.error("login", "no API key: SWANLAB_API_KEY unset and no `swanlab login` on this host",
                   "pass --swanlab-api-key - (read from stdin) or run `swanlab login`")
    return area
