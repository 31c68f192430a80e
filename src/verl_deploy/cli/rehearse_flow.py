"""`launch --rehearse` / `--rehearse-only`: the rehearsal (runs/rehearse.py) between the confirmation and the real start."""

from __future__ import annotations

from typing import Callable

import typer


def rehearse_first(spec, start: Callable, *, only: bool, json_output: bool, say: Callable[[str], None]) -> dict:
    """Run the rehearsal with `start` (the real run's launch); one line and exit 1 when it fails (the real run
    never starts); with `only`, print what it did and exit."""
    from verl_deploy.cli.output import console, fail, print_json
    from verl_deploy.findings import error
    from verl_deploy.runs.control import LaunchError
    from verl_deploy.runs.rehearse import RehearsalFailed, rehearse

    try:
        result = rehearse(spec, start=start, say=say)
    except RehearsalFailed as exc:
        raise fail([error("rehearsal", str(exc), exc.fix)], as_json=json_output) from None
    except LaunchError as exc:
        raise fail([error("rehearsal", f"the rehearsal could not start: {exc}; the real run was not started",
                          "see `verl-deploy status` and `verl-deploy logs`")], as_json=json_output) from None
    document = result.as_dict()
    if only:
        if json_output:
            print_json({"ok": True, "rehearsal": document})
        else:
            console().print(f"rehearsal passed: {', '.join(r['id'] for r in document['runs'])} "
                            "(--rehearse-only: the real run was not started)")
        raise typer.Exit(code=0)
    return document


def rehearsal_view(spec) -> dict:
    """What `launch --rehearse` would change, for `plan --rehearse`."""
    from verl_deploy.runs.rehearse import rehearsal_changes

    return rehearsal_changes(spec)
