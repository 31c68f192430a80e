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


# What a forked command imports on its first line: imported once here instead of in every child (status is polled
# hundreds of times; its own imports were most of its 0.19 CPU-s as a subprocess).
_COMMAND_MODULES = {"status": "status_cmd", "logs": "logs_cmd", "launch": "launch_cmd", "_supervise": "supervise_cmd"}


def _run_child(args: list[str], input_fd: int, out_fd: int, err_fd: int) -> int:
    """In the forked child: the entry point as `python -m verl_deploy ARGS` runs it, on fresh standard streams."""
    import signal

    for number, fd in ((0, input_fd), (1, out_fd), (2, err_fd)):
        os.dup2(fd, number)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # what a new interpreter starts with
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    sys.argv = ["verl-deploy", *args]
    try:
        from verl_deploy.cli import main

        main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if exit_.code is not None and not isinstance(exit_.code, int):
            print(exit_.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as the interpreter reports an uncaught exception
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            pass
    return code


def run_forked(args: list[str], env: dict[str, str], input: str | None, cwd: Path | None,
               timeout: float, path: str = "") -> subprocess.CompletedProcess:
    """The command in a process of its own, forked from this one with the CLI already imported.

    For the commands that own their process (status and logs may start a supervisor, which must be the child of a
    process that exits; launch waits on it): the child has its own pid, environment, working directory, signal
    dispositions and standard streams (the input as a file on fd 0, never the test worker's), and exits with
    os._exit, so nothing of the test process runs twice. PATH's entries (the test's PYTHONPATH) come first on the
    child's sys.path, as a new interpreter puts them. A subprocess would re-import everything for each call.
    """
    import importlib
    import select
    import signal

    from verl_deploy import cli  # noqa: F401 - imported before the fork, once

    module = _COMMAND_MODULES.get(args[0] if args else "")
    if module:
        importlib.import_module(f"verl_deploy.cli.{module}")
    out, err, feed = tempfile.TemporaryFile(), tempfile.TemporaryFile(), tempfile.TemporaryFile()
    feed.write((input or "").encode())
    feed.seek(0)
    sys.stdout.flush()
    sys.stderr.flush()
    open("/tmp/forklog", "a").write(" ".join(args[:1]) + " " + os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0] + "\n")
    pid = os.fork()
    if pid == 0:  # the child: never returns into the test process
        code = 1
        try:
            os.environ.clear()
            os.environ.update(env)
            if cwd is not None:
                os.chdir(cwd)
            sys.path[0:0] = [entry for entry in path.split(os.pathsep) if entry]
            importlib.invalidate_caches()
            code = _run_child(args, feed.fileno(), out.fileno(), err.fileno())
        finally:
            os._exit(code)
    pidfd = os.pidfd_open(pid)
    try:
        if not select.select([pidfd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired([*args], timeout)
    except BaseException:  # the timeout, or pytest-timeout's interruption: the child goes too, as subprocess.run does
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    feed.close()
    return subprocess.CompletedProcess(["verl-deploy", *args], os.waitstatus_to_exitcode(status), _read(out),
                                       _read(err))
