"""The memory estimate for people: one row per phase, the device, the headroom, what would fit."""

from __future__ import annotations

from verl_deploy.cli.output import console
from verl_deploy.pipeline import Prepared

TOP_TERMS = 3  # terms named per phase in the default view


def show_memory(prepared: Prepared, *, stderr: bool = False, everything: bool = True) -> None:
    """The estimate per phase. Without `everything` (`plan` by default) each phase names its TOP_TERMS biggest
    terms and the formulas of the peak are left to `plan --all` / `--explain-memory`."""
    from rich.markup import escape
    from rich.table import Table

    out = console(stderr=stderr)
    estimate = prepared.memory
    if estimate is None:
        out.print(f"[bold]memory[/]: no estimate ({escape(prepared.memory_note)})")
        return
    limit = estimate.limit_gb
    table = Table(title=f"memory per device ({escape(estimate.model)}, {escape(estimate.layout)})", box=None,
                  header_style="bold", title_justify="left")
    for column in ("phase", "GiB", "of limit", "terms (GiB)"):
        table.add_column(column, overflow="fold")
    for name, terms in estimate.phases.items():
        gb = estimate.phase_gb(name)
        over = name in estimate.over()
        style = "red" if over else ("yellow" if gb > 0.85 * limit else "")
        named = [(k, v) for k, v in terms.items() if v.gb >= 0.05]
        if not everything and len(named) > TOP_TERMS:
            named = sorted(named, key=lambda kv: -kv[1].gb)[:TOP_TERMS]
            named.append(("…", None))
        shown = " · ".join(k if v is None else f"{k} {v.gb:.1f}" for k, v in named)
        if name == "rollout":
            shown += f" · KV left {estimate.kv_left.gb:.1f} (needs {estimate.kv_needed.gb:.2f})"
        if name in estimate.observed:
            shown += f" · {estimate.observed[name]}"
        cell = f"{gb:.1f}"
        table.add_row(name, f"[{style}]{cell}[/]" if style else cell, f"{gb / limit:.0%}" if limit else "-",
                      escape(shown))
    out.print(table)
    peak = estimate.peak_phase
    out.print(f"device {estimate.device.total_gb:g} GiB ({escape(estimate.device.source)}), usable "
              f"{estimate.device.usable_gb:.1f}, limit {limit:.1f}; peak {estimate.peak_gb:.1f} GiB in {peak}, "
              f"headroom {limit - estimate.peak_gb:+.1f} GiB")
    if everything:
        out.print(f"[dim]why {peak}: " + escape("; ".join(f"{k} = {v.formula}" for k, v in estimate.phases[peak].items()))
                  + "[/]")
    host = f"host about {estimate.host_gb_per_node:.0f} GiB per node"
    if estimate.host_total_gb is not None:
        host += f" of {estimate.host_total_gb:.0f} GiB" + (" [red](too much)[/]" if estimate.host_fits is False else "")
    out.print(host)
    lengths = estimate.lengths
    if lengths is not None and lengths.budget_bound:
        if everything:
            out.print("[dim]responses: dynamic batching packs each micro-batch to its token budget, so the peak "
                      "above holds whatever the response lengths[/]")
    elif lengths is not None:
        line = (f"responses: typical step ({lengths.typical_response_len} tokens, assumed) {lengths.typical_peak_gb:.1f} "
                f"GiB, worst step (all {lengths.max_response_len}) {lengths.worst_peak_gb:.1f} GiB")
        if lengths.oom_response_len:
            line += (f"; [yellow]runs out of memory once a micro-batch's responses reach about "
                     f"{lengths.oom_response_len} tokens[/] (turn dynamic_batch on, or add what 'would fit' names)")
        out.print(line)
    if estimate.seen_ran:
        out.print(f"[dim]{escape(estimate.seen_ran)}; it fits as seen, whatever the formulas say[/]")
    if estimate.fits:
        out.print("[green]fits[/]" + (" (with the features the estimate added)" if prepared.spec.estimate_features else ""))
    else:
        needs = ", ".join(estimate.needs) or "more devices"
        out.print(f"[bold red]does not fit[/]: {', '.join(estimate.over())}; would fit with: {escape(needs)}")
        if estimate.alternatives:
            out.print("  or, without a new feature: " + escape(", ".join(estimate.alternatives)))
