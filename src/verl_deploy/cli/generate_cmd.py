"""`verl-deploy generate`: write start_verl.sh, run_training.sh and plan.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from verl_deploy.cli import app
from verl_deploy.cli.options import spec_options

EPILOG = """\
Examples:

  verl-deploy generate --output-dir ./verl_scripts     # the built-in example

  verl-deploy generate --mask 1010000 --model-path /mnt/public/Qwen3-8B --train-steps 4 --force

  verl-deploy generate --mode one-step-off --framework fsdp --device gpu --verl-version 0.9.1

Then, in the container: cd /verl && bash start_verl.sh

Nothing is written when there is an error; existing scripts need --force.
The SwanLab API key goes to swanlab.env (mode 0600) beside the scripts, never into them.
"""


@app.command("generate", epilog=EPILOG)
@spec_options
def generate_command(
    output_dir: str = typer.Option("verl_scripts", "--output-dir", help="Where to write the scripts."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing scripts."),
    json_output: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
    print_commands: bool = typer.Option(False, "--print-commands",
                                        help="Also print the commands to run on each node (multi-node: head, then workers)."),
    **options: Any,
) -> None:
    """Write the two scripts (start_verl.sh -> run_training.sh) and plan.json for this run."""
    from verl_deploy.cli.output import console, fail, print_findings, print_json
    from verl_deploy.cli.run_common import prepare_from_options
    from verl_deploy.findings import Finding
    from verl_deploy.findings import error
    from verl_deploy.names import NameProblem
    from verl_deploy.names import path as valid_path
    from verl_deploy.render import plan_document, write_outputs

    try:
        valid_path(output_dir, "output directory")
    except NameProblem as exc:
        raise fail([error("output_dir", str(exc), exc.fix)], as_json=json_output) from None
    prepared = prepare_from_options(options, as_json=json_output)
    if prepared.plan is None or not prepared.ok:
        raise fail(prepared.findings, as_json=json_output)
    document = plan_document(prepared.plan, prepared.findings, prepared.checked_against)
    written = write_outputs(prepared.plan, Path(output_dir), document, force=force)
    if isinstance(written, Finding):
        raise fail([written], as_json=json_output)
    commands = node_commands(prepared.spec, written.directory)
    if json_output:
        print_json({"ok": True, "output_dir": str(written.directory), "files": written.files,
                    "findings": [f.as_dict() for f in prepared.findings],
                    **({"commands": commands} if print_commands else {})})
        return
    if prepared.findings:
        print_findings(prepared.findings)
    out = console()
    out.print(f"wrote {', '.join(written.files)} to [bold]{written.directory}[/]")
    out.print(f"run it: [bold]bash {written.directory}/start_verl.sh[/] (from the host: docker cp the folder "
              f"into the container, then run it there)")
    if print_commands:
        for role, lines in commands.items():
            out.print(f"[bold]{role}[/]:")
            for line in lines:
                out.print(f"  {line}", markup=False, soft_wrap=True)


def node_commands(spec, directory: Path) -> dict[str, list[str]]:
    """What to run where: copy the folder to every node (same path), workers join, the head trains."""
    import shlex

    folder = shlex.quote(str(directory.resolve()))
    where = f"docker exec -it {shlex.quote(spec.container)} " if spec.container else ""
    commands = {"head": [f"{where}bash {folder}/start_verl.sh"]}
    if spec.nnodes > 1:
        commands = {
            "every node": [f"scp -r {folder} NODE:{folder}   # same path on every node (or a shared file system)",
                           *([f"docker cp {folder} {shlex.quote(spec.container)}:{folder}   # on each node's host"]
                             if spec.container else [])],
            f"each of the {spec.nnodes - 1} worker node(s)": [f"{where}env VERL_DEPLOY_ROLE=worker bash {folder}/start_verl.sh"],
            f"the head ({spec.master_addr})": [f"{where}bash {folder}/start_verl.sh   # waits until all {spec.nnodes} "
                                               f"nodes joined, then trains"],
        }
    return commands
