"""`verl-deploy bundle RUN --output FILE.tar.gz`: everything a verl issue needs, in one file, secrets redacted."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from verl_deploy.cli import app

EPILOG = """\
Examples:

  verl-deploy bundle                                  # the newest run, to ./verl-deploy-RUN.tar.gz
  verl-deploy bundle 20261130-1942 --output issue.tar.gz
  verl-deploy bundle 20261130-1942 --no-check --json

The archive holds README.md (a summary to paste into the issue), run.json, failure.json, check.json,
versions.json (verl-deploy, verl, torch/torch_npu, CANN or CUDA, vLLM/SGLang, driver, image) and per
attempt its scripts, plan.json, the log's head and tail, its error lines with 5 lines around each
(bounded: a 60 MB log gives a few hundred KB) and the watcher's verdict; the newest stack dumps.
The SwanLab key, the Ray token, passwords and tokens in URLs, NAME=VALUE where the name says secret
and the patterns in $VERL_DEPLOY_SECRET_PATTERNS (one regular expression a line) are replaced by
[REDACTED], also where the training printed them into its own log.
"""


@app.command("bundle", epilog=EPILOG)
def bundle_command(run_id: Optional[str] = typer.Argument(None, metavar="[RUN]", help="Run id or prefix (default: newest)."),
                   output: Optional[str] = typer.Option(None, "--output", "-o", metavar="FILE.tar.gz",
                                                        help="Where to write the archive (default ./verl-deploy-RUN.tar.gz)."),
                   force: bool = typer.Option(False, "--force", help="Replace FILE if it exists."),
                   check: bool = typer.Option(True, "--check/--no-check", help="Include `check` of the run's spec on "
                                              "this host now (versions, devices, findings)."),
                   json_output: bool = typer.Option(False, "--json", help="Print what was written as JSON.")) -> None:
    """One .tar.gz for a verl issue: plan, scripts, record, failure, log errors, check, versions; secrets redacted."""
    from rich.markup import escape

    from verl_deploy.cli.output import console, fail, print_json
    from verl_deploy.cli.one_run import load
    from verl_deploy.findings import error
    from verl_deploy.runs.bundle import BundleError, build_bundle

    record = load(run_id, json_output)
    target = Path(output or f"verl-deploy-{record.id}.tar.gz")
    if not target.name.endswith((".tar.gz", ".tgz")):
        raise fail([error("--output", f"{target} does not end in .tar.gz", f"pass --output {target.name}.tar.gz")],
                   as_json=json_output)
    if target.exists() and (not target.is_file() or not force):
        what = "is not a regular file" if not target.is_file() else "exists"
        raise fail([error("--output", f"{target} {what}", "choose another --output" + ("" if not target.is_file()
                                                                                      else ", or pass --force"))],
                   as_json=json_output)
    if not target.parent.is_dir():
        raise fail([error("--output", f"the folder {target.parent} does not exist", "create it, or choose another --output")],
                   as_json=json_output)
    out = console(stderr=True)
    try:
        bundle = build_bundle(record, target, run_check=check,
                              say=(lambda text: None) if json_output else (lambda text: out.print(f"bundle: {escape(text)}")))
    except (BundleError, OSError) as exc:
        raise fail([error("bundle", str(exc), "fix the above and run `verl-deploy bundle` again")], as_json=json_output)
    if json_output:
        print_json({"ok": True, **bundle.as_dict()})
        return
    for problem in bundle.problems:
        out.print(f"[yellow]warning[/]: {escape(problem)}", soft_wrap=True)
    console().print(f"wrote {escape(str(target))} ({bundle.size / 1024:.0f} KiB, {len(bundle.members)} files, "
                    f"{bundle.redacted} secret(s) redacted); attach it to the issue and paste its README.md")
