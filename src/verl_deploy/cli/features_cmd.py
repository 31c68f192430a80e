"""`verl-deploy features`: the feature registry, and `--mask` to decode a 7-bit mask."""

from __future__ import annotations

from typing import Optional

import typer

from verl_deploy.cli import app

EPILOG = """\
Examples:

  verl-deploy features                   # every feature: bit, kind, default, where it applies

  verl-deploy features --mask 1010000    # RmvPad on, Offload on, the rest off
"""


@app.command("features", epilog=EPILOG)
def features_command(
    mask: Optional[str] = typer.Option(None, "--mask", help="Decode a 7-bit mask (leftmost = bit 0)."),
    json_output: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """List the features, or decode a feature mask."""
    from rich.table import Table

    from verl_deploy import features as registry
    from verl_deploy.cli.output import console, fail, print_json

    if mask is not None:
        decoded, problems = registry.parse_mask(mask)
        if problems:
            raise fail(problems, as_json=json_output)
        rows = registry.describe_mask(mask)
        if json_output:
            print_json({"mask": mask, "bits": rows})
            return
        table = Table(title=f"mask {mask}", box=None, header_style="bold", title_justify="left")
        for column in ("bit", "label", "feature", "state", "description"):
            table.add_column(column)
        for row in rows:
            table.add_row(str(row["bit"]), row["label"], row["feature"], "[green]on[/]" if row["on"] else "off",
                          row["description"])
        console().print(table)
        return
    rows = [
        {"name": f.name, "bit": f.bit, "label": f.mask_label, "kind": f.kind, "default": "on" if f.default_on else "off",
         "frameworks": list(f.frameworks), "devices": list(f.devices), "description": f.description, "note": f.note}
        for f in registry.REGISTRY
    ]
    from verl_deploy.profiles.modes import RELEASES, mode_table

    modes = mode_table()
    if json_output:
        print_json({"features": rows, "oom_ladder": list(registry.OOM_LADDER),
                    "oom_ladders": {k: list(v) for k, v in registry.OOM_LADDERS.items()}, "modes": modes})
        return
    table = Table(box=None, header_style="bold")
    for column in ("feature", "bit", "kind", "default", "applies to", "description"):
        table.add_column(column, overflow="fold")
    for row in rows:
        where = "/".join(row["frameworks"]) + " · " + "/".join(row["devices"])
        text = row["description"] + (f" ({row['note']})" if row["note"] else "")
        table.add_row(row["name"], "" if row["bit"] is None else str(row["bit"]), row["kind"], row["default"], where, text)
    out = console()
    out.print(table)
    out.print("Policy: your explicit choice > default performance features > memory features added on OOM "
              "(offload, then recompute). A mask sets all seven of its features.")
    by_release = Table(title="--mode x verl release: what verl runs ('-': refused on that release)", box=None,
                       header_style="bold", title_justify="left")
    for column in ("mode", *RELEASES):
        by_release.add_column(column, overflow="fold")
    for row in modes:
        by_release.add_row(row["mode"], *(row["releases"][version] for version in RELEASES))
    out.print(by_release)
