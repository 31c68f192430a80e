"""Backend `slurm`: each attempt is a batch job (submit.sbatch) that Slurm places on its nodes.

`start` renders submit.sbatch beside the attempt's scripts (on storage the nodes share: the
run directory), submits it with `sbatch --parsable` and starts a small detached pump. The pump
asks `scontrol` for the job's state, copies the job's output file into the run's log and writes
the state (PENDING with its reason, RUNNING, ...) to scheduler.json; when the job ends it exits
with the job's result. So the supervisor follows a Slurm job exactly like a local process, and
reads from scheduler.json what Slurm, not the training, ended (NODE_FAIL, PREEMPTED: resubmit
and resume; OUT_OF_MEMORY: host memory; TIMEOUT: the time limit).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING, ClassVar

from verl_deploy.backends.handle import Handle
from verl_deploy.backends.process import start_detached
from verl_deploy.backends.protocol import BackendError
from verl_deploy.backends.scheduler_options import OptionsBackend, SchedulerOptions
from verl_deploy.findings import Finding, error
from verl_deploy.statedir import write_json

if TYPE_CHECKING:
    from verl_deploy.compiler import Plan
    from verl_deploy.spec import RunSpec

POLL_SECONDS = 2.0
PENDING = ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED")
RUNNING = ("RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "RESIZING")
# states in which Slurm, not the training, ended the job: what it means for the run
ENDED_BY_SLURM = {
    "NODE_FAIL": ("resubmit", "a node of the job failed"),
    "PREEMPTED": ("resubmit", "the job was preempted by a higher-priority job"),
    "BOOT_FAIL": ("resubmit", "a node failed to boot for the job"),
    "OUT_OF_MEMORY": ("host_oom", "Slurm killed the job for using more host memory than it was given"),
    "TIMEOUT": ("time_limit", "the job reached its time limit"),
    "DEADLINE": ("time_limit", "the job reached its deadline"),
    "CANCELLED": ("cancelled", "the job was cancelled"),
}


class SlurmError(BackendError):
    """One line for the user."""


@dataclass(frozen=True)
class JobState:
    state: str  # Slurm's JobState, e.g. PENDING, RUNNING, COMPLETED, NODE_FAIL
    reason: str | None = None  # why it is pending (Resources, Priority, ...) or failed
    exit_code: int | None = None
    nodes: str | None = None  # NodeList once the job runs (e.g. node[01-02])


def run(argv: list[str], timeout: float = 30, **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, **kw)
    except FileNotFoundError:
        raise SlurmError(f"`{argv[0]}` is not installed here: run launch --backend slurm on a Slurm login node") from None
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"{argv[0]} gave no answer within {timeout:g} s")


def parse_fields(line: str) -> dict[str, str]:
    """`scontrol show ... -o` output: Key=Value pairs on one line (values have no spaces, except the last)."""
    return dict(re.findall(r"(?:^|\s)([A-Za-z][\w/:]*)=(\S*)", line))


def parse_job(text: str) -> JobState | None:
    fields = parse_fields(text.strip().splitlines()[0]) if text.strip() else {}
    if "JobState" not in fields:
        return None
    reason = fields.get("Reason")
    code = fields.get("ExitCode", "")
    match = re.fullmatch(r"(\d+):(\d+)", code)
    exit_status = None
    if match:
        exit_status = int(match.group(1)) or (128 + int(match.group(2)) if int(match.group(2)) else 0)
    nodes = fields.get("NodeList")
    return JobState(fields["JobState"].rstrip("+"), None if reason in (None, "None", "(null)") else reason, exit_status,
                    None if nodes in (None, "", "(null)") else nodes)


def job_state(job_id: str) -> JobState | None:
    """The job's state from scontrol (kept MinJobAge after the end), else sacct (with accounting), else None."""
    shown = run(["scontrol", "show", "job", "-o", job_id])
    state = parse_job(shown.stdout) if shown.returncode == 0 else None
    if state:
        return state
    acct = run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,ExitCode,Reason"])
    line = acct.stdout.strip().splitlines()[0] if acct.returncode == 0 and acct.stdout.strip() else ""
    parts = line.split("|")
    if len(parts) >= 2 and parts[0]:
        return parse_job(f"JobState={parts[0].split()[0]} ExitCode={parts[1]} Reason={parts[2] if len(parts) > 2 else ''}")
    return None


# -- can the partition ever hold the job? ------------------------------------------------------------

def gres_count(gres: str, name: str) -> int:
    """Devices of gres `name` in sinfo's %G text, e.g. "gpu:a100:8(S:0-1),npu:4" -> 8 for gpu."""
    total = 0
    for item in re.split(r",(?![^()]*\))", gres or ""):
        parts = re.sub(r"\(.*\)", "", item).split(":")
        if parts[0] == name and len(parts) >= 2:
            try:
                total += int(parts[-1])
            except ValueError:
                continue
    return total


def default_partition() -> str | None:
    listed = run(["sinfo", "-h", "-o", "%P"])
    for line in listed.stdout.split():
        if line.endswith("*"):
            return line.rstrip("*")
    return None


def check_partition(partition: str | None, gres: str, nnodes: int, per_node: int) -> list[Finding]:
    """Refuse a job the partition could never hold: too few nodes with `per_node` devices of `gres`."""
    name = partition or default_partition()
    if not name:
        return [error("partition", "Slurm has no default partition", "pass --partition NAME (see `sinfo`)")]
    listed = run(["sinfo", "-h", "-N", "-p", name, "-o", "%N|%G"])
    if listed.returncode != 0:
        return [error("partition", f"sinfo cannot read partition {name!r}: {listed.stderr.strip()[-200:]}",
                      "check --partition (see `sinfo -s`) and that this is a Slurm login node")]
    counts: dict[str, int] = {}
    for line in listed.stdout.splitlines():
        node, _, node_gres = line.partition("|")
        if node.strip():
            counts[node.strip()] = gres_count(node_gres.strip(), gres)
    if not counts:
        return [error("partition", f"partition {name!r} does not exist or has no nodes", "pass --partition NAME (see `sinfo -s`)")]
    shown = parse_fields(run(["scontrol", "show", "partition", "-o", name]).stdout)
    max_nodes = shown.get("MaxNodes", "UNLIMITED")
    fitting = sum(1 for c in counts.values() if c >= per_node)
    limit = int(max_nodes) if max_nodes.isdigit() else None
    if fitting < nnodes or (limit is not None and limit < nnodes):
        have = ", ".join(f"{n}: {c}" for n, c in sorted(counts.items())[:8]) + (", ..." if len(counts) > 8 else "")
        cap = f"; MaxNodes={limit}" if limit is not None and limit < nnodes else ""
        return [error("partition", f"the job needs {nnodes} node(s) x {per_node} {gres} = {nnodes * per_node}; "
                                   f"partition {name} has {len(counts)} node(s), {fitting} with {per_node} {gres} "
                                   f"({have}){cap}",
                      "use fewer devices or nodes (--devices, --nnodes), another --partition, or the site's gres "
                      "name (--gres-name); Slurm would keep the job pending forever")]
    return []


# -- the backend ---------------------------------------------------------------------------------------

def job_name(attempt_dir: Path) -> str:
    return f"verl-deploy-{attempt_dir.parent.name}-{attempt_dir.name}"


class SlurmBackend(OptionsBackend):
    kind: ClassVar[str] = "slurm"

    @classmethod
    def check_cluster(cls, spec: RunSpec, options: SchedulerOptions) -> list[Finding]:
        try:
            return check_partition(options.partition, options.gres(spec.device), spec.nnodes, len(spec.devices))
        except SlurmError as exc:
            return [error("backend", str(exc), "run it where sbatch, sinfo and scontrol work")]

    def extra_files(self, plan: Plan, scripts_dir: Path) -> dict[str, str]:
        from verl_deploy.backends.slurm_script import render_sbatch

        return {"submit.sbatch": render_sbatch(plan, self.options, job_name(scripts_dir.parent))}

    def start(self, scripts_dir: Path, attempt_dir: Path) -> Handle:
        output = attempt_dir / "slurm-%j.out"
        # the job gets this environment (--export=ALL): the scripts' folder, RAY_START_ARGS, WAIT_FOR_NODES_SECONDS, ...
        submitted = run(["sbatch", "--parsable", f"--output={output}", f"--job-name={job_name(attempt_dir)}",
                         "--export=ALL", str(scripts_dir / "submit.sbatch")], timeout=60, cwd=scripts_dir,
                        env={**{k: v for k, v in os.environ.items() if k != "RAY_AUTH_TOKEN"},  # ray_auth_token has it
                             "VERL_DEPLOY_SCRIPTS": str(scripts_dir)})
        job_id = submitted.stdout.strip().split(";")[0]
        if submitted.returncode != 0 or not job_id.isdigit():
            raise SlurmError(f"sbatch refused the job: {(submitted.stderr or submitted.stdout).strip()[-300:]}")
        state_file = attempt_dir / "scheduler.json"
        handle = start_detached([sys.executable, "-m", "verl_deploy.backends.slurm", job_id,
                                 str(output).replace("%j", job_id), str(state_file)], attempt_dir)
        handle.job_id, handle.scheduler_file = job_id, str(state_file)
        return handle

    def elsewhere(self, handle: Handle) -> str:
        job = handle.job_id or "JOB"
        nodes = (handle.scheduler or {}).get("nodes")
        on = f"on {nodes}" if nodes else f"on the nodes Slurm gave it (`squeue -j {job} -o %N`)"
        return f"the Slurm job {job} runs {on}, not on this host; run it there with `srun --jobid {job} --overlap`"

    def cancel(self, handle: Handle) -> None:
        if handle.job_id:
            try:
                run(["scancel", handle.job_id])
            except SlurmError:
                pass


# -- the pump: job state and output -> the run's log, scheduler.json, exit code ------------------------

def outcome(state: JobState) -> dict:
    """What scheduler.json says about a job: its state, and for an end Slurm caused, what it means."""
    doc: dict = {"scheduler": "slurm", "state": state.state, "reason": state.reason, "exit_code": state.exit_code,
                 "queued": state.state in PENDING, "nodes": state.nodes}
    meaning = ENDED_BY_SLURM.get(state.state)
    if meaning:
        kind, text = meaning
        doc["resubmit"] = kind == "resubmit"
        if kind == "host_oom":
            doc["failure"] = {"class": "host_oom", "phase": None, "cause": f"{text} (Slurm {state.state})",
                              "fix": "ask for more memory (--sbatch-option=--mem=0 for the whole node) or lower the "
                                     "host memory use (fewer rollout workers, no offload)", "retryable": False}
        elif kind == "time_limit":
            doc["failure"] = {"class": "time_limit", "phase": None, "cause": f"{text} (Slurm {state.state})",
                              "fix": "launch again with a longer --time: the new run resumes from the last checkpoint",
                              "retryable": False}
        elif kind == "resubmit":
            doc["cause"] = text
            doc["failure"] = {"class": "scheduler_interrupted", "phase": None, "cause": f"{text} (Slurm {state.state})",
                              "fix": "nothing to do: the run is resubmitted and resumes from the last checkpoint",
                              "retryable": True}
        elif kind == "cancelled":  # by someone else: a stop or a recovery of ours never asks what this says
            doc["failure"] = {"class": "cancelled", "phase": None, "cause": f"{text} (scancel, or by the cluster's "
                                                                          f"administrators)",
                              "fix": "launch again; it resumes from the last checkpoint", "retryable": False}
    return doc


def pump(job_id: str, output: str, state_file: str) -> int:
    def say(text: str) -> None:
        sys.stdout.write(f"[verl-deploy] slurm job {job_id}: {text}\n")
        sys.stdout.flush()

    say("submitted")
    offset, last, misses = 0, None, 0
    path = Path(output)
    while True:
        state = job_state(job_id)
        offset = _copy(path, offset)
        if state is None:
            misses += 1
            if misses >= 30:
                say("Slurm no longer knows the job (purged, or the controller is unreachable)")
                write_json(Path(state_file), {"scheduler": "slurm", "state": "UNKNOWN", "reason": None})
                return 1
            time.sleep(POLL_SECONDS)
            continue
        misses = 0
        if (state.state, state.reason, state.nodes) != last:
            last = (state.state, state.reason, state.nodes)
            write_json(Path(state_file), outcome(state))
            if state.state in PENDING:
                say(f"{state.state} (waiting: {state.reason or 'no reason given'})")
            elif state.state not in RUNNING:
                break
            else:
                say(state.state)
        time.sleep(POLL_SECONDS if state.state in PENDING else 0.5)
    time.sleep(1.0)  # slurmd's last writes to the output file
    offset = _copy(path, offset)
    say(f"{state.state}" + (f" ({state.reason})" if state.reason else "") + f", exit code {state.exit_code}")
    if state.state == "COMPLETED":
        return 0 if not state.exit_code else state.exit_code
    if state.state == "CANCELLED":
        return 143
    return state.exit_code or 1


def _copy(path: Path, offset: int) -> int:
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            while True:
                chunk = handle.read(1 << 20)
                if not chunk:
                    break
                sys.stdout.buffer.write(chunk)
                offset += len(chunk)
        sys.stdout.flush()
    except OSError:
        pass
    return offset


if __name__ == "__main__":
    sys.exit(pump(sys.argv[1], sys.argv[2], sys.argv[3]))
