"""What plan, generate and launch share: options -> Prepared, with findings instead of tracebacks."""

from __future__ import annotations

import os
from typing import Any

from verl_deploy.cli.options import flags_from
from verl_deploy.cli.output import console, fail
from verl_deploy.findings import UserError
from verl_deploy.pipeline import Prepared, prepare
from verl_deploy.preflight.saved import load_detected


def prepare_from_options(options: dict[str, Any], *, as_json: bool = False) -> Prepared:
    try:
        flags, config_file = flags_from(options)
        err = console(stderr=True)
        announce = None if as_json else (lambda text: err.print(f"[dim]{text}[/]"))
        detected, when = ({}, None) if options.get("ignore_detected") else load_detected()
        if when and announce:
            announce(f"starting from what `verl-deploy check` found on this host at {when} (--ignore-detected to not)")
        return prepare(flags=flags, environ=os.environ, config_file=config_file, detected=detected, announce=announce)
    except UserError as exc:
        raise fail(exc.findings, as_json=as_json) from None
