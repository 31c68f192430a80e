"""The blocking confirmation (seed 001 stage 3): the whole run at a glance, then "Proceed? [y/N]".

Nothing that changes the machine runs before a yes. `--yes` answers for scripts and agents;
without a terminal and without `--yes` the command stops with a message instead of waiting
for an answer nobody can give.
"""

from __future__ import annotations

import sys

import typer

from verl_deploy.pipeline import Prepared

SUMMARY: list[tuple[str, tuple[str, ...]]] = [
    ("hardware", ("device", "devices", "nnodes", "nodes", "master_addr", "socket_ifname")),
    ("container", ("container", "image", "http_proxy", "https_proxy")),
    ("paths", ("model_path", "train_file", "test_file", "ckpts_dir")),
    ("training", ("mode", "framework", "verl_version", "train_steps", "batch_size", "lr", "n_resp_per_prompt",
                  "max_prompt_length", "max_response_length", "save_freq")),
    ("layout", ("train_tp", "train_pp", "train_cp", "gen_tp", "trainer_gpus", "rollout_gpus")),
    ("swanlab", ("swanlab", "swanlab_host", "swanlab_api_key", "swanlab_mode", "swanlab_workspace", "swanlab_log_dir",
                 "project_name")),
]
from verl_deploy.spec import SPLIT_MODES  # noqa: E402  (modes with their own rollout devices)

ONE_STEP_OFF_ONLY = {"trainer_gpus", "rollout_gpus"}


def show_summary(prepared: Prepared, action: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    from verl_deploy.cli.output import console
    from verl_deploy.cli.views import shown_value

    spec, plan = prepared.spec, prepared.plan
    out = console(stderr=True)
    table = Table(box=None, header_style="bold", pad_edge=False, title=f"[bold]{escape(action)}[/]", title_justify="left")
    table.add_column("")
    table.add_column("field")
    table.add_column("value", overflow="fold")
    table.add_column("from", style="dim")
    for group, names in SUMMARY:
        if group == "swanlab" and not spec.swanlab_on:
            table.add_row(f"[bold]{group}[/]", "swanlab", "off", spec.sources.get("swanlab", "default"))
            continue
        for index, name in enumerate(n for n in names if spec.mode in SPLIT_MODES or n not in ONE_STEP_OFF_ONLY):
            value, source = shown_value(prepared, name)
            if (value == "—" and name in ("http_proxy", "https_proxy", "nodes")) or (name == "master_addr" and spec.nnodes == 1):
                continue
            table.add_row(f"[bold]{group}[/]" if index == 0 else "", name, escape(value), source)
    out.print(table)
    if plan is not None:
        on = ", ".join(f"[green]{s.name}[/]" for s in plan.features if s.on) or "none"
        off = ", ".join(f"[dim]{s.name}[/]" for s in plan.features if not s.on and s.why != "n/a") or "none"
        out.print(f"[bold]features[/] mask {plan.mask}: on: {on}; off: {off}")  # words, not colour alone
        for state in plan.features:
            if state.on:
                why: str = state.why
                if state.why == "estimate":
                    why = ("added by the memory estimate from its calibration log (an OOM seen before)"
                           if memory_observed(prepared) else "added by the memory estimate")
                out.print(f"  [green]on[/]  {state.name} [dim]({escape(why)})[/]")
    memory = prepared.memory
    if memory is not None:
        verdict = "fits" if memory.fits else "[red]does not fit[/] (" + escape(", ".join(memory.needs)) + ")"
        out.print(f"[bold]memory[/] estimate: peak {memory.peak_gb:.1f} GiB in {memory.peak_phase} of "
                  f"{memory.limit_gb:.1f} GiB per device: {verdict}"
                  + (" [dim](--no-estimate to start without the features it added)[/]"
                     if spec.estimate_features else ""))


def memory_observed(prepared: Prepared) -> bool:
    """Did the calibration log (OOMs seen before), not the formula alone, make the estimate ask for features?"""
    return bool(getattr(prepared.memory, "observed", None))


def confirm(prepared: Prepared, action: str, *, yes: bool, stdin_is_tty: bool | None = None,
            as_json: bool = False) -> None:
    """Show the summary and wait for a yes; raise typer.Exit otherwise. Nothing happens before this returns."""
    from verl_deploy.cli.output import console

    show_summary(prepared, action)
    err = console(stderr=True)
    if yes:
        err.print("[dim]--yes given: proceeding[/]")
        return
    interactive = sys.stdin.isatty() if stdin_is_tty is None else stdin_is_tty
    if not interactive:
        err.print("[bold red]error[/]: confirmation: no terminal to ask \"Proceed?\" — fix: review the summary above "
                  "and pass --yes to proceed without asking")
        if as_json:  # the refusal is the command's one JSON document too
            from verl_deploy.cli.output import print_json
            from verl_deploy.findings import error

            print_json({"ok": False, "findings": [error("confirmation", "no terminal to ask \"Proceed?\": nothing was "
                                                                        "changed", "show the user the plan (`plan --json`); "
                                                                        "after their yes pass --yes", area="launch")
                                                  .as_dict()]})
        raise typer.Exit(code=2)
    try:
        answer = input("Proceed? [y/N] ").strip().lower()
    except EOFError:
        answer = ""
    if answer not in ("y", "yes"):
        err.print("stopped: nothing was changed")
        raise typer.Exit(code=1)
