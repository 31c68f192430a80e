"""The options shared by every command that builds a run (plan, generate, launch, ...).

Generated from the RunSpec fields' declarations (spec.py: flags, help, panel) and added to each
command's signature by ``spec_options``, so a flag is spelled in one place. ``flags_from`` turns the
parsed options into the `flags` layer of the sources (only the options the user actually gave).
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
import typing
from typing import Any, Callable, List, Optional

import typer

from verl_deploy import boundedread
from verl_deploy.findings import UserError, error
from verl_deploy.secrets import MAX_KEY_BYTES
from verl_deploy.spec import DECLARED, RunSpec, flag_of, listing

P = inspect.Parameter


def _opt(*names: str, help: str, **kw: Any) -> Any:
    return typer.Option(None, *names, help=help, show_default=False, **kw)


PANELS = ("Input", "Run", "Paths", "Hardware", "Hyper-parameters", "Parallelism", "Features", "SwanLab")
# the options that are not spec fields: where the spec's values come from
CONFIG_OPTION = ("config", Optional[str], _opt("--config", "-c", help="YAML config file of spec fields (see "
                                                                     "`verl-deploy init`).", rich_help_panel="Input"))
IGNORE_DETECTED_OPTION = ("ignore_detected", Optional[bool], _opt("--ignore-detected", help="Do not start from the "
                                                                  "values `verl-deploy check` found on this host.",
                                                                  rich_help_panel="Input"))


def _option_type(name: str) -> Any:
    """What the flag takes: numbers as numbers, a switch as a bool, a repeatable flag as a list, else text
    (lists, choices and yes|no answers are parsed by sources/spec, which name the field in their errors)."""
    meta, annotation = DECLARED[name], RunSpec.model_fields[name].annotation
    kinds = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) \
        else (annotation,)
    if meta.repeat:
        return Optional[List[str]]
    if bool in kinds:
        return Optional[str] if meta.yes_no else Optional[bool]
    for kind in (int, float):
        if kind in kinds:
            return Optional[kind]
    return Optional[str]


def _field_options() -> list[tuple[str, Any, Any]]:
    """(parameter, annotation, typer option) of every spec field with a flag, by panel (RunSpec declares them)."""
    return [(name, _option_type(name), _opt(*DECLARED[name].flags, help=DECLARED[name].help, rich_help_panel=panel))
            for panel, names in listing("panel", PANELS) for name in names]


# (parameter name, annotation, typer option): the parameter is the RunSpec field, but for the two above
SPEC_OPTIONS: list[tuple[str, Any, Any]] = [CONFIG_OPTION, *_field_options(), IGNORE_DETECTED_OPTION]
SPEC_OPTION_NAMES = {name for name, _, _ in SPEC_OPTIONS}
YES_NO_OPTIONS = {name for name in SPEC_OPTION_NAMES if name in DECLARED and DECLARED[name].yes_no}  # `--flag yes|no`


def spec_options(func: Callable, only: tuple[str, ...] | None = None) -> Callable:
    """Add the shared spec options to a command; the command receives them in **kwargs."""
    hints = typing.get_type_hints(func)  # the command module's own names, not ours
    own = [p.replace(annotation=hints.get(p.name, p.annotation))
           for p in inspect.signature(func).parameters.values() if p.kind is not P.VAR_KEYWORD]
    shared = [P(name, P.KEYWORD_ONLY, default=option, annotation=annotation) for name, annotation, option in SPEC_OPTIONS
              if only is None or name in only]

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        return func(**kwargs)

    params = [p.replace(kind=P.KEYWORD_ONLY) for p in own] + shared
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    del wrapper.__wrapped__  # typer must read our signature, not the original's
    return wrapper


def some_spec_options(*names: str) -> Callable[[Callable], Callable]:
    """Only these shared options (a command that needs a few, e.g. `swanlab login`, lists only its own)."""
    unknown = set(names) - SPEC_OPTION_NAMES
    assert not unknown, unknown
    return lambda func: spec_options(func, only=names)


def flags_from(options: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The `flags` layer for sources.resolve, and the --config path."""
    flags: dict[str, Any] = {}
    for name in SPEC_OPTION_NAMES - {"config", "ignore_detected"}:
        value = options.get(name)
        if value is None or value is False or value == []:
            continue
        flags[name] = list(value) if isinstance(value, (list, tuple)) else value
    for name in YES_NO_OPTIONS & set(flags):
        answer = str(flags[name]).strip().lower()
        flag = flag_of(name)
        if answer not in {"yes", "no", "true", "false", "on", "off", "1", "0", "y", "n"}:
            raise UserError([error(name, f"{str(flags[name])[:40]!r} is not yes or no", f"pass {flag} yes or {flag} no")])
        flags[name] = answer in {"yes", "true", "on", "1", "y"}
    if flags.get("swanlab_api_key") == "-":
        try:
            key = boundedread.read_line(sys.stdin, MAX_KEY_BYTES, "the key on stdin").strip()
        except boundedread.UnreadableFile as exc:
            raise UserError([error("swanlab_api_key", str(exc),
                                   "pipe one line with the key: echo $KEY | verl-deploy ... --swanlab-api-key -")]) from None
        if not key:
            raise UserError([error("swanlab_api_key", "no key on stdin", "pipe the key: echo $KEY | verl-deploy ... --swanlab-api-key -")])
        flags["swanlab_api_key"] = key
    return flags, options.get("config")
