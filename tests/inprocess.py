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


def _run_child(args: list[str]) -> int:
    """In the forked child: the entry point as `python -m verl_deploy ARGS` runs it, on fresh standard streams."""
    import signal
    import threading

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
    threading._shutdown()  # type: ignore[attr-defined]  # joins the command's threads, as an interpreter's exit does
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            pass
    return code


def _read_to_end(pid: int, out_fd: int, err_fd: int, timeout: float) -> tuple[bytes, bytes]:
    """Both pipes until their last writer closes them, as subprocess.run reads: a process the command left holding
    its output keeps the call waiting here too. TimeoutExpired after TIMEOUT seconds."""
    import select
    import time

    chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    poller = select.poll()
    for fd in chunks:
        poller.register(fd, select.POLLIN)
    open_fds = set(chunks)
    deadline = time.monotonic() + timeout
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired([str(pid)], timeout)
        for fd, _ in poller.poll(left * 1000):
            data = os.read(fd, 65536)
            if data:
                chunks[fd].append(data)
            else:
                poller.unregister(fd)
                open_fds.discard(fd)
    return b"".join(chunks[out_fd]), b"".join(chunks[err_fd])


def run_forked(args: list[str], env: dict[str, str], input: str | None, cwd: Path | None,
               timeout: float, path: str = "") -> subprocess.CompletedProcess:
    """The command in a process of its own, forked from this one with the CLI already imported.

    For the commands that own their process (status and logs may start a supervisor, which must be the child of a
    process that exits; launch waits on it): the child has its own pid, environment, working directory, signal
    dispositions and standard streams (the input as a file on fd 0, never the test worker's; output into pipes read
    to the end), and exits with os._exit, so nothing of the test process runs twice. PATH's entries (the test's
    PYTHONPATH) come first on the child's sys.path, as a new interpreter puts them. A subprocess would re-import
    everything for each call.
    """
    import importlib
    import signal

    from verl_deploy.cli import COMMANDS

    if cwd is not None and not Path(cwd).is_dir():
        raise FileNotFoundError(f"no directory {cwd}")  # what subprocess.run raises in the caller
    if args and args[0] in COMMANDS:  # the command's module, imported here once instead of in every child (status
        importlib.import_module(COMMANDS[args[0]].module)  # is polled hundreds of times; imports were most of it)
    feed = tempfile.TemporaryFile()
    feed.write((input or "").encode())
    feed.seek(0)
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the test process
        code = 1
        try:
            os.close(out_read)
            os.close(err_read)
            for number, fd in ((0, feed.fileno()), (1, out_write), (2, err_write)):
                os.dup2(fd, number)
            os.environ.clear()
            os.environ.update(env)
            if cwd is not None:
                os.chdir(cwd)
            sys.path[0:0] = [entry for entry in path.split(os.pathsep) if entry]
            importlib.invalidate_caches()
            code = _run_child(args)
        except BaseException:  # noqa: BLE001 - the set-up failed: say so on stderr, as a crashing interpreter would
            os.write(2, traceback.format_exc().encode(errors="replace"))
        finally:
            os._exit(code)
    os.close(out_write)
    os.close(err_write)
    feed.close()
    try:
        stdout, stderr = _read_to_end(pid, out_read, err_read, timeout)
    except BaseException:  # the timeout, or pytest-timeout's interruption: the child goes too, as subprocess.run does
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    finally:
        os.close(out_read)
        os.close(err_read)
    _, status = os.waitpid(pid, 0)
    return subprocess.CompletedProcess(["verl-deploy", *args], os.waitstatus_to_exitcode(status),
                                       stdout.decode(errors="replace"), stderr.decode(errors="replace"))
