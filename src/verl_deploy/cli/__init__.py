"""The `verl-deploy` command line: a thin layer over the pipeline modules.

Each subcommand lives in its own module and imports heavy libraries only when it runs,
so `verl-deploy --help` stays quick.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="verl-deploy",
    help=(
        "From a bare Ascend NPU or NVIDIA GPU host to a running, watched verl DAPO training.\n\n"
        "Start with `verl-deploy plan` (the built-in example: Qwen3-8B, DAPO, Megatron, 8 NPUs, verl 0.7.0), "
        "then `verl-deploy generate --output-dir ./verl_scripts`. On a real host: check → init → plan → launch → "
        "status; `diagnose` explains any verl log."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# imported in the order a user meets them: that is the order `--help` lists them
from verl_deploy.cli import check_cmd, init_cmd, plan_cmd, generate_cmd, run_cmds  # noqa: E402,F401,I001
from verl_deploy.cli import report_cmd, evidence_cmd  # noqa: E402,F401,I001
from verl_deploy.cli import diagnose_cmd, features_cmd, container_cmd, swanlab_cmd  # noqa: E402,F401,I001


def main() -> None:
    app()
