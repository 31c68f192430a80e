"""The blocking confirmation (seed 001 stage 3): the whole run at a glance, then "Proceed? [y/N]".

Nothing that changes the machine runs before a yes. `--yes` answers for scripts and agents;
without a terminal and without `--yes` the command stops with a message instead of waiting
for an answer nobody can give.
"""

from __future__ import annotations

import sys

import typer
from rich.markup import escape
from rich.table import Table

from verl_deploy.cli.output import console
from verl_deploy.pipeline import Prepared
from verl_deploy.spec import RunSpec, listing
from verl_deploy.views.spec_rows import UNSET, shown_value

GROUPS = ("hardware", "container", "paths", "training", "layout", "swanlab")
# [(group, [field])] of the summary, generated from the fields' `summary=` declarations (spec.py)
SUMMARY = listing("summary", GROUPS)


def show_summary(prepared: Prepared, action: str) -> None:
    """The run at a glance: the summary's fields with their sources, then the features and the memory verdict."""
    out = console(stderr=True)
    out.print(_summary_table(prepared, action))
    if prepared.plan is not None:
        _show_features(prepared)
    memory = prepared.memory
    if memory is not None:
        verdict = "fits" if memory.fits else "[red]does not fit[/] (" + escape(", ".join(memory.needs)) + ")"
        out.print(f"[bold]memory[/] estimate: peak {memory.peak_gb:.1f} GiB in {memory.peak_phase} of "
                  f"{memory.limit_gb:.1f} GiB per device: {verdict}"
                  + (" [dim](--no-estimate to start without the features it added)[/]"
                     if prepared.spec.estimate_features else ""))


def _summary_table(prepared: Prepared, action: str) -> Table:
    spec = prepared.spec
    superseded = prepared.plan.superseded if prepared.plan is not None else {}
    table = Table(box=None, header_style="bold", pad_edge=False, title=f"[bold]{escape(action)}[/]", title_justify="left")
    table.add_column("")
    table.add_column("field")
    table.add_column("value", overflow="fold")
    table.add_column("from", style="dim")
    for group, names in SUMMARY:
        if group == "swanlab" and not spec.swanlab_on:
            table.add_row(f"[bold]{group}[/]", "swanlab", "off", spec.sources.get("swanlab", "default"))
            continue
        rows = [(name, *shown_value(spec, name, superseded)) for name in names if spec.applies(name)]
        for index, (name, value, source) in enumerate(row for row in rows if not _left_out(spec, *row[:2])):
            table.add_row(f"[bold]{group}[/]" if index == 0 else "", name, escape(value), source)
    return table


def _left_out(spec: RunSpec, name: str, value: str) -> bool:
    """Rows that say nothing here: no proxy, no host list, no image file or extra mount, a head address on one
    node. (A field that means nothing in this run, e.g. the trainer/rollout split in a colocated mode, is left
    out by its declaration: RunSpec.applies.)"""
    return (value == UNSET and name in ("http_proxy", "https_proxy", "nodes", "image_file", "mounts")) or (
        name == "master_addr" and spec.nnodes == 1)


def _show_features(prepared: Prepared) -> None:
    """The mask, on/off in words, and why each feature that is on is on."""
    plan = prepared.plan
    assert plan is not None
    out = console(stderr=True)
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


def memory_observed(prepared: Prepared) -> bool:
    """Did the calibration log (OOMs seen before), not the formula alone, make the estimate ask for features?"""
    return bool(getattr(prepared.memory, "observed", None))


def confirm(prepared: Prepared, action: str, *, yes: bool, stdin_is_tty: bool | None = None,
            as_json: bool = False) -> None:
    """Show the summary and wait for a yes; raise typer.Exit otherwise. Nothing happens before this returns."""
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
