"""What plan, generate, check and init share: options -> Prepared or a check, with findings instead of tracebacks."""

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
    except UserError as exc:
        raise fail(exc.findings, as_json=as_json) from None
    return prepare_from_flags(flags, config_file, ignore_detected=bool(options.get("ignore_detected")), as_json=as_json)


def prepare_from_flags(flags: dict[str, Any], config_file: str | None, *, ignore_detected: bool = False,
                       as_json: bool = False) -> Prepared:
    """For commands that need the flags again later (flags_from reads `--swanlab-api-key -` from stdin once)."""
    try:
        err = console(stderr=True)
        announce = None if as_json else (lambda text: err.print(f"[dim]{text}[/]"))
        problems: list[str] = []
        detected, when = ({}, None) if ignore_detected else load_detected(problems=problems)
        for problem in problems:
            err.print(f"warning: {problem}", markup=False, highlight=False, soft_wrap=True)
        if when and announce:
            announce(f"starting from what `verl-deploy check` found on this host at {when} (--ignore-detected to not)")
        return prepare(flags=flags, environ=os.environ, config_file=config_file, detected=detected, announce=announce)
    except UserError as exc:
        raise fail(exc.findings, as_json=as_json) from None


def check_with(flags: dict[str, Any], config_file: str | None, *, search_roots: list[str] | None = None,
               timeout: float = 10.0):
    """The preflight check for these flags and config file, with the detected layer it finds itself."""
    from verl_deploy.runs.gate import host_check

    return host_check(flags, config_file, search_roots=search_roots, timeout=timeout)
