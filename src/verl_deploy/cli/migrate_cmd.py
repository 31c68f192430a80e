"""`verl-deploy migrate CONFIG.yaml --to VERSION`: carry a config to another verl release."""

from __future__ import annotations

import typer

from verl_deploy.cli import app
from verl_deploy.importer.mechanisms import DapoSource, SuccessorMode

EPILOG = """\
Examples:

  verl-deploy migrate dapo.yaml --to 0.9.1 --output dapo-0.9.1.yaml
  verl-deploy migrate dapo.yaml --to 0.9.1 --in-place
  verl-deploy plan --config dapo-0.9.1.yaml --verify --verify-env   # verl 0.9.1's own validation, on CPU

Overrides whose key moved are mapped (reward_model.overlong_buffer.* -> reward.reward_kwargs.overlong_buffer_cfg.*),
removed keys are named with what replaced them, and the result is checked like any plan. On verl 0.9.0 and later
the DAPO recipe trainer moves to DAPO in verl's core (main_ppo, V1 sync; --dapo-source recipe keeps the recipe)
and one-step-off to the V1 trainer's separate_async mode (--mode one-step-off keeps it); each field set or
dropped for the new trainer is one line. Exit status: 0 the migrated config plans cleanly, 1 it does not (the
lines say why; the file is still written).
"""


@app.command("migrate", epilog=EPILOG)
def migrate_command(
    config: str = typer.Argument(..., help="A config file (as --config reads)."),
    to: str = typer.Option(..., "--to", help="The verl release to move to, e.g. 0.9.1."),
    output: str = typer.Option(None, "--output", "-o", help="Where to write the migrated config."),
    in_place: bool = typer.Option(False, "--in-place", help="Rewrite CONFIG itself."),
    dapo_source: DapoSource = typer.Option(None, "--dapo-source", help="DAPO on verl 0.9.0+: core (verl's "
                                           "main_ppo, V1; the default for a recipe config) or recipe (keep it)."),
    mode: SuccessorMode = typer.Option(None, "--mode", help="A one-step-off config on verl 0.9.0+: separate-async "
                                       "(the V1 successor, the default) or one-step-off (keep it)."),
    json_output: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Move a config to another verl release: moved keys mapped, removed ones named, the result checked."""
    import os

    from verl_deploy.cli.output import console, fail, print_json
    from verl_deploy.findings import error
    from verl_deploy.importer.configout import write
    from verl_deploy.importer.migrate import MigrateProblem, migrate_values, render_migrated
    from verl_deploy.sources import load_config_file

    where = _output_problem(config, output, in_place)
    if where is not None:
        raise fail([where], as_json=json_output)
    values, problems = load_config_file(config)
    if problems:
        raise fail(problems, as_json=json_output)
    try:
        migration = migrate_values(values, to, dapo_source=dapo_source.value if dapo_source else None,
                                   mode=mode.value if mode else None)
    except MigrateProblem as exc:
        raise fail([error("to", str(exc), exc.fix)], as_json=json_output) from None
    with open(config, encoding="utf-8") as handle:
        text = handle.read()
    target = output or config
    if os.path.isdir(target):
        raise fail([error("output", f"{target} is a folder", "give --output a file path, e.g. NEW.yaml")],
                   as_json=json_output)
    try:
        write(target, render_migrated(text, migration))
    except OSError as exc:
        raise fail([error("output", f"cannot write {target}: {exc.strerror or exc}", "give a writable --output path")],
                   as_json=json_output) from None
    if json_output:
        print_json({**migration.as_dict(), "output": target})
    else:
        out = console()
        for line in migration.lines():
            out.print(line, soft_wrap=True)
        out.print(f"wrote {target}" + ("" if migration.ok else " (the plan has errors: see above)"), soft_wrap=True)
    if not migration.ok:
        raise typer.Exit(1)


def _output_problem(config: str, output: str | None, in_place: bool):
    """Where the migrated config goes, checked before anything is read: one place, not an existing other file."""
    import os

    from verl_deploy.findings import error

    other = bool(output) and os.path.abspath(str(output)) != os.path.abspath(config)
    if not output and not in_place:
        return error("output", "no --output given", "give --output NEW.yaml, or --in-place to rewrite CONFIG")
    if other and in_place:
        return error("output", f"--in-place rewrites {config} and --output names {output}: two places",
                     "give one of them")
    if other and os.path.exists(str(output)):
        return error("output", f"{output} exists", "give another --output (or --in-place for CONFIG)")
    return None
