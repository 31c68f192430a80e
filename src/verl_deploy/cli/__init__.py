"""The `verl-deploy` command line: a thin layer over the pipeline modules.

Each subcommand lives in its own module, imported only when that subcommand runs (cli/lazy_group.py),
so `verl-deploy --help` stays quick. A new subcommand: one line in COMMANDS below (or, eagerly, one
import line at the end of this file).
"""

from __future__ import annotations

import typer


def _hide_flag_metavar() -> None:
    """Typer >= 0.24 shows `<bool>` beside every flag (--force, --json, --help), which reads as if
    `--force=true` were accepted; a flag takes no value, so its help shows none."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "_verl_deploy", False):
        return

    def display_type_rich(self, ctx):  # type: ignore[no-untyped-def]
        if self.is_flag and not self.count:
            return None
        return shown(self, ctx)

    display_type_rich._verl_deploy = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


_hide_flag_metavar()

from verl_deploy.cli.lazy_group import LazyCommand, LazyCommandGroup  # noqa: E402

app = typer.Typer(
    name="verl-deploy",
    cls=LazyCommandGroup,
    help=(
        "From a bare Ascend NPU or NVIDIA GPU host to a running, watched verl DAPO training.\n\n"
        "Start with `verl-deploy plan` (the built-in example: Qwen3-8B, DAPO, Megatron, 8 NPUs, verl 0.7.0), "
        "then `verl-deploy generate --output-dir ./verl_scripts`. On a real host: check → init → plan → launch → "
        "status; `diagnose` explains any verl log."
    ),
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

def _print_version(value: bool) -> None:
    if value:
        from verl_deploy import __version__

        typer.echo(f"verl-deploy {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_print_version,
                                       help="Print the version and exit.")) -> None:
    """From a bare Ascend NPU or NVIDIA GPU host to a running, watched verl DAPO training."""


def _in(module: str, help: str, hidden: bool = False) -> LazyCommand:
    return LazyCommand(f"verl_deploy.cli.{module}", help, hidden)


# in the order a user meets them: that is the order `--help` lists them; each help is the first line of the
# command's docstring (tests/test_lazy_commands.py holds them equal)
COMMANDS: dict[str, LazyCommand] = {
    "check": _in("check_cmd", "Probe the host (or the run's container) and say whether the training can run here."),
    "init": _in("init_cmd", "Ask the questions of the seeds' rounds, prefilled with what was detected, and write a "
                "config file."),
    "plan": _in("plan_cmd", "Show the resolved configuration with sources, the findings and the verl command."),
    "generate": _in("generate_cmd", "Write the two scripts (start_verl.sh -> run_training.sh) and plan.json for this "
                    "run."),
    "launch": _in("launch_cmd", "Check, confirm, and start the training detached; a supervisor watches and recovers it."),
    "runs": _in("runs_cmd", "List the runs this host launched, newest first (a damaged record is listed as such, the "
                "others still shown)."),
    "status": _in("status_cmd", "State, step N/M with ETA, last metrics, SwanLab link, attempts, and commands to look by "
                  "hand."),
    "logs": _in("logs_cmd", "The training log of a run (the current attempt unless --attempt)."),
    "stop": _in("stop_cmd", "Stop the training and the Ray session this tool started for it; checkpoints are kept."),
    "resume": _in("resume_cmd", "Resume a failed or stopped run from its newest complete checkpoint, "
                  "as a new attempt of the same record."),
    "_supervise": _in("supervise_cmd", "", hidden=True),
    "report": _in("report_cmd", "A self-contained HTML report with a plot of every metric, for a run or any verl "
                  "log."),
    "evidence": _in("evidence_cmd", "Collect what a hang needs (stack dumps, devices, log tails) without touching the "
                    "run."),
    "diagnose": _in("diagnose_cmd", "Read a verl log and say what happened: progress, metrics, SwanLab link, and the "
                    "root cause of a failure with its fix."),
    "bundle": _in("bundle_cmd", "One .tar.gz for a verl issue: plan, scripts, record, failure, log "
                  "errors, check, versions; secrets redacted."),
    "clean": _in("clean_cmd", "After a crash: end what the run left behind on every node (its Ray, "
                 "vLLM/SGLang servers, device holders)."),
    "features": _in("features_cmd", "List the features, or decode a feature mask."),
    "verify-env": _in("verify_env_cmd", "Build (once) a local environment where verl's own validation runs on a CPU "
                      "box."),
    "import": _in("import_cmd", "Read a verl launch script (without running it) and write the config "
                  "that launches the same run."),
    "migrate": _in("migrate_cmd", "Move a config to another verl release: moved keys mapped, removed "
                   "ones named, the result checked."),
    "container": _in("container_cmd", "Training containers: create one with the NPU/GPU devices and driver mounts."),
    "swanlab": _in("swanlab_cmd", "SwanLab: log in where the training runs (the key never on a command line)."),
}
LazyCommandGroup.table = COMMANDS
LazyCommandGroup.typer_app = app


def main() -> None:
    app(prog_name="verl-deploy")  # the same name in messages whether run as a script or `python -m verl_deploy`
