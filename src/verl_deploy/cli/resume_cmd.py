"""`verl-deploy resume RUN`: the same run again, from its newest complete checkpoint, as its next attempt.

Relaunching with the same --ckpts-dir resumes too, but only if the user knows to, and it starts a new
record; `resume` keeps the run's spec and record (its attempts, notices, metrics) and adds what the end
of the run said to add (`--features recompute`, a shorter `--max-response-length`, ...).
"""

from __future__ import annotations

from typing import Optional

import typer

from verl_deploy.cli import app
from verl_deploy.cli.confirm import confirm
from verl_deploy.cli.one_run import after_start, load, say
from verl_deploy.cli.output import fail
from verl_deploy.findings import Finding, error
from verl_deploy.pipeline import Prepared
from verl_deploy.runs.resume import ResumeError, ResumeRequest, resume

EPILOG = """\
Examples:

  verl-deploy resume 20261130-101500-ab12                       # same spec, newest complete checkpoint
  verl-deploy resume 20261130-101500-ab12 --features recompute --yes --json
  verl-deploy resume 20261130 --max-response-length 4096 --follow

The run must have ended (failed or stopped; `verl-deploy stop RUN` first if it still runs). The end
of a run (`launch --follow`, `status`, `status --json | jq .end`) names the resume command to copy.

Exit status: 0 when the new attempt started (with --follow: when the run then succeeded), 1 when it
was refused or failed (the findings say why), 2 for a usage error or no terminal without --yes.
"""


@app.command("resume", epilog=EPILOG)
def resume_command(
    run_id: str = typer.Argument(..., metavar="RUN", help="Run id or prefix."),
    features: Optional[str] = typer.Option(None, "--features", metavar="LIST",
                                           help="Features to add (or -NAME to turn off), e.g. recompute or -offload."),
    max_response_length: Optional[int] = typer.Option(None, "--max-response-length", min=1,
                                                      help="A new maximum response length (tokens)."),
    gpu_memory_utilization: Optional[float] = typer.Option(None, "--gpu-memory-utilization", min=0.05, max=0.99,
                                                           help="A new rollout gpu_memory_utilization."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    follow: bool = typer.Option(False, "--follow", help="Stay until the run ends; exit 0 only if it succeeded."),
    json_output: bool = typer.Option(False, "--json", help="Print the run's status as JSON."),
    start_timeout: float = typer.Option(180.0, "--start-timeout", min=1, metavar="SECONDS",
                                        help="Fail if the training writes nothing for this long after starting."),
) -> None:
    """Resume a failed or stopped run from its newest complete checkpoint, as a new attempt of the same record."""
    record = load(run_id, json_output)
    request = ResumeRequest(features=features, max_response_length=max_response_length,
                            gpu_memory_utilization=gpu_memory_utilization, start_timeout=start_timeout)

    def ask(prepared: Prepared, action: str, warnings: list[Finding]) -> None:
        confirm(prepared, action, yes=yes, as_json=json_output)

    try:
        record = resume(record, request, confirm=ask, say=say)
    except ResumeError as exc:
        raise fail(exc.findings, as_json=json_output) from None
    except Exception as exc:  # the backend could not start it: one finding, the record says so too
        raise fail([error("resume", f"run {record.id} could not be resumed: {exc}",
                          f"see `verl-deploy status {record.id}` and `verl-deploy logs {record.id}`", area="launch")],
                   as_json=json_output) from None
    after_start(record, follow, json_output)
