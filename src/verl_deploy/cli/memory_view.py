"""The memory estimate for people: one row per phase, the device, the headroom, what would fit."""

from __future__ import annotations

from verl_deploy.cli.output import console
from verl_deploy.pipeline import Prepared

TOP_TERMS = 3  # terms named per phase in the default view


def _terms_cell(estimate, name: str, everything: bool) -> str:
    """A phase's terms (the TOP_TERMS biggest unless `everything`), KV room for the rollout, the lesson it saw."""
    named = [(k, v) for k, v in estimate.phases[name].items() if v.gb >= 0.05]
    if not everything and len(named) > TOP_TERMS:
        named = sorted(named, key=lambda kv: -kv[1].gb)[:TOP_TERMS]
        named.append(("…", None))
    shown = " · ".join(k if v is None else f"{k} {v.gb:.1f}" for k, v in named)
    if name == "rollout":
        shown += f" · KV left {estimate.kv_left.gb:.1f} (needs {estimate.kv_needed.gb:.2f})"
    if name in estimate.observed:
        shown += f" · {estimate.observed[name]}"
    return shown


def _phase_table(estimate, everything: bool):
    from rich.markup import escape
    from rich.table import Table

    limit = estimate.limit_gb
    split = any(pool != "shared" for pool in estimate.phase_pool.values())
    table = Table(title=f"memory per device ({escape(estimate.model)}, {escape(estimate.layout)})", box=None,
                  header_style="bold", title_justify="left")
    for column in ("phase", *(("pool",) if split else ()), "GiB", "of limit", "terms (GiB)"):
        table.add_column(column, overflow="fold")
    over = estimate.over()
    for name in estimate.phases:
        gb = estimate.phase_gb(name)
        style = "red" if name in over else ("yellow" if gb > 0.85 * limit else "")
        cell = f"{gb:.1f}"
        table.add_row(name, *((estimate.pool(name),) if split else ()), f"[{style}]{cell}[/]" if style else cell,
                      f"{gb / limit:.0%}" if limit else "-", escape(_terms_cell(estimate, name, everything)))
    return table


def _pools_line(estimate) -> str | None:
    """The split modes: each pool on its own devices, and which one does not fit."""
    pools = estimate.pools()
    if set(pools) == {"shared"}:
        return None
    parts = [f"{name} pool ({entry['devices_per_node']} devices per node) peak {entry['peak_gb']:.1f} GiB, "
             + ("fits" if entry["fits"] else "[red]does not fit[/]") for name, entry in pools.items()]
    return "pools: " + "; ".join(parts)


def _lengths_line(estimate, everything: bool) -> str | None:
    """Typical vs worst step, and the response length where it starts to run out of memory."""
    lengths = estimate.lengths
    if lengths is None:
        return None
    if lengths.budget_bound:
        return ("[dim]responses: dynamic batching cuts the rank's share into micro-batches near its token budget "
                "already at the typical lengths, so the peak above holds whatever the response lengths[/]"
                if everything else None)
    longest = "" if lengths.dynamic else f", the largest micro-batch holding one of {lengths.max_response_len}"
    line = (f"responses: typical step ({lengths.typical_response_len}-token responses, {lengths.typical_prompt_len}-token "
            f"prompts{longest}) {lengths.typical_peak_gb:.1f} GiB, worst step (all {lengths.max_response_len}) "
            f"{lengths.worst_peak_gb:.1f} GiB")
    if lengths.oom_response_len:
        line += (f"; [yellow]runs out of memory once a micro-batch's responses reach about {lengths.oom_response_len} "
                 "tokens[/] (" + ("lower the token budget" if lengths.dynamic else "turn dynamic_batch on")
                 + ", or add what 'would fit' names)")
    return line


def _verdict(estimate, prepared: Prepared) -> list[str]:
    from rich.markup import escape

    if estimate.fits:
        lines = ["[green]fits[/]" + (" (with the features the estimate added)" if prepared.spec.estimate_features else "")
                 + (" at the typical step" if estimate.tolerated else "")]
        if estimate.tolerated:
            first = [] if estimate.lengths is not None and estimate.lengths.dynamic else ["dynamic_batch"]
            lines.append("  the worst step needs: " + escape(", ".join([*first, *estimate.worst_needs])))
        return lines
    needs = ", ".join(estimate.needs) or "more devices"
    lines = [f"[bold red]does not fit[/]: {', '.join(estimate.over())}; would fit with: {escape(needs)}"]
    if estimate.alternatives:
        lines.append("  or, without a new feature: " + escape(", ".join(estimate.alternatives)))
    return lines


def show_memory(prepared: Prepared, *, stderr: bool = False, everything: bool = True) -> None:
    """The estimate per phase. Without `everything` (`plan` by default) each phase names its TOP_TERMS biggest
    terms and the formulas of the peak are left to `plan --all` / `--explain-memory`."""
    from rich.markup import escape

    out = console(stderr=stderr)
    estimate = prepared.memory
    if estimate is None:
        out.print(f"[bold]memory[/]: no estimate ({escape(prepared.memory_note)})")
        return
    limit = estimate.limit_gb
    out.print(_phase_table(estimate, everything))
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
    extra = [_pools_line(estimate), host, _lengths_line(estimate, everything)]
    if estimate.seen_ran:
        extra.append(f"[dim]{escape(estimate.seen_ran)}; it fits as seen, whatever the formulas say[/]")
    for line in [*extra, *_verdict(estimate, prepared)]:
        if line:
            out.print(line)
