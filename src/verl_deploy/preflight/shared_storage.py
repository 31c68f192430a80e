"""Is the checkpoint directory one storage for every node? A token written on the head, read on each worker.

verl's trainer saves a checkpoint as shards, each rank its own, into `trainer.default_local_dir`,
and the tracker file `latest_checkpointed_iteration.txt` from rank 0 only. Where that directory is
each node's local disk, no node holds a whole checkpoint: resume (`resume_mode=auto`, `resume RUN`)
and the OOM ladder's retries, which resume from the last checkpoint, find an incomplete one or none.
The workers are reached the way launch reaches them (backends/nodes.py: SSH with the user's keys,
`docker exec` into the run's container when it has one), so what is tested is what the run will see.
"""

from __future__ import annotations

import os
import secrets
import shlex
import subprocess

from verl_deploy.backends.nodes import ssh
from verl_deploy.preflight.report import Area
from verl_deploy.spec import RunSpec

ALLOW_FLAG = "--allow-local-checkpoints"
WHAT_BREAKS = ("each node keeps only its own shards there: resuming (resume_mode=auto, `verl-deploy resume`) and the "
               "OOM ladder's retries, which resume from the last checkpoint, find no whole checkpoint")
FIX = (f"put --ckpts-dir on storage every node mounts at the same path (NFS, Lustre, a shared PVC), or pass "
       f"{ALLOW_FLAG} to run without resume")


def _in_container(container: str | None, command: str) -> str:
    if not container:
        return command
    return f"docker exec -- {shlex.quote(container)} sh -c {shlex.quote(command)}"


def _write_here(path: str, token: str, container: str | None) -> tuple[str | None, list[str]]:
    """Write the token file on this (the head) node: (why not or None, the folders this made, deepest first)."""
    folder = shlex.quote(os.path.dirname(path))
    # say which folders do not exist yet, so the check leaves none of them behind
    command = (f'd={folder}; while [ ! -d "$d" ]; do echo "$d"; d=$(dirname -- "$d"); done; '
               f"mkdir -p -- {folder} && printf %s {shlex.quote(token)} > {shlex.quote(path)}")
    done = subprocess.run(["sh", "-c", _in_container(container, command)], capture_output=True, text=True, timeout=60)
    made = [line for line in done.stdout.splitlines() if line.startswith("/")]
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["no reason given"])[-1], made
    return None, made


def _remove_here(path: str, made: list[str], container: str | None) -> None:
    """The token file, and the folders the check made for it (only while empty: the run may have begun using them)."""
    command = "rm -f -- " + shlex.quote(path) + "".join(f"; rmdir -- {shlex.quote(d)} 2>/dev/null" for d in made)
    subprocess.run(["sh", "-c", _in_container(container, command + "; true")], capture_output=True, timeout=60)


def storage_area(spec: RunSpec, allow_local: bool = False) -> Area:
    """One row per worker: sees the head's token in the checkpoint directory (shared) or not."""
    area = Area("storage", "Shared storage")
    if len(spec.nodes) < 2:
        area.info("checkpoints", "one node: shared storage is not needed")
        return area
    ckpts = spec.effective_ckpts_dir
    token = secrets.token_hex(16)
    path = os.path.join(ckpts, f".verl-deploy-shared-{token[:12]}")
    problem, made = _write_here(path, token, spec.container)
    if problem:
        _remove_here(path, made, spec.container)
        area.error("ckpts_dir", f"the checkpoint directory {ckpts} cannot be written on {spec.nodes[0]}: {problem}",
                   "choose a --ckpts-dir the training may write")
        return area
    shared, local = [], []
    try:
        for host in spec.nodes[1:]:
            reply = ssh(host, _in_container(spec.container, f"cat -- {shlex.quote(path)} 2>/dev/null; true"), timeout=60)
            if not reply.ok and not reply.out:
                area.error("nodes", f"{host} does not answer over SSH: {reply.err or 'no reason given'}",
                           f"make `ssh -o BatchMode=yes {host} true` work (keys or an agent; no passwords)")
            elif token in reply.out:
                shared.append(host)
            else:
                local.append(host)
    finally:
        _remove_here(path, made, spec.container)
    area.data = {"ckpts_dir": ckpts, "shared_with": shared, "not_shared_with": local}
    if local:
        message = (f"{ckpts} is not shared: a file written there on {spec.nodes[0]} is not seen on {', '.join(local)}; "
                   f"{WHAT_BREAKS}")
        if allow_local:
            area.warning("ckpts_dir", message + f" ({ALLOW_FLAG}: launched anyway)", FIX.split(", or pass")[0])
        else:
            area.error("ckpts_dir", message, FIX)
    elif shared:
        area.ok("ckpts_dir", f"{ckpts} is shared with {', '.join(shared)}")
    return area
