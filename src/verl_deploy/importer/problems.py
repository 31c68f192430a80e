"""The one error `import` reports when a script cannot be imported: what is wrong, and the fix."""

from __future__ import annotations


class ImportProblem(Exception):
    """The script cannot be imported; `fix` says what to do."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix
