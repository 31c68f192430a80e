"""`verl-deploy report RUN|LOGFILE`: an HTML page with the metric curves, attempts, failure and configuration."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from verl_deploy.cli import app

EPILOG = """\
Examples:

  verl-deploy report                                  # the newest run -> runs/<id>/report/report.html
  verl-deploy report 20261130-1942 --output ./report  # a run of this tool
  verl-deploy report /data/logs/train.log -o ./r      # any verl log, from anywhere

Writes DIR/report.html (self-contained: the plots are inside, it opens offline) and one SVG per
metric, grouped (validation, reward/score, lengths, actor losses and clip fractions, entropy,
timing and throughput, other), each axis labelled with its unit, with attempts, OOM retries,
resumes and failures marked on the step axis; verl's final validation metrics in the summary.
Needs matplotlib: pip install 'verl-deploy[report]'.
"""


@app.command("report", epilog=EPILOG)
def report_command(target: Optional[str] = typer.Argument(None, metavar="[RUN|LOGFILE]",
                                                          help="Run id or prefix (default: newest), or a verl log file."),
                   output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="DIR",
                                                         help="Where to write (default: the run's report/ folder, or "
                                                              "LOGNAME-report/ here for a log)."),
                   json_output: bool = typer.Option(False, "--json", help="Print what was written as JSON.")) -> None:
    """A self-contained HTML report with a plot of every metric, for a run or any verl log."""
    from verl_deploy.cli.output import console, fail, print_json
    from verl_deploy.findings import error

    try:
        import matplotlib  # noqa: F401  (only to say it is missing in one line)
    except ImportError:
        raise fail([error("report", "drawing the plots needs matplotlib", "pip install 'verl-deploy[report]'")],
                   as_json=json_output) from None
    from verl_deploy.boundedread import UnreadableFile
    from verl_deploy.runs.record import RecordError, RunRecord, find_run
    from verl_deploy.views.report import build, from_log, from_run

    if target and Path(target).is_file():
        source = from_log(Path(target))
        out_dir = output or Path(f"{Path(target).stem}-report")
    else:
        if target and ("/" in target or Path(target).suffix in (".log", ".txt", ".out")):
            raise fail([error("report", f"{target} is not a file", "give an existing verl log or a run id")],
                       as_json=json_output)
        found = find_run(target)
        if found is None:
            raise fail([error("run", f"no run {target!r}" if target else "no runs yet",
                              "give a run id (`verl-deploy runs`) or a verl log file")], as_json=json_output)
        try:
            record = RunRecord.load(found)
        except (RecordError, OSError, ValueError, TypeError, KeyError) as exc:
            raise fail([error("run", f"the record of {found} cannot be read ({exc})", "report its log file instead: "
                              f"verl-deploy report <runs dir>/{found}/attempt-N/train.log")], as_json=json_output)
        source = from_run(record)
        out_dir = output or record.directory / "report"
    if out_dir.exists() and not out_dir.is_dir():
        raise fail([error("output", f"{out_dir} is a file", "give a directory to --output")], as_json=json_output)
    try:
        written = build(source, out_dir)
    except UnreadableFile as exc:
        raise fail([error("log", str(exc), "point the report at a regular log file: verl-deploy report PATH/train.log")],
                   as_json=json_output) from None
    except OSError as exc:
        raise fail([error("output", f"cannot write the report to {out_dir}: {exc.strerror or exc}",
                          "give a writable directory to --output")], as_json=json_output)
    if json_output:
        print_json(written)
        return
    out = console()
    out.print(f"report: [bold]{written['html']}[/] ({written['metrics']} metrics over {written['steps']} steps, "
              f"{len(written['plots'])} plots)", soft_wrap=True)
    if not written["metrics"]:
        out.print("[yellow]the log has no `step:N - key:value` metric lines[/]")
