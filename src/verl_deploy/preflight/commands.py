"""Running probe commands on the host or inside the run's container, always with a timeout.

A missing command (`npu-smi` not installed) or one that hangs (a wedged driver) is a result,
not an exception: probes turn it into a finding. With a container, commands go through
`docker exec NAME ...` and files are read with `docker exec NAME cat`, so what is checked is
what the training will see.
"""

from __future__ import annotations

import glob as globbing
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int | None  # None: not run (missing) or killed (timeout)
    stdout: str = ""
    stderr: str = ""
    missing: bool = False
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def output(self) -> str:
        return self.stdout + ("\n" + self.stderr if self.stderr else "")

    def problem(self, timeout: float) -> str | None:
        """One line saying why this result is unusable, or None."""
        name = self.argv[0] if self.argv else "command"
        if self.missing:
            return f"{name} not found"
        if self.timed_out:
            return f"`{' '.join(self.argv)}` did not answer within {timeout:g} s"
        if not self.ok:
            detail = (self.stderr.strip() or self.stdout.strip()).splitlines()
            return f"`{' '.join(self.argv)}` failed (exit {self.returncode})" + (f": {detail[-1][:200]}" if detail else "")
        return None


def run(argv: list[str], timeout: float = DEFAULT_TIMEOUT, *, input: str | None = None,
        env: dict | None = None) -> Result:
    """argv with a timeout; `input` goes to its stdin (else stdin is closed)."""
    if shutil.which(argv[0], path=(env or os.environ).get("PATH")) is None:
        return Result(tuple(argv), None, missing=True)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, errors="replace", input=input,
                              env=env, stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return Result(tuple(argv), None, out, timed_out=True)
    except OSError as exc:
        return Result(tuple(argv), None, stderr=str(exc), missing=True)
    return Result(tuple(argv), done.returncode, done.stdout, done.stderr)


class Runner:
    """Where probes look: this host."""

    where = "host"

    def __init__(self, timeout: float = DEFAULT_TIMEOUT):
        self.timeout = timeout

    def run(self, argv: list[str], timeout: float | None = None) -> Result:
        return run(argv, timeout or self.timeout)

    def read_text(self, path: str, limit: int = 1 << 20) -> str | None:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read(limit)
        except OSError:
            return None

    def glob(self, pattern: str) -> list[str]:
        return sorted(globbing.glob(pattern))

    def exists(self, path: str) -> bool:
        return Path(path).exists()


class ContainerRunner(Runner):
    """Where probes look: inside a running container, through `docker exec`."""

    def __init__(self, container: str, timeout: float = DEFAULT_TIMEOUT):
        super().__init__(timeout)
        self.container = container
        self.where = f"container {container}"

    def run(self, argv: list[str], timeout: float | None = None) -> Result:
        # `sh -c 'command -v X'` first would cost a round trip; docker exec's own 126/127 tells us instead.
        result = run(["docker", "exec", "--", self.container, *argv], timeout or self.timeout)
        if result.returncode in (126, 127) and ("executable file not found" in result.output
                                                or "not found" in result.output):
            return Result(tuple(argv), None, result.stdout, result.stderr, missing=True)
        return Result(tuple(argv), result.returncode, result.stdout, result.stderr, result.missing, result.timed_out)

    def read_text(self, path: str, limit: int = 1 << 20) -> str | None:
        result = self.run(["cat", path])
        return result.stdout[:limit] if result.ok else None

    def glob(self, pattern: str) -> list[str]:
        result = self.run(["sh", "-c", f"for f in {pattern}; do [ -e \"$f\" ] && echo \"$f\"; done"])
        return sorted(line for line in result.stdout.splitlines() if line) if result.ok else []

    def exists(self, path: str) -> bool:
        return self.run(["test", "-e", path]).ok
