"""The argument parser's refusals as one line, like every other refusal of verl-deploy.

Typer draws a usage line, a hint and a boxed message for an unknown option or a value that is not a
number; an agent reading stderr (and a person scanning it) gets the same `error: FIELD: what — fix:
how` line that the spec checks print, and the same exit code 2 as before.
"""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer import core as typer_core
from typer.core import TyperGroup

# Typer 0.2x parses with its own copy of click (`typer._click`); older Typer uses click itself
_parser: Any = getattr(typer_core, "_click", None)
if _parser is None:  # pragma: no cover - older Typer
    import click as _parser
_errors = _parser.exceptions
_NoArgsIsHelp = getattr(_errors, "NoArgsIsHelpError", ())


def as_finding(error: Any):
    """The refusal as a finding, from click's own message (which already names the option)."""
    from verl_deploy.findings import error as error_finding

    message = " ".join(error.format_message().split())
    command = error.ctx.command_path if error.ctx is not None else "verl-deploy"
    param: Any = getattr(error, "param", None)
    field = (param.opts[0] if getattr(param, "opts", None) else getattr(param, "name", None)) \
        or (error.ctx.info_name if error.ctx is not None else None) or "verl-deploy"
    return error_finding(field, message, f"see `{command} -h` for what it takes", area="arguments")


def wants_json(args: Any) -> bool:
    """Was --json among the arguments (before a `--`)? Then stdout gets the refusal as JSON too."""
    words = list(sys.argv[1:] if args is None else args)
    return "--json" in (words[:words.index("--")] if "--" in words else words)


class _CountingStdout:
    """sys.stdout that remembers whether anything was written (for --json: one document, always)."""

    def __init__(self, inner: Any):
        self.inner, self.written = inner, False

    def write(self, text: str) -> int:
        if text:
            self.written = True
        return self.inner.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _json_backstop(code: Any, stdout: _CountingStdout) -> None:
    """A --json command that printed no document still leaves one: its outcome, pointing at stderr."""
    if stdout.written:
        return
    import json

    from verl_deploy.findings import error as error_finding

    number = code if isinstance(code, int) else (0 if code is None else 1)
    findings = [] if number == 0 else [error_finding(
        "verl-deploy", f"the command ended with exit status {number} and printed no JSON document; what it said "
                       "is on stderr", "read stderr; report this as a bug of verl-deploy's --json output",
        area="arguments")]
    stdout.inner.write(json.dumps({"ok": number == 0, "exit_status": number,
                                   "findings": [f.as_dict() for f in findings]}, indent=2) + "\n")
    stdout.inner.flush()


class OneLineErrorGroup(TyperGroup):
    """The root command: parses as Typer does, reports a usage error in one line."""

    def main(self, args: Any = None, prog_name: Any = None, complete_var: Any = None,  # type: ignore[override]
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        if not wants_json(args) or "--help" in (args or sys.argv[1:]) or "-h" in (args or sys.argv[1:]):
            return self._main(args, prog_name, complete_var, **extra)
        counting = _CountingStdout(sys.stdout)
        sys.stdout = counting
        try:
            self._main(args, prog_name, complete_var, **extra)
        except SystemExit as done:
            sys.stdout = counting.inner
            _json_backstop(done.code, counting)
            raise
        except BaseException as error:  # a crash in --json mode: still one document (the traceback goes to stderr)
            sys.stdout = counting.inner
            if not counting.written:
                import json

                from verl_deploy.findings import error as error_finding

                finding = error_finding("verl-deploy", f"internal error: {type(error).__name__}: {error}"[:500],
                                        "report this as a bug of verl-deploy (the traceback is on stderr)",
                                        area="internal")
                counting.inner.write(json.dumps({"ok": False, "findings": [finding.as_dict()]}, indent=2) + "\n")
                counting.inner.flush()
            raise
        finally:
            sys.stdout = counting.inner

    def _main(self, args: Any, prog_name: Any, complete_var: Any, **extra: Any) -> Any:
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _NoArgsIsHelp as error:  # bare `verl-deploy`: the help, as Typer shows it
            from typer import rich_utils

            rich_utils.rich_format_error(error)
            sys.exit(error.exit_code)
        except _errors.UsageError as error:
            finding = as_finding(error)
            typer.echo(finding.line(), err=True)
            if wants_json(args):  # same shape as every other --json refusal
                import json

                typer.echo(json.dumps({"ok": False, "findings": [finding.as_dict()]}, indent=2))
            sys.exit(error.exit_code)
        except _errors.ClickException as error:
            error.show()
            sys.exit(error.exit_code)
        except Exception as error:
            from verl_deploy.statedir import UnusableDir

            if not isinstance(error, UnusableDir):
                raise
            finding = error.finding()  # $VERL_DEPLOY_STATE_DIR (or the cache, the config dir) is a file
            typer.echo(finding.line(), err=True)
            if wants_json(args):
                import json

                typer.echo(json.dumps({"ok": False, "findings": [finding.as_dict()]}, indent=2))
            sys.exit(1)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else 0)
