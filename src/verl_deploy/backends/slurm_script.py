"""Plan + scheduler options -> submit.sbatch: the Slurm job that runs start_verl.sh on every node.

The job itself adds no training logic: start_verl.sh already starts the Ray head (or, with
VERL_DEPLOY_ROLE=worker, joins it), waits until every node and device joined, and runs
run_training.sh. The job only picks the head (the first node), passes its address as
VERL_DEPLOY_MASTER_ADDR (given, else Slurm's NodeAddr for it, else its name) and keeps the head's
exit code as the job's.
"""

from __future__ import annotations

import os

from verl_deploy import __version__
from verl_deploy.compiler import Plan
from verl_deploy.backends.scheduler_options import SchedulerOptions


def shared_dirs(spec) -> list[str]:
    """Directories every node must see at the same path: the model, the data, the checkpoints."""
    candidates = [spec.model_path, os.path.dirname(spec.train_file), os.path.dirname(spec.test_file),
                  spec.effective_ckpts_dir]
    dirs: list[str] = []
    for path in sorted({os.path.normpath(p) for p in candidates if p and p.startswith("/")}):
        if not any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs):
            dirs.append(path)
    return dirs


def render_sbatch(plan: Plan, options: SchedulerOptions, job_name: str = "verl-deploy") -> str:
    from verl_deploy.render import _environment, summary

    spec = plan.spec
    mounts = "".join(f",{d}:{d}" for d in shared_dirs(spec))
    return _environment().get_template("submit.sbatch.j2").render(
        tool_version=__version__, verl_version=spec.verl_version, summary=summary(plan), job_name=job_name,
        nnodes=spec.nnodes, devices_per_node=len(spec.devices), gres=options.gres(spec.device),
        partition=options.partition, account=options.account, time=options.time,
        sbatch_options=options.sbatch_options, container_mode=options.container_mode,
        container=spec.container or "verl", image=spec.image, mounts=mounts, master_addr=given_master_addr(spec))


def given_master_addr(spec) -> str:
    """--master-addr when the user gave it (the job's head address then), else "" (Slurm's address for the head)."""
    return spec.master_addr if spec.sources.get("master_addr", "default") not in ("default", "detected", "derived") else ""
