"""Run `verl-deploy ARGS` inside the test process, with what a subprocess would have given.

A subprocess costs a fresh interpreter and every import again (0.4-1 s of CPU per call on the 2-core
machine; the suite makes hundreds); in-process it is the same click entry point (`main`'s app, its
one-line error group, exit codes). What the subprocess isolated is isolated here by hand: the
environment and working directory are restored afterwards, file descriptors 1 and 2 are captured too
(a child process the command starts writes there, as it would into the subprocess's pipes), and an
exception that escapes the command is printed as the Python traceback a subprocess would print.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path


@contextlib.contextmanager
def _descriptors_captured():
    """fd 1 and 2 into temporary files for the duration; yields them (read after the block)."""
    sys.stdout.flush()
    sys.stderr.flush()
    files = (tempfile.TemporaryFile(), tempfile.TemporaryFile())
    saved = (os.dup(1), os.dup(2))
    try:
        os.dup2(files[0].fileno(), 1)
        os.dup2(files[1].fileno(), 2)
        yield files
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _read(file) -> str:
    file.seek(0)
    text = file.read().decode(errors="replace")
    file.close()
    return text


def run_in_process(args: list[str], env: dict[str, str], input: str | None, cwd: Path | None
                   ) -> subprocess.CompletedProcess:
    """The command run through the app's own `main` path; returncode, stdout and stderr as a subprocess's."""
    from typer.testing import CliRunner

    from verl_deploy.cli import app

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    runner = CliRunner()
    try:
        os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        with _descriptors_captured() as (fd_out, fd_err):
            result = runner.invoke(app, args, input=input, prog_name="verl-deploy", catch_exceptions=True)
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    stdout = result.stdout + _read(fd_out)
    stderr = result.stderr + _read(fd_err)
    code = result.exit_code
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(*result.exc_info))  # as the interpreter prints it
        code = 1
    return subprocess.CompletedProcess(["verl-deploy", *args], code, stdout, stderr)
