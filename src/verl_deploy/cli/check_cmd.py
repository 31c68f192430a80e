"""`verl-deploy check`: can this host (and container) run the training — and if not, why."""

from __future__ import annotations

from typing import Any, List, Optional

import typer

from verl_deploy.cli import app
from verl_deploy.cli.options import spec_options

EPILOG = """\
Examples:

  verl-deploy check                                   # probe this host; values found fill in plan/generate

  verl-deploy check --container verl-npu              # probe inside the container the run will use

  verl-deploy check --search-root /data/models --json | jq .accelerators

  verl-deploy check --model-path /mnt/public/Qwen3-8B --devices 0-3 --verbose

What is probed: NPUs (npu-smi) or GPUs (nvidia-smi) with health, memory and processes; CANN,
NNAL, driver and Python package versions; Docker, its verl containers and images; model
directories and parquet datasets (found under /mnt/public, /mnt2, /mnt/project and read);
network interfaces; a running Ray and its ports; free disk for checkpoints; SwanLab.

Values you did not set (device kind, device ids, interface, model and data paths, verl
version) are filled from what was found and saved for `plan` and `generate` on this host.

Then verl's own validation of the run's config (--no-verify to skip): where verl is installed
(in --container, else python3 here, from --run-dir) the config is composed as the entry point
does, verl's validate_config and config dataclasses run, and the entry module is imported.

Exit status: 0 when nothing blocks the run (warnings allowed), 1 otherwise.
"""

STATUS_STYLE = {"ok": "green", "info": "cyan", "warning": "yellow", "error": "bold red"}


def _show(result, verbose: bool, saved_to: str | None) -> None:
    from rich.markup import escape
    from rich.table import Table

    from verl_deploy.cli.output import console

    out = console()
    for area in result.areas.values():
        title = f"[bold]{area.title}[/]" + (f" [dim]{area.seconds:.2f} s[/]" if verbose else "")
        table = Table.grid(padding=(0, 1))
        table.add_column(no_wrap=True)
        table.add_column(no_wrap=True, style="bold")
        table.add_column(overflow="fold")
        for row in area.rows:
            value = escape(row.value) + (f"\n[dim]fix: {escape(row.fix)}[/]" if row.fix and row.status != "ok" else "")
            table.add_row(f"[{STATUS_STYLE[row.status]}]{row.status:<7}[/]", escape(row.check), value)
        out.print(title)
        out.print(table)
        out.print()
    if result.detected:
        shown = ", ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in result.detected.items())
        out.print(f"[bold]detected[/] {escape(shown)}" + (f" [dim](saved for plan/generate: {escape(saved_to)})[/]"
                                                          if saved_to else ""))
    style = "bold green" if result.ok else "bold red"
    out.print(f"[{style}]{escape(result.verdict())}[/]")


def _add_verify(result) -> None:
    """verl's own validation of the plan check resolved, in the container when it runs (else on this host)."""
    from verl_deploy.pipeline import prepare_spec
    from verl_deploy.verify import check_area

    prepared = prepare_spec(result.spec, check_verl=False)
    if prepared.plan is not None:
        container = result.areas["docker"].data.get("container") if "docker" in result.areas else None
        running = bool(container and container.get("running"))
        result.areas["verify"] = check_area(prepared.plan, result.spec.container if running else None)


@app.command("check", epilog=EPILOG)
@spec_options
def check_command(
    json_output: bool = typer.Option(False, "--json", help="Print everything found as JSON (also when there are errors)."),
    search_root: Optional[List[str]] = typer.Option(None, "--search-root", metavar="DIR",
                                                    help="Where to look for models and datasets (repeatable; "
                                                         "default /mnt/public, /mnt2, /mnt/project)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show how long each probe took."),
    probe_timeout: float = typer.Option(10.0, "--probe-timeout", min=0.5, metavar="SECONDS",
                                        help="Give up on a command (npu-smi, docker, ray) after this long."),
    save: bool = typer.Option(True, "--save/--no-save", help="Save detected values for plan/generate on this host."),
    verify: bool = typer.Option(True, "--verify/--no-verify", help="Run verl's own validation of the run's config where "
                                "it runs (inside --container, else here), when verl is there."),
    fabric: bool = typer.Option(False, "--fabric", help="Run a real all-reduce across every device of every node "
                                "where the training runs; bus bandwidth per node, the node/device/interface that fails."),
    allow_local_checkpoints: bool = typer.Option(False, "--allow-local-checkpoints", help="Multi-node: a checkpoint "
                                                 "directory the nodes do not share is a warning, not an error (no resume)."),
    **options: Any,
) -> None:
    """Probe the host (or the run's container) and say whether the training can run here."""
    from verl_deploy.cli.options import flags_from
    from verl_deploy.cli.output import fail, print_json
    from verl_deploy.cli.run_common import check_with
    from verl_deploy.findings import UserError
    from verl_deploy.preflight.saved import save_detected

    try:
        flags, config_file = flags_from(options)
        result = check_with(flags, config_file, search_roots=search_root, timeout=probe_timeout)
    except UserError as exc:
        raise fail(exc.findings, as_json=json_output) from None
    if verify:
        _add_verify(result)
    if len(result.spec.nodes) > 1:  # multi-node: a token written in the checkpoint directory, read on every node
        from verl_deploy.preflight.shared_storage import storage_area

        result.areas["storage"] = storage_area(result.spec, allow_local_checkpoints)
    if fabric:
        from verl_deploy.preflight.fabric import fabric_area

        result.areas["fabric"] = fabric_area(result.spec)
    saved_to = str(save_detected(result.detected, given=result.given_fields())) if save else None
    if json_output:
        document = result.as_dict()
        document["saved_to"] = saved_to
        print_json(document)
    else:
        _show(result, verbose, saved_to)
    raise typer.Exit(code=0 if result.ok else 1)
