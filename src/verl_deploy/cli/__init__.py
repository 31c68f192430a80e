"""The `verl-deploy` command line: a thin layer over the pipeline modules.

Each subcommand lives in its own module and imports heavy libraries only when it runs,
so `verl-deploy --help` stays quick.
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

from verl_deploy.cli.usage_errors import OneLineErrorGroup  # noqa: E402

app = typer.Typer(
    name="verl-deploy",
    cls=OneLineErrorGroup,
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


# imported in the order a user meets them: that is the order `--help` lists them
from verl_deploy.cli import check_cmd, init_cmd, plan_cmd, generate_cmd, run_cmds  # noqa: E402,F401,I001
from verl_deploy.cli import report_cmd, evidence_cmd  # noqa: E402,F401,I001
from verl_deploy.cli import diagnose_cmd, features_cmd, container_cmd, swanlab_cmd  # noqa: E402,F401,I001
from verl_deploy.cli import verify_env_cmd  # noqa: E402,F401,I001
from verl_deploy.cli import bundle_cmd  # noqa: E402,F401,I001
from verl_deploy.cli import clean_cmd  # noqa: E402,F401,I001
from verl_deploy.cli import import_cmd  # noqa: E402,F401,I001
from verl_deploy.cli import migrate_cmd  # noqa: E402,F401,I001
from verl_deploy.cli import resume_cmd  # noqa: E402,F401,I001


def main() -> None:
    app(prog_name="verl-deploy")  # the same name in messages whether run as a script or `python -m verl_deploy`
