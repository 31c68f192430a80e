"""`launch`, `runs`, `status`, `logs`, `stop`: bring a training up, and look after it."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, List, Optional

import typer

from verl_deploy.cli import app
from verl_deploy.cli.options import spec_options
from verl_deploy.cli.output import print_json

LAUNCH_EPILOG = """\
Examples:

  verl-deploy launch --config verl-deploy.yaml            # check, confirm, start; returns once it runs

  CONTAINER=verl-npu TRAIN_STEPS=100 verl-deploy launch --yes --notify 'json://10.0.0.5:9000/hook'

  verl-deploy launch --backend local --run-dir ~/verl --follow --json   # wait for the end, exit 0 on success

What it does: check (blocks on errors; --skip-check), the confirmation (or --yes), the container
(reuse, start, or create; backend docker when --container is set), SwanLab login, the scripts,
start detached, verify the log advances, print the run id, the log and the SwanLab link. A
supervisor then follows the log: on device OOM it adds offload, then recompute, and resumes from
the last checkpoint; on KV-cache OOM it lowers gpu_memory_utilization; host OOM and everything
else stop with the cause and fix. It speaks only on failure or a stall (--notify URLs: apprise).
"""


def _say(text: str) -> None:
    from verl_deploy.cli.output import console

    console(stderr=True).print(f"[dim]{text}[/]")


@app.command("launch", epilog=LAUNCH_EPILOG)
@spec_options
def launch_command(
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    follow: bool = typer.Option(False, "--follow", help="Stay until the run ends; exit 0 only if it succeeded."),
    json_output: bool = typer.Option(False, "--json", help="Print the run's status as JSON."),
    backend: str = typer.Option("auto", "--backend", help="auto (ray with --ray-address, docker with --container, else local) "
                                                         "| local | docker | ray."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="URL",
                                              help="Ray job server of an existing cluster, e.g. http://head:8265 (backend ray)."),
    job_env: Optional[List[str]] = typer.Option(None, "--job-env", metavar="NAME[=VALUE]",
                                                help="backend ray: pass this environment variable to the job (repeatable)."),
    notify: Optional[List[str]] = typer.Option(None, "--notify", metavar="URL",
                                               help="apprise URL for failure notices (repeatable): json://, feishu://, slack://, mailto://..."),
    stall_minutes: float = typer.Option(10.0, "--stall-minutes", min=0.01, help="Notice when no step for max(this, 5 x median step)."),
    start_timeout: float = typer.Option(180.0, "--start-timeout", min=1, metavar="SECONDS",
                                        help="Fail if the training writes nothing for this long after starting."),
    skip_check: bool = typer.Option(False, "--skip-check", help="Do not run `verl-deploy check` first."),
    verify: bool = typer.Option(True, "--verify/--no-verify", help="Run verl's own validation where the training runs "
                                "first (when verl is importable there); what verl rejects blocks the launch."),
    search_root: Optional[List[str]] = typer.Option(None, "--search-root", metavar="DIR", help="For the check."),
    **options: Any,
) -> None:
    """Check, confirm, and start the training detached; a supervisor watches and recovers it."""
    from verl_deploy.cli.confirm import confirm
    from verl_deploy.cli.options import flags_from
    from verl_deploy.cli.output import fail, print_findings
    from verl_deploy.cli.run_common import check_with, prepare_from_flags
    from verl_deploy.findings import UserError, error
    from verl_deploy.runs.control import LaunchError
    from verl_deploy.runs.launch import launch

    try:
        flags, config_file = flags_from(options)  # once: `--swanlab-api-key -` reads stdin
    except UserError as exc:
        raise fail(exc.findings, as_json=json_output) from None
    prepared = prepare_from_flags(flags, config_file, ignore_detected=bool(options.get("ignore_detected")),
                                  as_json=json_output)
    if prepared.plan is None or not prepared.ok:
        raise fail(prepared.findings, as_json=json_output)
    spec = prepared.spec
    ray_address = ray_address or os.environ.get("RAY_API_SERVER_ADDRESS")
    chosen = backend if backend != "auto" else ("ray" if ray_address else "docker" if spec.container else "local")
    if chosen not in ("local", "docker", "ray"):
        raise fail([error("backend", f"{backend!r} is not a backend", "use --backend local, docker or ray")],
                   as_json=json_output)
    if chosen == "docker" and not spec.container:
        raise fail([error("container", "the docker backend needs a container", "pass --container NAME")], as_json=json_output)
    backend_options: dict = {}
    if chosen == "ray":
        backend_options = _ray_options(spec, ray_address, job_env or [], json_output)
    elif not skip_check:
        checked = check_with(flags, config_file, search_roots=search_root)
        errors = [f for f in checked.findings if f.level == "error"]
        if errors:
            print_findings(errors)
            raise fail([error("check", f"{len(errors)} problem(s) found by the check block the launch",
                              "fix them (see above), or pass --skip-check if you know better")], as_json=json_output)
    if verify:
        from verl_deploy.verify import findings_for, verify_on_ray, verify_plan

        verified = (verify_on_ray(prepared.plan, ray_address) if chosen == "ray" else
                    verify_plan(prepared.plan, container=spec.container if chosen == "docker" else None))
        rejected = [f for f in findings_for(verified, prepared.plan, required=False) if f.level == "error"]
        if rejected:
            raise fail(rejected, as_json=json_output)
    if len(spec.nodes) > 1 and chosen != "ray":
        from verl_deploy.backends.nodes import check_nodes

        node_findings = check_nodes(spec)
        if node_findings:
            raise fail(node_findings, as_json=json_output)
    confirm(prepared, f"launch ({chosen} backend)", yes=yes)
    try:
        record = launch(spec, backend=chosen, notify_urls=notify or [], stall_seconds=stall_minutes * 60,
                        start_timeout=start_timeout, say=_say, backend_options=backend_options)
    except LaunchError as exc:
        raise fail([error("launch", str(exc), "see `verl-deploy status` and `verl-deploy logs`")], as_json=json_output)
    if follow:
        record = _follow(record.id, json_output)
        if json_output:
            print_json(record.status_document())
        raise typer.Exit(code=0 if record.state == "succeeded" else 1)
    if json_output:
        print_json(record.status_document())
        return
    _announce(record)


def _ray_options(spec, address: Optional[str], job_env: list[str], json_output: bool) -> dict:
    """Check the live cluster before submitting: resource name, devices in total and per node, Ray version."""
    from verl_deploy.backends.raycluster import check_cluster, cluster_nodes, cluster_version
    from verl_deploy.cli.output import fail, print_findings
    from verl_deploy.findings import error

    if not address:
        raise fail([error("ray_address", "the ray backend needs the cluster's job server",
                          "pass --ray-address http://HEAD:8265 (or set RAY_API_SERVER_ADDRESS)")], as_json=json_output)
    env: dict[str, str] = {}
    for item in job_env:
        name, sep, value = item.partition("=")
        if name == "SWANLAB_API_KEY":
            raise fail([error("job-env", "the SwanLab key must not go into the job's runtime environment (the "
                              "dashboard shows it)", "log in on the nodes (`verl-deploy swanlab login`) instead")],
                       as_json=json_output)
        env[name] = value if sep else os.environ.get(name, "")
    try:
        nodes = cluster_nodes(address)
    except (OSError, ValueError) as exc:
        raise fail([error("ray_address", f"{address} does not answer as a Ray job server: {exc}",
                          "check the address and that the head runs the dashboard (port 8265)")], as_json=json_output)
    try:
        import ray

        local_version = ray.__version__
    except ImportError:
        raise fail([error("backend", "the ray backend needs Ray here", "pip install 'verl-deploy[ray]'")],
                   as_json=json_output) from None
    findings = check_cluster(spec, nodes, cluster_version(address), local_version)
    if any(f.level == "error" for f in findings):
        raise fail(findings, as_json=json_output)
    if findings and not json_output:
        print_findings(findings)
    return {"address": address, "env": env}


def _announce(record) -> None:
    from verl_deploy.cli.output import console
    from verl_deploy.runs.record import RunRecord

    out = console()
    out.print(f"run [bold]{record.id}[/] is {record.state} ({record.backend})")
    out.print(f"log: {record.current.log}")
    deadline = time.monotonic() + 5
    while not record.swanlab_url and record.state == "running" and time.monotonic() < deadline:
        time.sleep(0.25)
        record = RunRecord.load(record.id)
    if record.swanlab_url:
        out.print(f"SwanLab: [bold]{record.swanlab_url}[/]")
    out.print(f"follow: verl-deploy logs {record.id} -f   ·   status: verl-deploy status {record.id}   ·   "
              f"stop: verl-deploy stop {record.id}")


def _follow(run_id: str, quiet: bool):
    """Stay attached until the run ends; print attempts and notices as they happen."""
    from verl_deploy.cli.output import console
    from verl_deploy.runs.control import ensure_supervised
    from verl_deploy.runs.record import TERMINAL, RunRecord

    err = console(stderr=True)
    seen_attempts, seen_notices, link_shown = 1, 0, False
    while True:
        record = ensure_supervised(RunRecord.load(run_id))
        if not quiet:
            if record.swanlab_url and not link_shown:
                err.print(f"SwanLab: {record.swanlab_url}")
                link_shown = True
            for attempt in record.attempts[seen_attempts:]:
                err.print(f"[yellow]attempt {attempt.n}[/]: {attempt.reason}")
            for entry in record.notices[seen_notices:]:
                err.print(f"[bold red]{entry['title']}[/]\n{entry['body']}")
        seen_attempts, seen_notices = len(record.attempts), len(record.notices)
        if record.state in TERMINAL:
            if not quiet:
                err.print(f"run {record.id}: [bold]{record.state}[/] at step {record.step}/{record.total_steps}")
            return record
        time.sleep(0.5)


def _load(run_id: Optional[str], as_json: bool = False):
    from verl_deploy.cli.output import fail
    from verl_deploy.findings import error
    from verl_deploy.runs.record import RunRecord, find_run

    found = find_run(run_id)
    if found is None:
        raise fail([error("run", f"no run {run_id!r}" if run_id else "no runs yet",
                          "see `verl-deploy runs`" if run_id else "start one with `verl-deploy launch`")],
                   as_json=as_json)
    return RunRecord.load(found)


@app.command("runs")
def runs_command(json_output: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """List the runs this host launched, newest first."""
    from rich.table import Table

    from verl_deploy.cli.output import console
    from verl_deploy.runs.record import RunRecord, list_runs

    records = [RunRecord.load(i) for i in list_runs()]
    if json_output:
        print_json({"runs": [r.status_document() for r in records]})
        return
    table = Table(box=None, header_style="bold")
    for column in ("id", "state", "step", "attempts", "backend", "model"):
        table.add_column(column)
    for r in records:
        step = f"{r.step}/{r.total_steps}" if r.total_steps else str(r.step)
        table.add_row(r.id, r.state, step, str(len(r.attempts)), r.backend, os.path.basename(r.spec.get("model_path", "")))
    console().print(table if records else "no runs yet: start one with `verl-deploy launch`")


@app.command("status")
def status_command(run_id: Optional[str] = typer.Argument(None, metavar="[RUN]", help="Run id or prefix (default: newest)."),
                   json_output: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """State, step N/M with ETA, last metrics, SwanLab link, attempts, and commands to look by hand."""
    from rich.markup import escape

    from verl_deploy.cli.output import console
    from verl_deploy.runs.control import ensure_supervised
    from verl_deploy.watch.describe import duration, number

    record = ensure_supervised(_load(run_id, json_output))
    if json_output:
        print_json(record.status_document())
        return
    out = console()
    spec = record.spec
    out.print(f"run [bold]{record.id}[/]: [bold]{record.state}[/] ({record.backend}, {spec.get('mode')}, {spec.get('framework')})")
    if record.total_steps:
        out.print(f"step {record.step}/{record.total_steps}" + (f" · ETA {duration(record.eta_seconds)}" if record.eta_seconds else ""))
    shown = [("critic/score/mean", "score"), ("critic/rewards/mean", "reward"), ("response_length/mean", "response len"),
             ("perf/throughput", "throughput")]
    metrics = [f"{label} {number(record.metrics[key])}" for key, label in shown if key in record.metrics]
    if metrics:
        out.print("metrics: " + " · ".join(metrics))
    if record.swanlab_url:
        out.print(f"SwanLab: {record.swanlab_url}")
    for attempt in record.attempts:
        added = f" +{','.join(attempt.features)}" if attempt.features else ""
        result = "" if attempt.exit_code is None else f" → exit {attempt.exit_code}"
        failure = f" ({attempt.failure['class']})" if attempt.failure and attempt.failure.get("class") else ""
        out.print(f"attempt {attempt.n}{added}: {escape(attempt.reason)}{result}{failure}")
    if record.failure:
        out.print(f"[bold red]failure[/]: {escape(str(record.failure.get('class')))} — {escape(str(record.failure.get('decision') or record.failure.get('cause')))}")
        if record.failure.get("fix"):
            out.print(f"fix: {escape(record.failure['fix'])}")
    log = record.current.log if record.current else ""
    container = spec.get("container")
    out.print("[dim]by hand:[/]")
    out.print(f"  tail -f {log}")
    out.print(f"  grep 'Training Progress' {log} | tail -1;  grep -E 'Error|OOM|Exception' {log} | tail")
    prefix = f"docker exec {container} " if record.backend == "docker" and container else ""
    tool = "npu-smi info" if spec.get("device") == "npu" else "nvidia-smi"
    out.print(f"  {prefix}{tool};  {prefix}ray status")


@app.command("logs")
def logs_command(run_id: Optional[str] = typer.Argument(None, metavar="[RUN]", help="Run id or prefix (default: newest)."),
                 follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the run ends."),
                 errors: bool = typer.Option(False, "--errors", help="Only lines with Error, OOM or Exception (and known failures)."),
                 attempt_n: Optional[int] = typer.Option(None, "--attempt", help="An earlier attempt's log.")) -> None:
    """The training log of a run (the current attempt unless --attempt)."""
    import re

    from verl_deploy.runs.control import ensure_supervised
    from verl_deploy.runs.record import TERMINAL, RunRecord
    from verl_deploy.watch.follow import LogFollower
    from verl_deploy.watch.signatures import load_table

    record = ensure_supervised(_load(run_id))
    attempts = {a.n: a for a in record.attempts}
    attempt = attempts.get(attempt_n) if attempt_n else record.current
    if attempt is None:
        raise typer.Exit(code=1)
    seeds = re.compile(r"Error|OOM|Exception")
    table = load_table()

    def wanted(line: str) -> bool:
        return not errors or bool(seeds.search(line)) or bool(table.failures_in(line))

    follower = LogFollower(attempt.log)
    try:
        while True:
            for line in follower.read_lines():
                if wanted(line):
                    sys.stdout.write(line + "\n")
            sys.stdout.flush()
            if not follow:
                return
            record = RunRecord.load(record.id)
            if record.current and record.current.n != attempt.n and attempt_n is None:
                attempt = record.current  # a retry started: go on with its log
                follower = LogFollower(attempt.log)
                sys.stdout.write(f"--- attempt {attempt.n}: {attempt.reason} ---\n")
                continue
            if record.state in TERMINAL and os.path.getsize(attempt.log) <= follower.offset + len(follower.partial):
                last = follower.take_partial().decode("utf-8", errors="replace")  # a last line without newline
                if last and wanted(last):
                    sys.stdout.write(last + "\n")
                return
            time.sleep(0.2)
    except KeyboardInterrupt:
        return


@app.command("stop")
def stop_command(run_id: str = typer.Argument(..., metavar="RUN", help="Run id or prefix.")) -> None:
    """Stop the training and the Ray session this tool started for it; checkpoints are kept."""
    from verl_deploy.cli.output import console
    from verl_deploy.runs.control import stop_run
    from verl_deploy.runs.record import TERMINAL

    record = _load(run_id)
    if record.state in TERMINAL:
        console().print(f"run {record.id} already {record.state}")
        return
    stop_run(record)
    console().print(f"run {record.id} stopped (checkpoints kept in {record.spec.get('ckpts_dir') or 'the checkpoint directory'})")


@app.command("_supervise", hidden=True)
def supervise_command(run_id: str) -> None:
    from verl_deploy.runs.control import supervise

    supervise(run_id)
