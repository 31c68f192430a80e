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
        "then `verl-deploy generate --output-dir ./verl_scripts`."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

from verl_deploy.cli import (check_cmd, container_cmd, diagnose_cmd, features_cmd, generate_cmd, init_cmd,  # noqa: E402,F401
                             plan_cmd, run_cmds, swanlab_cmd)  # noqa: E402,F401  (registers commands)


def main() -> None:
    app()
