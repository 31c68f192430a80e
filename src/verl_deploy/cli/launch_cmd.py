"""`verl-deploy launch`: the launch stage (runs/launch.py) from the command line, and what it prints."""

from __future__ import annotations

import os
import sys
from typing import Any, List, Optional

import typer

from verl_deploy.backends.protocol import Target
from verl_deploy.cli import app
from verl_deploy.cli.confirm import confirm
from verl_deploy.cli.launch_gate import refuse, report
from verl_deploy.cli.one_run import after_start, say
from verl_deploy.cli.options import flags_from, spec_options
from verl_deploy.cli.output import fail, print_findings, print_json
from verl_deploy.cli.sched_options import SCHED_OPTION_NAMES, scheduler_options
from verl_deploy.findings import Finding, UserError, error, warning
from verl_deploy.pipeline import Prepared
from verl_deploy.runs.attempts import LaunchError
from verl_deploy.runs.gate import invalid_notify
from verl_deploy.runs.launch import LaunchOutcome, launch
from verl_deploy.runs.request import LaunchRequest
from verl_deploy.runs.rehearse import RehearsalFailed

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
the last checkpoint; when the responses near the length at which the memory estimate runs out of
memory, it notices it and resumes from the next checkpoint with the feature that prevents it
(--no-preempt-oom: the notice only); on KV-cache OOM it lowers gpu_memory_utilization; host OOM and everything
else stop with the cause and fix. It speaks only on failure or a stall (--notify URLs: apprise,
checked before anything starts). It starts and stops only its own Ray (never a bare `ray stop`), and
refuses a checkpoint directory a live run uses (--force).
"""


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
    no_preempt_oom: bool = typer.Option(False, "--no-preempt-oom", help="When the responses near the length at which "
                                        "the memory estimate runs out of memory, only notice it (default: also stop at "
                                        "the next checkpoint and resume with the feature that prevents it)."),
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
    try:
        flags, config_file = flags_from(options)  # once: `--swanlab-api-key -` reads stdin
    except UserError as exc:
        raise fail(exc.findings, as_json=json_output) from None
    refused_urls = invalid_notify(notify or [])
    if refused_urls:  # a malformed flag value, like the parser's own refusals: at once, before any probe
        raise fail(refused_urls, as_json=json_output)
    request = LaunchRequest(
        flags=flags, config_file=config_file, ignore_detected=bool(options.get("ignore_detected")), backend=backend,
        target=Target(ray_address=ray_address or os.environ.get("RAY_API_SERVER_ADDRESS"), job_env=tuple(job_env or ()),
                      reuse_ray=reuse_ray, scheduler={name: options.get(name) for name in SCHED_OPTION_NAMES}),
        check=not skip_check, search_roots=tuple(search_root) if search_root is not None else None,
        estimate=not no_estimate, verify=verify, force=force, allow_local_checkpoints=allow_local_checkpoints,
        notify=tuple(notify or ()), stall_seconds=stall_minutes * 60, preempt_oom=not no_preempt_oom,
        start_timeout=start_timeout,
        rehearse=rehearse, rehearse_only=rehearse_only, dry_run=dry_run)
    try:
        outcome = launch(request, confirm=_confirm_with(yes, json_output), say=say,
                         announce=None if json_output else say)
    except RehearsalFailed as exc:
        raise fail([error("rehearsal", str(exc), exc.fix)], as_json=json_output) from None
    except LaunchError as exc:
        raise fail([_launch_finding(exc)], as_json=json_output) from None
    _show(outcome, request, yes=yes, follow=follow, json_output=json_output)


def _confirm_with(yes: bool, json_output: bool):
    """The confirmation the stage asks for: the warnings, the summary, then a yes (or --yes)."""
    def ask(prepared: Prepared, action: str, warnings: list[Finding]) -> None:
        if not json_output:
            print_findings(warnings)
        confirm(prepared, action, yes=yes, as_json=json_output)
    return ask


def _show(outcome: LaunchOutcome, request: LaunchRequest, *, yes: bool, follow: bool, json_output: bool) -> None:
    """What the stage did: the dry run's report, the refusal, the rehearsal alone, or the started run."""
    gate = outcome.gate
    if request.dry_run:
        if not yes and not sys.stdin.isatty():
            gate.add([_confirmation_note()])
        report(gate, as_json=json_output, dry_run=True)
        raise typer.Exit(code=0 if gate.ok else 1)
    if not gate.ok:
        raise refuse(gate, as_json=json_output)
    if outcome.record is None:  # --rehearse-only: the rehearsal passed, the real run was not started
        document = outcome.rehearsal.as_dict() if outcome.rehearsal else {"runs": []}
        if json_output:
            print_json({"ok": True, "rehearsal": document})
        else:
            from verl_deploy.cli.output import console

            console().print(f"rehearsal passed: {', '.join(r['id'] for r in document['runs'])} "
                            "(--rehearse-only: the real run was not started)")
        raise typer.Exit(code=0)
    after_start(outcome.record, follow, json_output)


def _confirmation_note() -> Finding:
    return warning("confirmation", "no terminal here: launch will stop at the confirmation unless --yes is given",
                   "show the user the plan, and after their yes add --yes", area="launch")


def _launch_finding(exc: LaunchError) -> Finding:
    """A launch that failed after the confirmation, as one finding: the fix it names, else where to look."""
    message, _, fix = str(exc).partition(" — fix: ")
    return error("launch", message, fix or "see `verl-deploy status` and `verl-deploy logs`", area="launch")
