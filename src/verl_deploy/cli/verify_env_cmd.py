"""`verl-deploy verify-env VERSION`: a local environment in which `plan --verify --verify-env` runs verl's
own validation on this machine (no accelerator, no container): verl's answer before booking a cluster."""

from __future__ import annotations

import typer

from verl_deploy.cli import app

EPILOG = """\
Examples:

  verl-deploy verify-env 0.9.1                          # install verl 0.9.1 + its light imports, once
  verl-deploy plan --verl-version 0.9.1 --verify --verify-env
  verl-deploy verify-env 0.9.1 --json | jq -r .python   # the python3 that imports that verl
  verl-deploy verify-env 0.7.1 --recipe ~/verl-recipe    # DAPO's entry there is recipe.dapo.main_dapo

The environment is a directory of pip-installed packages (verl==VERSION --no-deps and the few
packages its config code and entry modules import) used with this interpreter's torch, ray, hydra,
omegaconf, numpy and pyarrow (a CPU torch is enough). It lives in $VERL_DEPLOY_VERIFY_ENV_DIR, else
~/.cache/verl-deploy/verify-env. Exit status: 0 ready, 1 it could not be built (the line says why).
"""


@app.command("verify-env", epilog=EPILOG)
def verify_env_command(
    version: str = typer.Argument(..., help="verl release, e.g. 0.9.1."),
    recipe: str = typer.Option(None, "--recipe", help="A verl-recipe checkout (or a verl tree with recipe/) for DAPO "
                               "on releases whose DAPO entry is recipe.dapo.main_dapo."),
    json_output: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Build (once) a local environment where verl's own validation runs on a CPU box."""
    from verl_deploy.cli.output import console, fail, print_json
    from verl_deploy.findings import error
    from verl_deploy.verify import localenv
    from verl_deploy.verl_release import release_of

    release = release_of(version)
    say = None if json_output else (lambda text: console(stderr=True).print(f"[dim]{text}[/]"))
    from pathlib import Path

    try:
        built = localenv.build(release, announce=say)
        tree = localenv.link_run_tree(built, Path(recipe) if recipe else None)
    except localenv.EnvProblem as exc:
        raise fail([error("recipe" if "recipe" in str(exc) else "version", str(exc), exc.fix, area="verify")],
                   as_json=json_output) from None
    document = {"ok": True, "version": built.version, "site": str(built.site), "python": str(built.python),
                "run_dir": str(tree), "recipe": (tree / "recipe").is_dir(),
                "use": f"verl-deploy plan --verl-version {built.version} --verify --verify-env"}
    if json_output:
        print_json(document)
        return
    out = console()
    out.print(f"verl {built.version}: ready in {built.site}")
    out.print(f"python: {built.python}")
    out.print(f"run dir: {tree}" + ("" if document["recipe"] else " (no recipe/: DAPO from verl-recipe needs --recipe)"))
    out.print(f"use: {document['use']}")
