"""`verl-deploy import SCRIPT.sh --output CONFIG.yaml`: a hand-written verl launch script as a config."""

from __future__ import annotations

import os
from typing import NoReturn

import typer

from verl_deploy.cli import app
from verl_deploy.importer.mechanisms import DapoSource, SuccessorMode

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
    dapo_source: DapoSource = typer.Option(None, "--dapo-source", help="With --to 0.9.0+: DAPO from verl's core "
                                           "(the default for a recipe script) or the recipe (keep it)."),
    mode: SuccessorMode = typer.Option(None, "--mode", help="With --to 0.9.0+, a one-step-off script: "
                                       "separate-async (the default) or one-step-off (keep it)."),
    force: bool = typer.Option(False, "--force", help="Replace an existing --output file."),
    json_output: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Read a verl launch script (without running it) and write the config that launches the same run."""
    from verl_deploy.cli.output import print_json
    from verl_deploy.importer.configout import render, write

    _check_output(output, check, force, json_output)
    environ = _environ(env, json_output)
    result = _imported(script, verl_version, verl_dir, environ, tuple(recipe_dir), json_output)
    migrated = _migrated(result, to, json_output, dapo_source.value if dapo_source else None,
                         mode.value if mode else None)
    text = render(result, script)
    if migrated is not None:
        from verl_deploy.importer.migrate import render_migrated

        text = render_migrated(text, migrated)
    if output:
        try:
            write(output, text)
        except OSError as exc:
            _fail("output", f"cannot write {output}: {exc.strerror or exc}", "give a writable --output path", json_output)
    if json_output:
        print_json(_document(result, migrated, script, output, check))
    else:
        _print(result, migrated, output, check)
    if check and result.remaining:
        raise typer.Exit(1)


def _fail(field: str, message: str, fix: str, json_output: bool) -> NoReturn:
    from verl_deploy.cli.output import fail
    from verl_deploy.findings import error

    raise fail([error(field, message, fix)], as_json=json_output)


def _check_output(output: str | None, check: bool, force: bool, json_output: bool) -> None:
    """--output is given (or --check alone), is not a folder, and replaces a file only with --force."""
    if output is None and not check:
        _fail("output", "no --output given", "give --output CONFIG.yaml (or --check to compare only)", json_output)
    if output and os.path.isdir(output):
        _fail("output", f"{output} is a folder", "give --output a file path, e.g. CONFIG.yaml", json_output)
    if output and os.path.exists(output) and not force:
        _fail("output", f"{output} exists", "give another --output, or --force to replace it", json_output)


def _environ(env: list[str], json_output: bool) -> dict[str, str]:
    environ: dict[str, str] = {}
    for item in env:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            _fail("env", f"{item!r} is not NAME=VALUE", "write --env HOME=/home/me", json_output)
        environ[name] = value
    return environ


def _imported(script: str, verl_version: str | None, verl_dir: str | None, environ: dict[str, str],
              recipe_dirs: tuple[str, ...], json_output: bool):
    from verl_deploy.importer.build import ImportProblem, import_script

    try:
        result = import_script(script, verl_version=verl_version, verl_dir=verl_dir, environ=environ,
                               recipe_dirs=recipe_dirs)
    except ImportProblem as exc:
        _fail("script", str(exc), exc.fix, json_output)
    if result.problem:
        _fail("script", result.problem, "import a DAPO, GRPO (adv_estimator=grpo), one-step-off or fully-async script",
              json_output)
    return result


def _migrated(result, to: str | None, json_output: bool, dapo_source: str | None, mode: str | None):
    if not to:
        if dapo_source or mode:
            _fail("to", "--dapo-source and --mode choose the trainer of a migration", "add --to VERSION, or drop them",
                  json_output)
        return None
    from verl_deploy.importer.migrate import MigrateProblem, migrate_values

    try:
        return migrate_values(result.config_values(), to, dapo_source=dapo_source, mode=mode)
    except MigrateProblem as exc:
        _fail("to", str(exc), exc.fix, json_output)


def _document(result, migrated, script: str, output: str | None, check: bool) -> dict:
    """The --json answer: every field with its provenance, the overrides, what was not read, the differences."""
    return {
        "ok": not (check and result.remaining), "script": script, "output": output, "verl_version": result.version,
        "version_why": result.version_why, "mode": result.mode, "fields": result.values,
        "provenance": result.provenance, "overrides": [{"text": t, "from": w} for t, w in result.overrides],
        "unreadable": [{"line": u.line, "why": u.why} for u in result.unreadable],
        "environment": sorted(result.reading.environment), "field_problems": result.field_problems,
        "differences": [d.line() for d in result.remaining], "paths_differ": [d.line() for d in result.aside],
        "added_as_copies": [{"key": d.key, "value": d.generated, "copy_of": copied} for d, copied in result.mirrored],
        "migrated": migrated.as_dict() if migrated is not None else None,
    }


def _print(result, migrated, output: str | None, check: bool) -> None:
    from verl_deploy.cli.output import console

    out = console()
    if output:
        out.print(f"wrote {output}: {len(result.values)} fields, {len(result.overrides)} overrides "
                  f"(verl {result.version}: {result.version_why})", soft_wrap=True)
    for unknown in result.unreadable:
        out.print(f"not read: line {unknown.line}: {unknown.why}", soft_wrap=True)
    for problem in result.field_problems:
        out.print(f"kept verl-deploy's value: {problem}", soft_wrap=True)
    for line in migrated.lines() if migrated is not None else []:
        out.print(line, soft_wrap=True)
    if check or result.remaining:
        _print_check(out, result)


def _print_check(out, result) -> None:
    if result.remaining:
        out.print(f"{len(result.remaining)} difference(s) between the script's verl config and the generated "
                  "launch's:", soft_wrap=True)
        for diff in result.remaining:
            out.print(f"  {diff.line()}", soft_wrap=True)
    else:
        out.print(f"equivalent: the generated launch composes to the script's verl {result.version} config "
                  "(paths aside)", soft_wrap=True)
    for diff, copied in result.mirrored:
        out.print(f"  added: {diff.key}={diff.generated!r}, a copy of the script's {copied} (a second code "
                  "path of this release reads it)", soft_wrap=True)
