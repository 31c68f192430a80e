"""`verl-deploy plan`: the whole resolved configuration, where each value came from, what is
wrong with it, and the exact verl command, before anything is touched."""

from __future__ import annotations

from typing import Any

import typer

from verl_deploy.cli import app
from verl_deploy.cli.options import spec_options

EPILOG = """\
Examples:

  verl-deploy plan                                    # the built-in example (8 NPUs, Megatron, verl 0.7.0)

  verl-deploy plan --mode one-step-off --trainer-gpus 4 --rollout-gpus 4

  MODEL_PATH=/mnt/public/Qwen3-8B TRAIN_STEPS=4 verl-deploy plan --mask 1010000

  verl-deploy plan --framework fsdp --device gpu --verl-version 0.9.1 --json | jq .overrides

  verl-deploy plan --device-memory-gb 32 --json | jq '.memory | {peak_gb, fits, needs}'   # a 910B4

Exit status: 0 when there is no error, 1 otherwise (the findings say what and how to fix it).
"""


@app.command("plan", epilog=EPILOG)
@spec_options
def plan_command(json_output: bool = typer.Option(False, "--json", help="Print the plan as JSON."), **options: Any) -> None:
    """Show the resolved configuration with sources, the findings and the verl command."""
    from verl_deploy.cli.output import fail, print_json
    from verl_deploy.cli.run_common import prepare_from_options
    from verl_deploy.cli.views import show_plan
    from verl_deploy.render import plan_document

    prepared = prepare_from_options(options, as_json=json_output)
    if prepared.plan is None:
        raise fail(prepared.findings, as_json=json_output)
    if json_output:
        document = plan_document(prepared.plan, prepared.findings, prepared.checked_against, prepared.memory)
        document["ok"] = prepared.ok
        document["command"] = ["python3", *prepared.plan.argv()]
        print_json(document)
    else:
        show_plan(prepared)
    if not prepared.ok:
        raise typer.Exit(code=1)
