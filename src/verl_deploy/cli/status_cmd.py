"""`verl-deploy status`: a run's state, progress, metrics, attempts, failure and next step, read from its record."""

from __future__ import annotations

import signal
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from verl_deploy.cli import app
from verl_deploy.cli.one_run import load
from verl_deploy.cli.output import console, print_json
from verl_deploy.runs.next_step import end_of_run
from verl_deploy.runs.predicted_oom import summary
from verl_deploy.runs.record import TERMINAL, RunRecord
from verl_deploy.runs.supervisor import ensure_supervised, still_exiting, supervisor_alive
from verl_deploy.views.safe_text import neutralise
from verl_deploy.watch.describe import duration, number, validation_text

SHOWN_METRICS = [("critic/score/mean", "score"), ("critic/rewards/mean", "reward"),
                 ("response_length/mean", "response len"), ("perf/throughput", "throughput")]

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
    record = ensure_supervised(load(run_id, json_output))
    if watch and not json_output:
        from verl_deploy.cli.watch_view import follow_run

        follow_run(record.id)
        return
    if json_output:
        print_json(record.status_document())
        return
    out = console()
    for part in (_header, _progress, _failure, _supervision, _by_hand):
        part(out, record)


def t(value: object) -> str:
    """Anything from a record or a log, as inert text (no markup, no terminal escapes)."""
    return escape(neutralise(str(value)))


def _header(out: Console, record: RunRecord) -> None:
    """The run, its backend, mode and framework; while it is queued or running, what its scheduler says."""
    spec = record.spec
    out.print(f"run [bold]{record.id}[/]: [bold]{t(record.state)}[/] ({t(record.backend)}, {t(spec.get('mode'))}, "
              f"{t(spec.get('framework'))})")
    handle = record.current.handle if record.current else None
    scheduler = handle.scheduler if handle is not None else None
    if handle is not None and scheduler and record.state not in TERMINAL:
        job = handle.job_id or handle.rayjob or ""
        why = scheduler.get("reason") or scheduler.get("job_status")
        out.print(f"{t(scheduler.get('scheduler'))} job {t(job)}: {t(scheduler.get('state'))}" + (f" ({t(why)})" if why else ""))


def _progress(out: Console, record: RunRecord) -> None:
    """Step N/M with the ETA, the last metrics, verl's validation, the SwanLab link, each attempt."""
    if record.total_steps:
        running = record.state not in TERMINAL  # a stopped or finished run has no ETA
        out.print(f"step {record.step}/{record.total_steps}" +
                  (f" · ETA {duration(record.eta_seconds)}" if record.eta_seconds and running else ""))
    metrics = [f"{label} {number(record.metrics[key])}" for key, label in SHOWN_METRICS
               if isinstance(record.metrics.get(key), (int, float))]
    if metrics:
        out.print("metrics: " + " · ".join(metrics))
    if record.validation.get("metrics"):  # verl's validation (val-core/...), the final one when training ended
        when = "final, " if record.validation.get("final") else ""
        out.print(f"validation ({when}step {t(record.validation.get('step'))}): "
                  f"{t(validation_text(record.validation['metrics']))}", soft_wrap=True)
    if record.swanlab_url:
        out.print(f"SwanLab: {t(record.swanlab_url)}")
    predicted = summary(record.current.predicted_oom) if record.current and record.state not in TERMINAL else None
    if predicted:
        out.print(f"[yellow]{t(predicted)}[/]")
    for attempt in record.attempts:
        added = f" +{t(','.join(attempt.features))}" if attempt.features else ""
        result = "" if attempt.exit_code is None else f" → exit {t(attempt.exit_code)}"
        failure = f" ({t(attempt.failure['class'])})" if attempt.failure and attempt.failure.get("class") else ""
        out.print(f"attempt {attempt.n}{added}: {t(attempt.reason)}{result}{failure}")


def _failure(out: Console, record: RunRecord) -> None:
    """The failure, the decision taken on it, its fix, and the step that really comes next, as a command."""
    if record.failure:
        out.print(f"[bold red]failure[/]: {t(_failure_text(record))}")
        cause, decision = record.failure.get("cause"), record.failure.get("decision")
        if cause and decision and decision != cause:
            out.print(f"decision: {t(decision)}")
        if record.failure.get("fix"):
            out.print(f"fix: {t(record.failure['fix'])}")
    end = end_of_run(record)
    if end is not None:
        out.print(f"next: {t(end['next'])}")
        out.print(f"  {t(end['command'])}")


def _supervision(out: Console, record: RunRecord) -> None:
    """What went wrong around the watching: supervisor deaths, unreadable lines, a full disk, notices not sent."""
    if record.supervisor_deaths:
        last = record.supervisor_deaths[-1]
        count = len(record.supervisor_deaths)
        now = ("not watched now: " + ("it is still exiting; `verl-deploy status` again starts a new one"
                                      if still_exiting(record) else "`verl-deploy status` started a new one"
                                      if supervisor_alive(record) else
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


def _by_hand(out: Console, record: RunRecord) -> None:
    """The commands to look for oneself, run where the training runs (its container, when it has one)."""
    log = record.current.log if record.current else ""
    container = record.current.handle.container if record.current else None
    out.print("[dim]by hand:[/]")
    out.print(f"  tail -f {t(log)}")
    out.print(f"  grep 'Training Progress' {t(log)} | tail -1;  grep -E 'Error|OOM|Exception' {t(log)} | tail")
    prefix = f"docker exec {container} " if container else ""
    tool = "npu-smi info" if record.spec.get("device") == "npu" else "nvidia-smi"
    out.print(f"  {prefix}{tool};  {prefix}ray status")


def _failure_text(record) -> str:
    """The failure in one line; a trainer killed without a known failure line says so instead of `None`."""
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
