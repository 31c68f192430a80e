"""`verl-deploy generate`: write start_verl.sh, run_training.sh and plan.json."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from verl_deploy.cli import app
from verl_deploy.cli.options import spec_options
from verl_deploy.cli.sched_options import scheduler_options

if TYPE_CHECKING:
    from verl_deploy.pipeline import Prepared

EPILOG = """\
Examples:

  verl-deploy generate --output-dir ./verl_scripts     # the built-in example

  verl-deploy generate --mask 1010000 --model-path /mnt/public/Qwen3-8B --train-steps 4 --force

  verl-deploy generate --mode one-step-off --framework fsdp --device gpu --verl-version 0.9.1

Then, in the container: cd /verl && bash start_verl.sh

On a cluster: --scheduler slurm also writes submit.sbatch (then `sbatch submit.sbatch` from the folder on
shared storage); --scheduler kuberay writes rayjob.yaml (then `kubectl apply -f rayjob.yaml`):

  verl-deploy generate --scheduler slurm --nnodes 2 --partition a800 --time 2-00:00:00 --gres-name npu

  verl-deploy generate --scheduler kuberay --nnodes 2 --device gpu --framework fsdp --k8s-volume models:/mnt/public

Nothing is written when there is an error; existing scripts need --force.
The SwanLab API key goes to swanlab.env (mode 0600) beside the scripts, never into them.
"""


@app.command("generate", epilog=EPILOG)
@spec_options
@scheduler_options
def generate_command(
    output_dir: str = typer.Option("verl_scripts", "--output-dir", metavar="DIR", help="Where to write the scripts."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing scripts."),
    json_output: bool = typer.Option(False, "--json", help="Print what was written as JSON."),
    print_commands: bool = typer.Option(False, "--print-commands",
                                        help="Also print the commands to run on each node (multi-node: head, then workers)."),
    scheduler: str = typer.Option("none", "--scheduler", help="none | slurm (also submit.sbatch) | kuberay (also rayjob.yaml)."),
    **options: Any,
) -> None:
    """Write the two scripts (start_verl.sh -> run_training.sh) and plan.json for this run."""
    from verl_deploy.cli.output import print_json

    prepared = _prepared(output_dir, scheduler, options, json_output)
    assert prepared.plan is not None
    extra = scheduler_file(prepared.plan, scheduler, options, json_output)
    written, changes, rewrote = _write(prepared, Path(output_dir), extra, force, json_output)
    commands = node_commands(prepared.spec, written.directory)
    if json_output:
        print_json({"ok": True, "output_dir": str(written.directory), "files": written.files, "changes": changes,
                    "findings": [f.as_dict() for f in prepared.findings],
                    **({"commands": commands} if print_commands else {})})
        return
    _say_written(prepared, written, changes if rewrote else {}, extra)
    if print_commands:
        _print_commands(commands)


def _prepared(output_dir: str, scheduler: str, options: dict[str, Any], json_output: bool) -> Prepared:
    """The checked plan of these options, or one refusal (a bad output directory, flags, findings)."""
    from verl_deploy.cli.options import flags_from
    from verl_deploy.cli.output import fail
    from verl_deploy.cli.run_common import prepare_from_flags
    from verl_deploy.findings import UserError, error
    from verl_deploy.names import NameProblem
    from verl_deploy.names import path as valid_path

    try:
        valid_path(output_dir, "output directory")
    except NameProblem as exc:
        raise fail([error("output_dir", str(exc), exc.fix)], as_json=json_output) from None
    try:
        flags, config_file = flags_from(options)
    except UserError as exc:
        raise fail(exc.findings, as_json=json_output) from None
    if scheduler in ("slurm", "kuberay"):
        flags["head_from_scheduler"] = True  # the job gives the head's address at run time
    prepared = prepare_from_flags(flags, config_file, ignore_detected=bool(options.get("ignore_detected")),
                                  as_json=json_output)
    if prepared.plan is None or not prepared.ok:
        raise fail(prepared.findings, as_json=json_output)
    return prepared


def _write(prepared: Prepared, directory: Path, extra: tuple[str, str] | None, force: bool,
           json_output: bool) -> tuple[Any, dict[str, str], bool]:
    """Write the set (nothing on an error); (what was written, file -> new|changed|unchanged, whether any of
    them was there before)."""
    from verl_deploy.cli.output import fail
    from verl_deploy.findings import Finding
    from verl_deploy.rayauth import TOKEN_FILE
    from verl_deploy.render import SCRIPT_NAMES, SECRET_FILE, TRACKER_FILE, plan_document, write_outputs

    assert prepared.plan is not None
    document = plan_document(prepared.plan, prepared.findings, prepared.checked_against, prepared.memory)
    secret = {SECRET_FILE, TRACKER_FILE, TOKEN_FILE}  # never read: whether they changed is nobody's business
    before = _contents(directory, [n for n in (*SCRIPT_NAMES, *([extra[0]] if extra else [])) if n not in secret])
    written = write_outputs(prepared.plan, directory, document, force=force, extra=dict([extra]) if extra else None)
    if isinstance(written, Finding):
        raise fail([written], as_json=json_output)
    changes = {name: _change(before.get(name), written.directory / name) for name in written.files}
    return written, changes, bool(before)


def _say_written(prepared: Prepared, written: Any, changes: dict[str, str], extra: tuple[str, str] | None) -> None:
    """What was written (and, when scripts were there before, which changed), the warnings, and how to run it."""
    from verl_deploy.cli.output import console, print_findings

    # what plan already showed is not repeated: only the warnings, and how many notes `plan` has
    print_findings([f for f in prepared.findings if f.level != "info"])
    out = console()
    shown = [name if changes.get(name, "new") == "new" else f"{name} ({changes[name]})" for name in written.files]
    out.print(f"wrote {', '.join(shown)} to [bold]{written.directory}[/]")
    notes = sum(1 for f in prepared.findings if f.level == "info")
    if notes:
        out.print(f"[dim]{notes} note(s) on the plan: `verl-deploy plan` with the same flags shows them[/]")
    if extra and extra[0] == "submit.sbatch":
        out.print(f"submit it: [bold]cd {written.directory} && sbatch submit.sbatch[/] (the folder on storage every "
                  f"node sees), or `verl-deploy launch --backend slurm` to submit and watch it")
    elif extra:
        out.print(f"apply it: [bold]kubectl apply -f {written.directory}/rayjob.yaml[/], or `verl-deploy launch "
                  f"--backend kuberay` to apply and watch it")
    else:
        out.print(f"run it: [bold]bash {written.directory}/start_verl.sh[/] (from the host: docker cp the folder "
                  f"into the container, then run it there)")


def _print_commands(commands: dict[str, list[str]]) -> None:
    from verl_deploy.cli.output import console

    out = console()
    for role, lines in commands.items():
        out.print(f"[bold]{role}[/]:")
        for line in lines:
            out.print(f"  {line}", markup=False, soft_wrap=True)


def _contents(directory: Path, names: list[str]) -> dict[str, bytes]:
    """The files of these names already in the output directory (to say which the new ones changed)."""
    found = {}
    for name in names:
        path = directory / name
        try:
            if path.is_file() and not path.is_symlink():
                found[name] = path.read_bytes()
        except OSError:
            continue
    return found


def _change(old: bytes | None, path: Path) -> str:
    """new | changed | unchanged, for one written file."""
    if old is None:
        return "new"
    try:
        return "unchanged" if path.read_bytes() == old else "changed"
    except OSError:
        return "changed"


def scheduler_file(plan, scheduler: str, options: dict, json_output: bool) -> tuple[str, str] | None:
    """(file name, content) for --scheduler, rendered before anything is written; None for none."""
    from verl_deploy.cli.output import fail
    from verl_deploy.cli.sched_options import scheduler_from
    from verl_deploy.findings import UserError, error

    if scheduler not in ("none", "slurm", "kuberay"):
        raise fail([error("scheduler", f"{scheduler!r} is not a scheduler", "use --scheduler slurm, kuberay or none")],
                   as_json=json_output)
    if scheduler == "none":
        return None
    try:
        sched = scheduler_from(options)
    except UserError as exc:
        raise fail(exc.findings, as_json=json_output) from None
    if scheduler == "slurm":
        from verl_deploy.backends.slurm_script import render_sbatch

        name, content = "submit.sbatch", render_sbatch(plan, sched)
    else:
        from verl_deploy.render import render_scripts
        from verl_deploy.backends.kuberay_manifest import render_rayjob

        name, content = "rayjob.yaml", render_rayjob(plan, sched, render_scripts(plan)["run_training.sh"])
    return name, content  # an existing file of that name needs --force: write_outputs checks the whole set


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
