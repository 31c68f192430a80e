"""The root command group that imports a subcommand's module only when that subcommand runs.

`verl-deploy --help` lists every command from a table of names and one-line helps, so it needs none of
the command modules (and none of what they import); `verl-deploy plan` imports `cli/plan_cmd.py` alone.
A module imported some other way (a test, an eager import line in `cli/__init__.py`) registers its
commands on the Typer app as usual, and they are used as they are.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

from verl_deploy.cli.usage_errors import OneLineErrorGroup, _errors


@dataclass(frozen=True)
class LazyCommand:
    """Where a subcommand is defined, and the line `--help` shows for it (its docstring's first line)."""

    module: str
    help: str
    hidden: bool = False


class LazyCommandGroup(OneLineErrorGroup):
    """Lists the table's commands in its order, builds a command from its module on first use."""

    table: ClassVar[dict[str, LazyCommand]] = {}  # name -> where it lives, in the order `--help` lists them
    typer_app: ClassVar[Any] = None  # the Typer app the modules register their commands on

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._listing = False  # True while the help is drawn: the table's line stands in for the command

    def list_commands(self, ctx: Any) -> list[str]:
        names = list(self.table)
        return names + [name for name in self.commands if name not in self.table]  # eager ones, as registered

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = self.commands.get(cmd_name)
        entry = self.table.get(cmd_name)
        if command is not None or entry is None:
            return command
        if self._listing:
            return self.stand_in(cmd_name, entry)
        return self.load(cmd_name, entry)

    def load(self, cmd_name: str, entry: LazyCommand) -> Any:
        """Import the module (its decorators register on the app), then build the click command Typer would."""
        from typer.main import get_group

        importlib.import_module(entry.module)
        command = get_group(self.typer_app).commands.get(cmd_name)
        if command is not None:
            self.commands[cmd_name] = command
        return command

    @staticmethod
    def stand_in(cmd_name: str, entry: LazyCommand) -> Any:
        from typer.core import TyperCommand

        return TyperCommand(name=cmd_name, help=entry.help, hidden=entry.hidden)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """As Typer's, with its "Did you mean" drawn from every command, loaded or not."""
        from difflib import get_close_matches

        suggest, self.suggest_commands = self.suggest_commands, False
        try:
            return super().resolve_command(ctx, args)
        except _errors.UsageError as error:
            matches = get_close_matches(args[0], self.list_commands(ctx)) if suggest and args else []
            if matches:
                error.message = f"{error.message.rstrip('.')}. Did you mean {', '.join(repr(m) for m in matches)}?"
            raise
        finally:
            self.suggest_commands = suggest

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False
