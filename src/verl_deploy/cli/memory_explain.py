"""`plan --explain-memory`: every memory term of every phase, with its formula and where it comes from."""

from __future__ import annotations

from verl_deploy.cli.output import console
from verl_deploy.pipeline import Prepared


def explain_document(prepared: Prepared) -> dict:
    """The explanation as JSON: per phase its terms (largest first), formula and source; None without an estimate."""
    estimate = prepared.memory
    if estimate is None:
        return {"estimate": None, "why": prepared.memory_note}
    return {"estimate": {"model": estimate.model, "layout": estimate.layout, "limit_gb": round(estimate.limit_gb, 2),
                         "fits": estimate.fits, "phases": estimate.explain(),
                         "kv_cache": {"left_gb": round(estimate.kv_left.gb, 2),
                                      "needed_gb": round(estimate.kv_needed.gb, 2),
                                      "left": estimate.kv_left.formula, "needed": estimate.kv_needed.formula},
                         "pools": estimate.pools(),
                         "lengths": None if estimate.lengths is None else estimate.lengths.to_dict(),
                         "observed": dict(estimate.observed)}}


def show_explanation(prepared: Prepared) -> None:
    from rich.markup import escape
    from rich.table import Table

    out = console()
    estimate = prepared.memory
    if estimate is None:
        out.print(f"[bold]memory terms[/]: no estimate ({escape(prepared.memory_note)})")
        return
    for phase in estimate.explain():
        mark = "[red]over[/]" if phase["over"] else "fits"
        pool = "" if phase["pool"] == "shared" else escape(f" [{phase['pool']} pool]")
        table = Table(title=f"{phase['phase']}{pool}: {phase['gb']:.2f} GiB of {phase['limit_gb']:.2f} ({mark})", box=None,
                      header_style="bold", title_justify="left")
        for column in ("term", "GiB", "formula", "source"):
            table.add_column(column, overflow="fold")
        for row in phase["terms"]:
            table.add_row(row["term"], f"{row['gb']:.2f}", escape(row["formula"]), f"[dim]{escape(row['source'])}[/]")
        out.print(table)
        if phase["observed"]:
            out.print(f"  calibration: {escape(phase['observed'])}")
    out.print(f"KV cache the rollout budget leaves: {estimate.kv_left.gb:.2f} GiB ({escape(estimate.kv_left.formula)}); "
              f"one max_model_len sequence needs {estimate.kv_needed.gb:.2f} GiB")
