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
    allow_local_checkpoints: bool = typer.Option(False, "--allow-local-checkpoints", help="Multi-node: launch even "
                                                 "though the nodes do not share the checkpoint directory (no resume)."),
    rehearse: bool = typer.Option(False, "--rehearse", help="First a rehearsal (<= 3 steps, 1/4 lengths, one save and "
                                  "one resume); the real run starts only when it ends well."),
    rehearse_only: bool = typer.Option(False, "--rehearse-only", help="Only the rehearsal; the real run is not started."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Change nothing: report every blocker this launch would hit "
                                 "(check, rules, memory, verify, entry import, SwanLab, cluster) in one pass; exit 0 "
                                 "only when it would start."),
    **options: Any,
) -> None:
    """Check, confirm, and start the training detached; a supervisor watches and recovers it."""
    from verl_deploy.cli.confirm import confirm
    from verl_deploy.cli.launch_gate import gather, refuse, report
    from verl_deploy.cli.options import flags_from
    from verl_deploy.cli.output import fail
    from verl_deploy.findings import UserError
    from verl_deploy.runs.control import LaunchError
    from verl_deploy.runs.launch import launch

    try:
        flags, config_file = flags_from(options)  # once: `--swanlab-api-key -` reads stdin
    except UserError as exc:
        raise fail(exc.findings, as_json=json_output) from None
    from verl_deploy.cli.launch_gate import invalid_notify

    refused_urls = invalid_notify(notify or [])
    if refused_urls:  # a malformed flag value, like the parser's own refusals: at once, before any probe
        raise fail(refused_urls, as_json=json_output)
    ray_address = ray_address or os.environ.get("RAY_API_SERVER_ADDRESS")
    # every gate at once: the check (with this run's flags), rules, memory, verify, the entry import, SwanLab, ...
    gate = gather(flags, config_file, options, backend=backend, ray_address=ray_address, job_env=job_env or [],
                  notify=notify or [], skip_check=skip_check, no_estimate=no_estimate, verify=verify,
                  search_root=search_root, force=force, reuse_ray=reuse_ray, announce=None if json_output else _say,
                  allow_local_checkpoints=allow_local_checkpoints)
    if dry_run:
        if not yes and not sys.stdin.isatty():
            gate.add([_confirmation_note()])
        report(gate, as_json=json_output, dry_run=True)
        raise typer.Exit(code=0 if gate.ok else 1)
    if not gate.ok:
        raise refuse(gate, as_json=json_output)
    if not json_output:
        from verl_deploy.cli.output import print_findings

        print_findings([f for f in gate.findings if f.level == "warning"])
    prepared, chosen, backend_options = gate.prepared, gate.chosen or "local", gate.backend_options
    spec = prepared.spec
    confirm(prepared, f"launch ({chosen} backend)", yes=yes, as_json=json_output)
    if rehearse or rehearse_only:
        from verl_deploy.cli.rehearse_flow import rehearse_first

        rehearse_first(spec, lambda part: launch(part, backend=chosen, notify_urls=notify or [], stall_seconds=stall_minutes * 60,
                                                 start_timeout=start_timeout, say=_say, backend_options=backend_options),
                       only=rehearse_only, json_output=json_output, say=_say)
    try:
        record = launch(spec, backend=chosen, notify_urls=notify or [], stall_seconds=stall_minutes * 60,
                        start_timeout=start_timeout, say=_say, backend_options=backend_options, force=force,
                        calibrated=calibrated_features(prepared))
    except LaunchError as exc:
        raise fail([_launch_finding(exc)], as_json=json_output) from None
    after_start(record, follow, json_output)


def after_start(record, follow: bool, json_output: bool) -> None:
    """What launch and resume print once the run started: its status, or (with --follow) its end."""
    if follow:
        record = _follow(record.id, json_output)
        if json_output:
            print_json(record.status_document())
        else:
            show_end(record)
        raise typer.Exit(code=0 if record.state == "succeeded" else 1)
    if json_output:
        print_json(record.status_document())
        return
    _announce(record)


def calibrated_features(prepared) -> dict:
    """The estimate's features that came from the calibration log (an OOM seen before), with what it saw."""
    memory = prepared.memory
    observed = getattr(memory, "observed", None) or {}
    if not observed:
        return {}
    seen = "; ".join(observed.values())
    return {name: seen for name in prepared.spec.estimate_features}


def show_end(record) -> None:
    """The end of a followed run: the cause, the evidence line, and the next step as a command to copy."""
    from rich.markup import escape

    from verl_deploy.cli.output import console
    from verl_deploy.runs.next_step import end_lines
    from verl_deploy.views.safe_text import neutralise

    out = console()
    for line in end_lines(record):
        out.print(escape(neutralise(line)), soft_wrap=True)


def _confirmation_note():
    from verl_deploy.findings import warning

    return warning("confirmation", "no terminal here: launch will stop at the confirmation unless --yes is given",
                   "show the user the plan, and after their yes add --yes", area="launch")


def _launch_finding(exc):
    """A launch that failed after the confirmation, as one finding: the fix it names, else where to look."""
    from verl_deploy.findings import error

    message, _, fix = str(exc).partition(" — fix: ")
    return error("launch", message, fix or "see `verl-deploy status` and `verl-deploy logs`", area="launch")


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
    if record.validation.get("metrics"):  # verl's validation (val-core/...), the final one when training ended
        from verl_deploy.watch.describe import validation_text

        when = "final, " if record.validation.get("final") else ""
        out.print(f"validation ({when}step {t(record.validation.get('step'))}): "
                  f"{t(validation_text(record.validation['metrics']))}", soft_wrap=True)
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
    from verl_deploy.runs.next_step import end_of_run

    end = end_of_run(record)
    if end is not None:  # the step that really comes next, as a command to copy
        out.print(f"next: {t(end['next'])}")
        out.print(f"  {t(end['command'])}")
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

    if errors and attempt_n is None and len(record.attempts) > 1:  # --errors: every attempt's failures, oldest first
        for earlier in record.attempts[:-1]:
            sys.stdout.write(f"--- attempt {earlier.n}: {neutralise(earlier.reason)} ---\n")
            reader = LogFollower(earlier.log)
            lines = list(reader.read_lines())
            while lines:
                for line in lines:
                    if wanted(line):
                        sys.stdout.write(shown(line) + "\n")
                lines = list(reader.read_lines())
            last = reader.take_partial().decode("utf-8", errors="replace")
            if last and wanted(last):
                sys.stdout.write(shown(last) + "\n")
        sys.stdout.write(f"--- attempt {attempt.n}: {neutralise(attempt.reason)} ---\n")

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


def _newest_live(yes: bool) -> str:
    """`stop` without a run id: the newest live run, as `status`/`logs` default to the newest run; with several
    live, ask (or, off a terminal without --yes, refuse and name them)."""
    from verl_deploy.cli.output import fail
    from verl_deploy.findings import error
    from verl_deploy.runs.record import TERMINAL, RecordError, RunRecord, list_runs

    live = []
    for run_id in list_runs():
        try:
            if RunRecord.load(run_id).state not in TERMINAL:
                live.append(run_id)
        except RecordError:
            continue
    if not live:
        raise fail([error("run", "no live run to stop", "see `verl-deploy runs`; a damaged run is stopped by its id")])
    if len(live) == 1 or yes:
        return live[0]
    others = ", ".join(live[1:4]) + (f" and {len(live) - 4} more" if len(live) > 4 else "")
    if not sys.stdin.isatty():  # nothing to confirm with: a usage matter (exit 2), nothing was stopped
        fail([error("run", f"{len(live)} runs are live (newest {live[0]}; also {others})",
                    f"name the run (`verl-deploy stop {live[0]}`), or pass --yes to stop the newest")])
        raise typer.Exit(code=2)
    if not typer.confirm(f"{len(live)} runs are live; stop the newest, {live[0]} (also live: {others})?"):
        raise typer.Exit(code=1)
    return live[0]


@app.command("stop")
def stop_command(run_id: Optional[str] = typer.Argument(None, metavar="[RUN]", help="Run id or prefix (default: the "
                                                        "newest live run)."),
                 yes: bool = typer.Option(False, "--yes", "-y", help="With no RUN and several live runs: stop the "
                                          "newest without asking.")) -> None:
    """Stop the training and the Ray session this tool started for it; checkpoints are kept."""
    from rich.markup import escape

    from verl_deploy.cli.output import console
    from verl_deploy.runs.control import stop_run
    from verl_deploy.runs.record import TERMINAL

    from verl_deploy.runs.control import stop_damaged
    from verl_deploy.runs.record import RecordError, RunRecord

    found = _find(run_id) if run_id is not None else _newest_live(yes)
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
