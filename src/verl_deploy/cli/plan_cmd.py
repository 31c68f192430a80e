"""`verl-deploy plan`: the whole resolved configuration, where each value came from, what is
wrong with it, and the exact verl command, before anything is touched."""

from __future__ import annotations

from typing import Any, List, Optional

import typer

from verl_deploy.cli import app
from verl_deploy.cli.options import spec_options

EPILOG = """\
Examples:

  verl-deploy plan                                    # the built-in example (8 NPUs, Megatron, verl 0.7.0)
  verl-deploy plan --all                              # every field, feature, memory term and override

  verl-deploy plan --mode one-step-off --trainer-gpus 4 --rollout-gpus 4

  MODEL_PATH=/mnt/public/Qwen3-8B TRAIN_STEPS=4 verl-deploy plan --mask 1010000

  verl-deploy plan --framework fsdp --device gpu --verl-version 0.9.1 --json | jq .overrides

  verl-deploy plan --device-memory-gb 32 --json | jq '.memory | {peak_gb, fits, needs}'   # a 910B4
  verl-deploy plan --explain-memory                   # each memory term per phase: formula and source
  verl-deploy plan --verify --container verl-npu      # + verl's own validation inside the container
  verl-deploy plan --verify --run-dir ~/verl --json | jq .verify

--verify runs verl's own code where the training will run (python3 in --container through
`docker exec`, else python3 on this host, from --run-dir): it composes the config as the entry
point does, runs verl's validate_config, builds the actor/rollout/algorithm dataclasses and
imports the entry module, with no devices and no Ray. What verl rejects is an error with verl's
own message.

--check adds everything else `launch` would stop on, in one pass (the host check with these flags,
verl's validation, the entry import where the training runs, SwanLab's host, key and package):
`ok` is then true only when the launch would start. `launch --dry-run` does the same for any backend.

Exit status: 0 when there is no error, 1 otherwise (the findings say what and how to fix it), 2 for
a usage error.
"""


@app.command("plan", epilog=EPILOG)
@spec_options
def plan_command(json_output: bool = typer.Option(False, "--json", help="Print the plan as JSON."),
                 everything: bool = typer.Option(False, "--all", help="Show every field with its source, every "
                                                 "feature, each memory term and the whole verl command (by "
                                                 "default: what fits a screen)."),
                 verify: bool = typer.Option(False, "--verify", help="Also run verl's own validation where the training "
                                             "runs (inside --container, else on this host)."),
                 verify_env: bool = typer.Option(False, "--verify-env", help="Run --verify with the local environment "
                                                 "`verl-deploy verify-env VERSION` built (no accelerator needed)."),
                 explain_memory: bool = typer.Option(False, "--explain-memory", help="Show every memory term of every "
                                                     "phase with its formula and source (with --json: memory_terms)."),
                 rehearse: bool = typer.Option(False, "--rehearse", help="Also show what `launch --rehearse` changes "
                                               "for its rehearsal (steps, lengths, checkpoint folder)."),
                 check: bool = typer.Option(False, "--check", help="Every blocker `launch` would hit, in one pass: the "
                                            "host check with these flags, rules, memory, verify, the entry import, "
                                            "SwanLab (same as `launch --dry-run`); ok only when launch would start."),
                 search_root: Optional[List[str]] = typer.Option(None, "--search-root", metavar="DIR",
                                                                 help="With --check: where the check looks for models "
                                                                      "and datasets."),
                 **options: Any) -> None:
    """Show the resolved configuration with sources, the findings and the verl command."""
    from verl_deploy.cli.output import fail, print_json

    if check:
        _check_all(options, search_root, json_output)
    from verl_deploy.cli.run_common import prepare_from_options
    from verl_deploy.cli.views import show_plan
    from verl_deploy.render import plan_document

    prepared = prepare_from_options(options, as_json=json_output)
    if prepared.plan is None:
        raise fail(prepared.findings, as_json=json_output)
    verified = None
    from verl_deploy.profiles import profile_for_spec

    if verify or profile_for_spec(prepared.spec)[1] is not None:  # a stand-in profile: verl's own code decides
        from verl_deploy.checks import sort_findings
        from verl_deploy.verify import findings_for, verify_plan

        verified = verify_plan(prepared.plan, container=prepared.spec.container, **_local_env(prepared, verify_env,
                                                                                               json_output))
        prepared.findings = sort_findings(prepared.findings + findings_for(verified, prepared.plan, required=True))
    if json_output:
        document = plan_document(prepared.plan, prepared.findings, prepared.checked_against, prepared.memory)
        document["ok"] = prepared.ok
        document["scope"] = ("the configuration only (rules, memory, verl's config); `plan --check` or `launch "
                             "--dry-run` report every blocker of the launch")
        document["command"] = ["python3", *prepared.plan.argv()]
        if verified is not None:
            document["verify"] = verified.as_dict()
        if explain_memory:
            from verl_deploy.cli.memory_explain import explain_document

            document["memory_terms"] = explain_document(prepared)
        if rehearse:
            from verl_deploy.cli.rehearse_flow import rehearsal_view

            document["rehearsal"] = rehearsal_view(prepared.spec)
        print_json(document)
    else:
        show_plan(prepared, everything=everything)
        if explain_memory:
            from verl_deploy.cli.memory_explain import show_explanation

            show_explanation(prepared)
        if rehearse:
            from rich.markup import escape

            from verl_deploy.cli.output import console
            from verl_deploy.cli.rehearse_flow import rehearsal_view

            changes = rehearsal_view(prepared.spec)
            console().print(f"[bold]rehearsal[/] (launch --rehearse): {changes['train_steps']} step(s), saving at step "
                            f"{changes['save_step']} and resuming from it; " +
                            escape(", ".join(f"{k}={v}" for k, v in changes.items() if k not in ("train_steps", "save_step"))))
    if not prepared.ok:
        raise typer.Exit(code=1)


def _check_all(options: dict, search_root, json_output: bool) -> None:
    """`plan --check`: launch's gates for the local or docker backend, nothing started (exit 0 only when ready)."""
    from verl_deploy.cli.launch_gate import report
    from verl_deploy.cli.options import flags_from
    from verl_deploy.cli.output import console, fail
    from verl_deploy.findings import UserError
    from verl_deploy.runs.gate import gather
    from verl_deploy.runs.request import LaunchRequest

    try:
        flags, config_file = flags_from(options)
    except UserError as exc:
        raise fail(exc.findings, as_json=json_output) from None
    say = None if json_output else (lambda text: console(stderr=True).print(f"[dim]{text}[/]"))
    request = LaunchRequest(flags=flags, config_file=config_file, ignore_detected=bool(options.get("ignore_detected")),
                            search_roots=tuple(search_root) if search_root is not None else None)
    gate = gather(request, announce=say)
    report(gate, as_json=json_output, dry_run=True)
    raise typer.Exit(code=0 if gate.ok else 1)


def _local_env(prepared, wanted: bool, json_output: bool) -> dict:
    """verify_plan's python (and run dir) from the verify-env of the plan's release, when asked for."""
    if not wanted:
        return {}
    from verl_deploy.cli.output import fail
    from verl_deploy.findings import error
    from verl_deploy.verify import localenv
    from verl_deploy.verl_release import release_of

    version = release_of(prepared.spec.verl_version)
    found = localenv.find(version)
    if found is None:
        raise fail([error("verify_env", f"no verify environment for verl {version} on this machine",
                          f"build it once: verl-deploy verify-env {version}", area="verify")], as_json=json_output)
    tree = found.run_tree if found.run_tree.is_dir() else localenv.link_run_tree(found)
    return {"python": str(found.python), "run_dir": None if _is_dir(prepared.spec.run_dir) else str(tree)}


def _is_dir(path: str) -> bool:
    import os

    return os.path.isdir(path)
