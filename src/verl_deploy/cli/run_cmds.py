"""`launch`, `runs`, `status`, `logs`, `stop`: bring a training up, and look after it."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, List, Optional

import typer

from verl_deploy.cli import app
from verl_deploy.cli.options import spec_options
from verl_deploy.cli.sched_options import scheduler_options
from verl_deploy.cli.output import print_json

LAUNCH_EPILOG = """\
Examples:

  verl-deploy launch --config verl-deploy.yaml            # check, confirm, start; returns once it runs

  CONTAINER=verl-npu TRAIN_STEPS=100 verl-deploy launch --yes --notify 'json://10.0.0.5:9000/hook'

  verl-deploy launch --backend local --run-dir ~/verl --follow --json   # wait for the end, exit 0 on success

  verl-deploy launch --device-memory-gb 64 --no-estimate   # start exactly as planned, even if the estimate says OOM

  verl-deploy launch --reuse-ray --ckpts-dir /data/ckpts/exp2   # use the Ray already on the port; own ckpt dir

  verl-deploy launch --backend slurm --nnodes 2 --partition a800 --time 2-00:00:00   # sbatch, follow, recover

  verl-deploy launch --backend kuberay --nnodes 2 --namespace rl --k8s-volume models:/mnt/public

What it does: check (blocks on errors; --skip-check), the memory estimate (when it says the plan
does not fit, the first attempt already has the memory features it needs), the confirmation (or --yes), the container
(reuse, start, or create; backend docker when --container is set), SwanLab login, the scripts,
start detached, verify the log advances, print the run id, the log and the SwanLab link. A
supervisor then follows the log: on device OOM it adds offload, then recompute, and resumes from
the last checkpoint; on KV-cache OOM it lowers gpu_memory_utilization; host OOM and everything
else stop with the cause and fix. It speaks only on failure or a stall (--notify URLs: apprise,
checked before anything starts). It starts and stops only its own Ray (never a bare `ray stop`), and
refuses a checkpoint directory a live run uses (--force).
"""


def _say(text: str) -> None:
    from verl_deploy.cli.output import console

    console(stderr=True).print(f"[dim]{text}[/]")


@app.command("launch", epilog=LAUNCH_EPILOG)
@spec_options
@scheduler_options
def launch_command(
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    follow: bool = typer.Option(False, "--follow", help="Stay until the run ends; exit 0 only if it succeeded."),
    json_output: bool = typer.Option(False, "--json", help="Print the run's status as JSON."),
    backend: str = typer.Option("auto", "--backend", help="auto (ray with --ray-address, docker with --container, else local) "
                                                         "| local | docker | ray | slurm | kuberay."),
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
    no_estimate: bool = typer.Option(False, "--no-estimate", help="Start without the memory features the memory "
                                                                   "estimate says the plan needs (the OOM ladder still "
                                                                   "adds them if it runs out of memory)."),
    verify: bool = typer.Option(True, "--verify/--no-verify", help="Run verl's own validation where the training runs "
                                "first (when verl is importable there); what verl rejects blocks the launch."),
    search_root: Optional[List[str]] = typer.Option(None, "--search-root", metavar="DIR", help="For the check."),
    reuse_ray: bool = typer.Option(False, "--reuse-ray", help="Use a Ray cluster already running on the port instead "
                                                              "of starting this run's own (it is then never stopped)."),
    force: bool = typer.Option(False, "--force", help="Launch even though a live run uses the same checkpoint directory."),
    **options: Any,
) -> None:
    """Check, confirm, and start the training detached; a supervisor watches and recovers it."""
    from verl_deploy.cli.confirm import confirm
    from verl_deploy.cli.options import flags_from
    from verl_deploy.cli.output import fail, print_findings
    from verl_deploy.cli.run_common import check_with, prepare_from_flags
    from verl_deploy.findings import UserError, error
    from verl_deploy.pipeline import prepare_spec
    from verl_deploy.runs.ckptlock import live_users
    from verl_deploy.runs.control import LaunchError
    from verl_deploy.runs.launch import launch
    from verl_deploy.runs.notify import invalid as invalid_notify_url
    from verl_deploy.runs.notify import target
    from verl_deploy.runs.notify import unreachable as unreachable_notify_url

    try:
        flags, config_file = flags_from(options)  # once: `--swanlab-api-key -` reads stdin
    except UserError as exc:
        raise fail(exc.findings, as_json=json_output) from None
    if backend in ("slurm", "kuberay", "ray") or (backend == "auto" and (ray_address or
                                                                   os.environ.get("RAY_API_SERVER_ADDRESS"))):
        flags["head_from_scheduler"] = True  # the job (or the running Ray cluster) gives the head at run time
    for url in notify or []:
        problem = invalid_notify_url(url)
        if problem:
            raise fail([error("notify", f"--notify {target(url)[:80]!r}: {problem}",
                              "use an apprise URL: json://HOST:PORT/PATH, slack://..., feishu://..., dingtalk://...")],
                       as_json=json_output)
        away = unreachable_notify_url(url)
        if away and not json_output:
            from verl_deploy.cli.output import console

            console(stderr=True).print(f"[yellow]warning[/]: --notify {target(url)}: {away}; notices fail until it "
                                       "answers (each result is kept in the run record)")
    ray_address = ray_address or os.environ.get("RAY_API_SERVER_ADDRESS")
    # the host check probes where the training runs: not for a cluster or scheduler elsewhere
    runs_check = not skip_check and backend not in ("ray", "slurm", "kuberay") and not (backend == "auto" and ray_address)
    if runs_check:
        # the check resolves the spec with what it detects (--search-root): that very spec is what is launched
        try:
            checked = check_with(flags, config_file, search_roots=search_root)
        except UserError as exc:
            raise fail(exc.findings, as_json=json_output) from None
        prepared = prepare_spec(checked.spec, announce=None if json_output else _say)
    else:
        checked = None
        prepared = prepare_from_flags(flags, config_file, ignore_detected=bool(options.get("ignore_detected")),
                                      as_json=json_output)
    if prepared.plan is None or not prepared.ok:
        raise fail(prepared.findings, as_json=json_output)
    if not no_estimate:
        prepared = _with_estimate(prepared, json_output)
    spec = prepared.spec
    chosen = backend if backend != "auto" else ("ray" if ray_address else "docker" if spec.container else "local")
    if chosen not in ("local", "docker", "ray", "slurm", "kuberay"):
        raise fail([error("backend", f"{backend!r} is not a backend", "use --backend local, docker, ray, slurm or "
                                                                    "kuberay")], as_json=json_output)
    if chosen == "docker" and not spec.container:
        raise fail([error("container", "the docker backend needs a container", "pass --container NAME")], as_json=json_output)
    backend_options: dict = {"reuse_ray": True} if reuse_ray else {}
    if chosen == "ray":
        backend_options = _ray_options(spec, ray_address, job_env or [], json_output)
    elif chosen in ("slurm", "kuberay"):
        backend_options = _scheduler_options(spec, chosen, options, json_output)
    if checked is not None:
        errors = [f for f in checked.findings if f.level == "error"]
        if errors:
            print_findings(errors)
            raise fail([error("check", f"{len(errors)} problem(s) found by the check block the launch",
                              "fix them (see above), or pass --skip-check if you know better")], as_json=json_output)
    if verify and chosen in ("local", "docker", "ray"):  # a scheduler's job runs elsewhere
        from verl_deploy.verify import findings_for, verify_on_ray, verify_plan

        verified = (verify_on_ray(prepared.plan, ray_address or "") if chosen == "ray" else  # _ray_options needs one
                    verify_plan(prepared.plan, container=spec.container if chosen == "docker" else None))
        rejected = [f for f in findings_for(verified, prepared.plan, required=False) if f.level == "error"]
        if rejected:
            raise fail(rejected, as_json=json_output)
    if len(spec.nodes) > 1 and chosen in ("local", "docker"):
        from verl_deploy.backends.nodes import check_nodes

        node_findings = check_nodes(spec)
        if node_findings:
            raise fail(node_findings, as_json=json_output)
    users = live_users(spec.effective_ckpts_dir)
    if users and not force:
        raise fail([error("ckpts_dir", f"run {users[0]} is live and uses {spec.effective_ckpts_dir}: this run would "
                                       "resume from its checkpoints and overwrite them",
                          f"stop it (`verl-deploy stop {users[0]}`), choose another --ckpts-dir, or pass --force")],
                   as_json=json_output)
    confirm(prepared, f"launch ({chosen} backend)", yes=yes)
    try:
        record = launch(spec, backend=chosen, notify_urls=notify or [], stall_seconds=stall_minutes * 60,
                        start_timeout=start_timeout, say=_say, backend_options=backend_options, force=force)
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


def _with_estimate(prepared, json_output: bool):
    """When the memory estimate says the plan does not fit, start with the memory features it needs."""
    from verl_deploy.cli.output import fail
    from verl_deploy.memory import needed_features
    from verl_deploy.pipeline import prepare_spec

    spec, memory = prepared.spec, prepared.memory
    if memory is None or memory.fits:
        return prepared
    on = {s.name for s in prepared.plan.features if s.on}
    add = [name for name in needed_features(memory) if name not in on]
    if not add:
        return prepared
    changed = prepare_spec(spec.with_changes(source="estimate", estimate_features=[*spec.estimate_features, *add]))
    if changed.plan is None or not changed.ok:
        raise fail(changed.findings, as_json=json_output)
    return changed


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
        if name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
            raise fail([error("job-env", f"{name} must not go into the job's runtime environment (the dashboard "
                              "shows it)", "the cluster's own processes have its token; verl-deploy sends yours "
                              "in a request header")], as_json=json_output)
        env[name] = value if sep else os.environ.get(name, "")
    from verl_deploy.rayauth import AuthError

    try:
        nodes = cluster_nodes(address)
    except AuthError as exc:  # one line naming the variables to set, never a bare 401
        raise fail([error("ray_address", exc.problem, exc.fix)], as_json=json_output) from None
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


def _scheduler_options(spec, chosen: str, options: dict, json_output: bool) -> dict:
    """Before anything is submitted: the scheduler's flags, and whether the cluster could ever run the job."""
    from verl_deploy.cli.output import fail
    from verl_deploy.cli.sched_options import scheduler_from
    from verl_deploy.findings import UserError, error

    try:
        sched = scheduler_from(options)
    except UserError as exc:
        raise fail(exc.findings, as_json=json_output) from None
    if chosen == "slurm":
        from verl_deploy.backends.slurm import SlurmError, check_partition

        try:
            findings = check_partition(sched.partition, sched.gres(spec.device), spec.nnodes, len(spec.devices))
        except SlurmError as exc:
            raise fail([error("backend", str(exc), "run it where sbatch, sinfo and scontrol work")],
                       as_json=json_output) from None
        if findings:
            raise fail(findings, as_json=json_output)
    else:
        from verl_deploy.backends.kuberay import KubeError, check_cluster

        try:
            problem = check_cluster(sched.namespace)
        except KubeError as exc:
            problem = str(exc)
        if problem:
            raise fail([error("backend", problem, "see the README's KubeRay section")], as_json=json_output)
    return {"scheduler": sched.model_dump(mode="json")}


def _announce(record) -> None:
    from verl_deploy.cli.output import console
    from verl_deploy.runs.record import reload

    from rich.markup import escape

    from verl_deploy.views.safe_text import neutralise

    out = console()
    out.print(f"run [bold]{record.id}[/] is {record.state} ({record.backend})")
    out.print(f"log: {escape(neutralise(record.current.log))}")
    deadline = time.monotonic() + 5
    while not record.swanlab_url and record.state == "running" and time.monotonic() < deadline:
        time.sleep(0.25)
        record = reload(record)
    if record.swanlab_url:
        out.print(f"SwanLab: [bold]{escape(neutralise(record.swanlab_url))}[/]")
    out.print(f"follow: verl-deploy logs {record.id} -f   ·   status: verl-deploy status {record.id}   ·   "
              f"stop: verl-deploy stop {record.id}")


def _follow(run_id: str, quiet: bool):
    """Stay attached until the run ends: the live view on a terminal, one line per event off it."""
    from verl_deploy.cli.watch_view import follow_run

    return follow_run(run_id, quiet=quiet)


def _find(run_id: Optional[str], as_json: bool = False) -> str:
    from verl_deploy.cli.output import fail
    from verl_deploy.findings import error
    from verl_deploy.runs.record import find_run

    found = find_run(run_id)
    if found is None and run_id:
        from verl_deploy.runs.record import list_runs

        matches = [i for i in list_runs() if i.startswith(run_id)]
        if len(matches) > 1:
            shown = ", ".join(matches[:5]) + (f" and {len(matches) - 5} more" if len(matches) > 5 else "")
            raise fail([error("run", f"{run_id!r} matches {len(matches)} runs: {shown}",
                              "give more of the run id")], as_json=as_json)
    if found is None:
        raise fail([error("run", f"no run {run_id!r}" if run_id else "no runs yet",
                          "see `verl-deploy runs`" if run_id else "start one with `verl-deploy launch`")],
                   as_json=as_json)
    return found


def _load(run_id: Optional[str], as_json: bool = False):
    """The run's record, or one line saying what is wrong with it (and that `stop` still works)."""
    from verl_deploy.cli.output import fail
    from verl_deploy.findings import error
    from verl_deploy.runs.record import RecordError, RunRecord

    found = _find(run_id, as_json)
    try:
        return RunRecord.load(found)
    except RecordError as exc:
        raise fail([error("run", f"{found}: {exc}", f"`verl-deploy stop {found}` still stops its training")],
                   as_json=as_json) from None


@app.command("runs")
def runs_command(json_output: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """List the runs this host launched, newest first (a damaged record is listed as such, the others still shown)."""
    from rich.markup import escape
    from rich.table import Table

    from verl_deploy.cli.output import console
    from verl_deploy.runs.record import RecordError, RunRecord, list_runs
    from verl_deploy.views.safe_text import neutralise

    records, damaged = [], []
    for run_id in list_runs():
        try:
            records.append(RunRecord.load(run_id))
        except RecordError as exc:
            damaged.append({"id": run_id, "problem": f"{run_id}: {exc}"})
    if json_output:
        print_json({"runs": [r.status_document() for r in records], "damaged": damaged})
        return
    table = Table(box=None, header_style="bold")
    for column in ("id", "state", "step", "attempts", "backend", "model"):
        table.add_column(column)
    for r in records:
        step = f"{r.step}/{r.total_steps}" if r.total_steps else str(r.step)
        table.add_row(r.id, r.state, step, str(len(r.attempts)), r.backend,
                      escape(neutralise(os.path.basename(str(r.spec.get("model_path") or "")))))
    for d in damaged:
        table.add_row(d["id"], "[red]damaged[/]", "-", "-", "-", "-")
    console().print(table if records or damaged else "no runs yet: start one with `verl-deploy launch`")
    for d in damaged:
        console(stderr=True).print(f"[yellow]warning[/]: {escape(d['problem'])}; `verl-deploy stop {d['id']}` still stops it",
                                   soft_wrap=True)


STATUS_EPILOG = """\
Examples:

  verl-deploy status                     # the newest run: state, step N/M, ETA, metrics, attempts
  verl-deploy status 20261130 --watch    # full screen, live: metrics with trends, devices, notices (q quits)
  verl-deploy status --watch | cat       # off a terminal: one line per event until the run ends
"""


@app.command("status", epilog=STATUS_EPILOG)
def status_command(run_id: Optional[str] = typer.Argument(None, metavar="[RUN]", help="Run id or prefix (default: newest)."),
                   json_output: bool = typer.Option(False, "--json", help="Print as JSON."),
                   watch: bool = typer.Option(False, "--watch", "-w", help="Live view until the run ends (q quits; the "
                                                                            "run goes on). Off a terminal: one line per event.")) -> None:
    """State, step N/M with ETA, last metrics, SwanLab link, attempts, and commands to look by hand."""
    from rich.markup import escape

    from verl_deploy.cli.output import console
    from verl_deploy.runs.control import ensure_supervised, supervisor_alive
    from verl_deploy.runs.record import TERMINAL
    from verl_deploy.views.safe_text import neutralise
    from verl_deploy.watch.describe import duration, number

    record = ensure_supervised(_load(run_id, json_output))
    if watch and not json_output:
        from verl_deploy.cli.watch_view import follow_run

        follow_run(record.id)
        return
    if json_output:
        print_json(record.status_document())
        return
    out = console()
    spec = record.spec

    def t(value: object) -> str:
        """Anything from a record or a log, as inert text (no markup, no terminal escapes)."""
        return escape(neutralise(str(value)))

    out.print(f"run [bold]{record.id}[/]: [bold]{t(record.state)}[/] ({t(record.backend)}, {t(spec.get('mode'))}, "
              f"{t(spec.get('framework'))})")
    scheduler = record.current.handle.get("scheduler") if record.current else None
    if scheduler and record.state not in TERMINAL:
        handle = record.current.handle if record.current else {}
        job = handle.get("job_id") or handle.get("rayjob") or ""
        why = scheduler.get("reason") or scheduler.get("job_status")
        out.print(f"{t(scheduler.get('scheduler'))} job {t(job)}: {t(scheduler.get('state'))}" + (f" ({t(why)})" if why else ""))
    if record.total_steps:
        running = record.state not in TERMINAL  # a stopped or finished run has no ETA
        out.print(f"step {record.step}/{record.total_steps}" +
                  (f" · ETA {duration(record.eta_seconds)}" if record.eta_seconds and running else ""))
    shown = [("critic/score/mean", "score"), ("critic/rewards/mean", "reward"), ("response_length/mean", "response len"),
             ("perf/throughput", "throughput")]
    metrics = [f"{label} {number(record.metrics[key])}" for key, label in shown
               if isinstance(record.metrics.get(key), (int, float))]
    if metrics:
        out.print("metrics: " + " · ".join(metrics))
    if record.swanlab_url:
        out.print(f"SwanLab: {t(record.swanlab_url)}")
    for attempt in record.attempts:
        added = f" +{t(','.join(attempt.features))}" if attempt.features else ""
        result = "" if attempt.exit_code is None else f" → exit {t(attempt.exit_code)}"
        failure = f" ({t(attempt.failure['class'])})" if attempt.failure and attempt.failure.get("class") else ""
        out.print(f"attempt {attempt.n}{added}: {t(attempt.reason)}{result}{failure}")
    if record.failure:
        out.print(f"[bold red]failure[/]: {t(_failure_text(record))}")
        cause, decision = record.failure.get("cause"), record.failure.get("decision")
        if cause and decision and decision != cause:
            out.print(f"decision: {t(decision)}")
        if record.failure.get("fix"):
            out.print(f"fix: {t(record.failure['fix'])}")
    if record.supervisor_deaths:
        last = record.supervisor_deaths[-1]
        count = len(record.supervisor_deaths)
        now = ("not watched now: " + ("`verl-deploy status` started a new one" if supervisor_alive(record) else
                                      "not restarted (it died the same way 3 times); read supervisor.log")
               if record.state == "supervisor_died" else "a new one took over")
        out.print(f"[bold yellow]supervisor died[/] {count} time(s), last: {t(last.get('error'))} — {t(now)} "
                  f"[dim]({t(record.directory / 'supervisor.log')})[/]")
    unreadable = int(record.scan.get("skipped") or 0)
    if unreadable:
        first = record.scan.get("first_skipped") or {}
        where = f"line {first.get('line')}: " if first.get("line") else ""
        out.print(f"[yellow]{unreadable} log line(s) could not be read[/] and were skipped (first: {t(where)}"
                  f"{t(first.get('why'))})")
    if record.disk_full:
        full = record.disk_full
        out.print(f"[bold red]disk full[/]: {t(full.get('path'))} ({t(full.get('free_bytes'))} bytes free) — "
                  "this record may lag behind the training; free space there")
    for entry in record.notices:
        for delivery in entry.get("deliveries", []):
            if not delivery.get("ok"):
                out.print(f"[yellow]notice not delivered[/]: {t(entry.get('title', ''))} → "
                          f"{t(delivery.get('target'))}: {t(delivery.get('error'))}")
    log = record.current.log if record.current else ""
    container = spec.get("container")
    out.print("[dim]by hand:[/]")
    out.print(f"  tail -f {t(log)}")
    out.print(f"  grep 'Training Progress' {t(log)} | tail -1;  grep -E 'Error|OOM|Exception' {t(log)} | tail")
    prefix = f"docker exec {container} " if record.backend == "docker" and container else ""
    tool = "npu-smi info" if spec.get("device") == "npu" else "nvidia-smi"
    out.print(f"  {prefix}{tool};  {prefix}ray status")


def _failure_text(record) -> str:
    """The failure in one line; a trainer killed without a known failure line says so instead of `None`."""
    import signal

    failure = record.failure or {}
    kind = failure.get("class")
    why = failure.get("cause") or failure.get("decision")
    code = record.current.exit_code if record.current else None
    if not kind:
        if isinstance(code, int) and (code < 0 or code > 128):
            number = -code if code < 0 else code - 128
            try:
                name = signal.Signals(number).name
            except ValueError:
                name = f"signal {number}"
            kind = f"killed by {name}"
        else:
            kind = "no known failure in the log" + (f" (exit {code})" if code is not None else "")
    return f"{kind} — {why}" if why else f"{kind} — see `verl-deploy logs {record.id} --errors`"


@app.command("logs")
def logs_command(run_id: Optional[str] = typer.Argument(None, metavar="[RUN]", help="Run id or prefix (default: newest)."),
                 follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the run ends."),
                 errors: bool = typer.Option(False, "--errors", help="Only lines with Error, OOM or Exception (and known failures)."),
                 attempt_n: Optional[int] = typer.Option(None, "--attempt", help="An earlier attempt's log."),
                 raw: bool = typer.Option(False, "--raw", help="The bytes as the training wrote them, terminal escapes "
                                                             "included (by default control characters are shown inert: ␛, ␍).")) -> None:
    """The training log of a run (the current attempt unless --attempt)."""
    import re

    from verl_deploy.views.safe_text import neutralise

    from verl_deploy.runs.control import ensure_supervised
    from verl_deploy.runs.record import TERMINAL, reload
    from verl_deploy.watch.follow import LogFollower
    from verl_deploy.watch.signatures import load_table

    from verl_deploy.cli.output import fail
    from verl_deploy.findings import error

    if attempt_n is not None and attempt_n < 1:
        raise fail([error("--attempt", f"{attempt_n} is not an attempt number (they count from 1)",
                          "pass --attempt 1 for the first attempt; `verl-deploy status RUN` lists them")])
    record = ensure_supervised(_load(run_id))
    attempts = {a.n: a for a in record.attempts}
    attempt = attempts.get(attempt_n) if attempt_n is not None else record.current
    if attempt is None:
        have = f"attempts {min(attempts)}-{max(attempts)}" if attempts else "no attempt yet"
        raise fail([error("--attempt" if attempt_n is not None else "run",
                          f"run {record.id} has {have}" + (f", not {attempt_n}" if attempt_n is not None else ""),
                          f"pass --attempt {max(attempts)} or less" if attempts else "wait until the run has started")])
    seeds = re.compile(r"Error|OOM|Exception")
    table = load_table()

    def wanted(line: str) -> bool:
        return not errors or bool(seeds.search(line)) or bool(table.failures_in(line))

    shown = (lambda line: line) if raw else neutralise

    follower = LogFollower(attempt.log)
    try:
        while True:
            for line in follower.read_lines():
                if wanted(line):
                    sys.stdout.write(shown(line) + "\n")
            if follower.problem:  # a directory or FIFO where the log should be: say so once, never block on it
                raise fail([error("log", f"attempt {attempt.n}'s log {follower.problem}",
                                  f"put the log file back at that path, or look in {record.directory}/attempt-{attempt.n}/ "
                                  f"(`verl-deploy status {record.id}` shows the run)")])
            sys.stdout.flush()
            if not follow:
                return
            record = reload(record)
            if record.current and record.current.n != attempt.n and attempt_n is None:
                attempt = record.current  # a retry started: go on with its log
                follower = LogFollower(attempt.log)
                sys.stdout.write(f"--- attempt {attempt.n}: {neutralise(attempt.reason)} ---\n")
                continue
            if record.state in TERMINAL and os.path.getsize(attempt.log) <= follower.offset + len(follower.partial):
                last = follower.take_partial().decode("utf-8", errors="replace")  # a last line without newline
                if last and wanted(last):
                    sys.stdout.write(shown(last) + "\n")
                return
            time.sleep(0.2)
    except KeyboardInterrupt:
        return


@app.command("stop")
def stop_command(run_id: str = typer.Argument(..., metavar="RUN", help="Run id or prefix.")) -> None:
    """Stop the training and the Ray session this tool started for it; checkpoints are kept."""
    from rich.markup import escape

    from verl_deploy.cli.output import console
    from verl_deploy.runs.control import stop_run
    from verl_deploy.runs.record import TERMINAL

    from verl_deploy.runs.control import stop_damaged
    from verl_deploy.runs.record import RecordError, RunRecord

    found = _find(run_id)
    try:
        record = RunRecord.load(found)
    except RecordError as exc:
        console(stderr=True).print(f"[yellow]warning[/]: {escape(str(exc))}", soft_wrap=True)
        console().print(f"run {found}: {stop_damaged(found, str(exc))}")
        return
    if record.state in TERMINAL:
        console().print(f"run {record.id} already {record.state}")
        return
    from verl_deploy.cli.output import fail
    from verl_deploy.findings import error
    from verl_deploy.rayauth import AuthError

    try:
        why = stop_run(record)
    except AuthError as exc:  # the cluster refused us: its job may still run
        raise fail([error("stop", f"run {record.id} was not stopped (it goes on): {exc.problem}",
                          f"{exc.fix}, then `verl-deploy stop {record.id}` again")]) from None
    if why:
        console().print(f"run {record.id}: {escape(why)}; it was not signalled (the training had already "
                        "ended); the run is marked stopped", soft_wrap=True)
    console().print(f"run {record.id} stopped (checkpoints kept in {record.spec.get('ckpts_dir') or 'the checkpoint directory'})")


@app.command("_supervise", hidden=True)
def supervise_command(run_id: str) -> None:
    from verl_deploy.runs.control import supervise

    supervise(run_id)
