"""`plan` for people: the configuration with sources (views/spec_rows.py), features, memory, findings, command."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from verl_deploy.cli.memory_view import show_memory
from verl_deploy.cli.output import console, print_findings
from verl_deploy.compiler import Plan
from verl_deploy.features import BY_NAME
from verl_deploy.pipeline import Prepared
from verl_deploy.views.spec_rows import shown_fields


def show_plan(prepared: Prepared, everything: bool = False) -> None:
    """The plan for people. By default what fits a screen: the deciding values and whatever was set, the
    features that are on, the memory per phase, the command's first line, the findings;
    with `everything` (`plan --all`) every field, every feature, each memory term and the whole command."""
    out = console()
    plan, spec = prepared.plan, prepared.spec
    assert plan is not None
    kind = f" {spec.npu_type}" if spec.device == "npu" else ""
    out.print(f"[bold]verl-deploy plan[/]: {spec.mode} ({spec.algorithm.upper()}) · {spec.framework} · {len(spec.devices)} "
              f"{spec.device.upper()}{kind} · verl {spec.verl_version} (profile {plan.profile.name})")
    out.print(_field_table(prepared, everything))
    _show_features(plan, everything)
    show_memory(prepared, everything=everything)
    _show_command(plan, everything)
    if prepared.checked_against:
        out.print(f"[dim]overrides checked against {escape(prepared.checked_against)}[/]", soft_wrap=True)
    if prepared.findings:
        print_findings(prepared.findings, stderr=False)
    errors = sum(f.level == "error" for f in prepared.findings)
    warnings = sum(f.level == "warning" for f in prepared.findings)
    verdict = "[bold red]not ready[/]" if errors else "[bold green]ready[/]"
    out.print(f"{verdict}: {errors} error(s), {warnings} warning(s)" +
              ("" if everything else " [dim]· plan --all: every field, feature, memory term and override[/]"))


def _field_table(prepared: Prepared, everything: bool) -> Table:
    """field | value | source; with `everything`, every field under its section's title."""
    assert prepared.plan is not None
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    table.add_column("source", style="dim")
    last_section = None
    for title, name, value, source in shown_fields(prepared.spec, prepared.plan.superseded, everything):
        cell = f"[green]{escape(value)}[/]" if source != "default" else escape(value)
        if everything and title != last_section:
            table.add_row(f"[bold underline]{title}[/]", "", "")
        table.add_row(name, cell, escape(source))
        last_section = title
    return table


def _show_features(plan: Plan, everything: bool) -> None:
    """Every feature with its bit, kind, state and why (`everything`); else one line of what is on."""
    out = console()
    if everything:
        features = Table(title=f"features (mask {plan.mask})", box=None, header_style="bold", title_justify="left")
        for column in ("feature", "bit", "kind", "state", "why"):
            features.add_column(column)
        for state in plan.features:
            feature = BY_NAME[state.name]
            mark = "[green]on[/]" if state.on else "off"
            features.add_row(state.name, "" if feature.bit is None else str(feature.bit), feature.kind, mark, state.why)
        out.print(features)
        return
    on = [s.name + ("" if s.why == "default" else f" ({s.why})") for s in plan.features if s.on]
    off = [s.name for s in plan.features if not s.on and BY_NAME[s.name].kind == "memory"]
    out.print(f"[bold]features[/] (mask {plan.mask}): on " + escape(", ".join(on) or "none") +
              ("; memory features off: " + ", ".join(off) if off else ""), soft_wrap=True)


def _show_command(plan: Plan, everything: bool) -> None:
    """The verl command: whole, one override a line (`everything`); else its first line and a count."""
    out = console()
    run_dir = plan.spec.run_dir
    if everything:
        out.print("[bold]command[/] (run from " + escape(run_dir) + "):")
        out.print("python3 " + " ".join(plan.argv()[:3]) + " \\", soft_wrap=True, markup=False)
        for override in plan.overrides:
            out.print("    " + override.text() + " \\", soft_wrap=True, markup=False)
        return
    out.print(f"[bold]command[/] (run from {escape(run_dir)}): python3 " + escape(" ".join(plan.argv()[:3])) +
              f" + {len(plan.overrides)} overrides", soft_wrap=True)
