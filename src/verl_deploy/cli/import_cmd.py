"""`verl-deploy import SCRIPT.sh --output CONFIG.yaml`: a hand-written verl launch script as a config."""

from __future__ import annotations

import os

import typer

from verl_deploy.cli import app

EPILOG = """\
Examples:

  verl-deploy import run_dapo_qwen3_8b.sh --output dapo.yaml     # read it (never run), write the config
  verl-deploy import run_dapo_qwen3_8b.sh --check                # compose both with verl's config; list differences
  verl-deploy import run.sh --output dapo.yaml --env HOME=/home/me --verl-version 0.7.0
  verl-deploy import run.sh --output dapo.yaml --to 0.9.1        # and carry it to verl 0.9.1 (see `migrate`)
  verl-deploy generate --config dapo.yaml --output-dir ./verl_scripts

The script is read statically: variables, ${VAR:-default}, $(( )), arrays, export, line continuations,
`python3 -m ENTRY` and `ray job submit ... -- python3 -m ENTRY`. What cannot be known without running it
(command substitution, a variable only the environment gives, loops) is listed, never guessed; give such
variables with --env. Each field and override in the config says where it came from (script line N).
--check exits 1 when the generated launch's composed verl config differs from the script's.
"""


@app.command("import", epilog=EPILOG)
def import_command(
    script: str = typer.Argument(..., help="The bash launch script to read (it is never run)."),
    output: str = typer.Option(None, "--output", "-o", help="Where to write the config (YAML, as --config reads)."),
    verl_version: str = typer.Option(None, "--verl-version", help="The verl release the script runs with "
                                     "(default: read from its entry module and keys)."),
    verl_dir: str = typer.Option(None, "--verl-dir", help="A verl checkout to read the release's configs from."),
    recipe_dir: list[str] = typer.Option([], "--recipe-dir", help="A checkout holding recipe/ (DAPO's own yaml)."),
    env: list[str] = typer.Option([], "--env", help="NAME=VALUE for a variable the script reads from the "
                                  "environment (repeatable)."),
    check: bool = typer.Option(False, "--check", help="Compose the script's and the generated launch's verl "
                               "config and print every difference (exit 1 if any)."),
    to: str = typer.Option(None, "--to", help="Also migrate the imported config to this verl release."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --output file."),
    json_output: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Read a verl launch script (without running it) and write the config that launches the same run."""
    from verl_deploy.cli.output import console, fail, print_json
    from verl_deploy.findings import error
    from verl_deploy.importer.build import ImportProblem, import_script
    from verl_deploy.importer.configout import render, write

    if output is None and not check:
        raise fail([error("output", "no --output given", "give --output CONFIG.yaml (or --check to compare only)")],
                   as_json=json_output)
    if output and os.path.exists(output) and not force:
        raise fail([error("output", f"{output} exists", "give another --output, or --force to replace it")],
                   as_json=json_output)
    environ: dict[str, str] = {}
    for item in env:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise fail([error("env", f"{item!r} is not NAME=VALUE", "write --env HOME=/home/me")], as_json=json_output)
        environ[name] = value
    try:
        result = import_script(script, verl_version=verl_version, verl_dir=verl_dir, environ=environ,
                               recipe_dirs=tuple(recipe_dir))
    except ImportProblem as exc:
        raise fail([error("script", str(exc), exc.fix)], as_json=json_output) from None
    if result.problem:
        raise fail([error("script", result.problem, "import a DAPO, GRPO (adv_estimator=grpo) or one-step-off "
                          "script")], as_json=json_output)
    migrated = None
    if to:
        from verl_deploy.importer.migrate import MigrateProblem, migrate_values

        try:
            migrated = migrate_values(result.config_values(), to)
        except MigrateProblem as exc:
            raise fail([error("to", str(exc), exc.fix)], as_json=json_output) from None
    text = render(result, script)
    if migrated is not None:
        from verl_deploy.importer.migrate import render_migrated

        text = render_migrated(text, migrated)
    if output:
        write(output, text)
    document = {
        "ok": not (check and result.remaining), "script": script, "output": output, "verl_version": result.version,
        "version_why": result.version_why, "mode": result.mode, "fields": result.values,
        "provenance": result.provenance, "overrides": [{"text": t, "from": w} for t, w in result.overrides],
        "unreadable": [{"line": u.line, "why": u.why} for u in result.unreadable],
        "environment": sorted(result.reading.environment), "field_problems": result.field_problems,
        "differences": [d.line() for d in result.remaining], "paths_differ": [d.line() for d in result.aside],
        "added_as_copies": [{"key": d.key, "value": d.generated, "copy_of": copied} for d, copied in result.mirrored],
        "migrated": migrated.as_dict() if migrated is not None else None,
    }
    if json_output:
        print_json(document)
    else:
        out = console()
        if output:
            out.print(f"wrote {output}: {len(result.values)} fields, {len(result.overrides)} overrides "
                      f"(verl {result.version}: {result.version_why})", soft_wrap=True)
        for unknown in result.unreadable:
            out.print(f"not read: line {unknown.line}: {unknown.why}", soft_wrap=True)
        for problem in result.field_problems:
            out.print(f"kept verl-deploy's value: {problem}", soft_wrap=True)
        if migrated is not None:
            for line in migrated.lines():
                out.print(line, soft_wrap=True)
        if check or result.remaining:
            if result.remaining:
                out.print(f"{len(result.remaining)} difference(s) between the script's verl config and the "
                          "generated launch's:", soft_wrap=True)
                for diff in result.remaining:
                    out.print(f"  {diff.line()}", soft_wrap=True)
            else:
                out.print(f"equivalent: the generated launch composes to the script's verl {result.version} config "
                          "(paths aside)", soft_wrap=True)
            for diff, copied in result.mirrored:
                out.print(f"  added: {diff.key}={diff.generated!r}, a copy of the script's {copied} (a second code "
                          "path of this release reads it)", soft_wrap=True)
    if check and result.remaining:
        raise typer.Exit(1)
