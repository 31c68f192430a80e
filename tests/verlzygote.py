"""Warm interpreters for the tests' real-verl processes: verl is imported once, each run is a fork of it.

The suite starts about 120 Pythons that import a real verl release (`plan --verify`'s program, the rule
probes, the entry-import checks). Importing verl with torch, ray and transformers is ~4.7 CPU-seconds
of each; the code they then run is a fraction of that. On 2 cores that was a fifth of the suite.

How: `tests/realverl.py` puts a `sitecustomize.py` in each release's site directory that runs
`client()` below at interpreter start-up. When the suite set VERL_DEPLOY_ZYGOTE_DIR and the command
is `python -c CODE ...` or `python - ...` (the program on stdin), the client hands its stdin, stdout
and stderr, its argv, cwd, environment and sys.path to a server for that exact interpreter, sys.path and
import-relevant environment; the server (started the first time a combination is seen, importing
verl, hydra and verl's trainer entry once) forks; the child takes on the client's process state, runs
the code as `__main__` with verl's modules already imported and reports its exit status, which the
client exits with. Anything else — another form of command line, a server that fails to start, a
forked server with threads — runs as the cold interpreter it would have been.

What differs from a cold start is only what importing prints (it went to the server's log once) and
the process id. `test_verlzygote.py` runs the same programs both ways and compares what they print.
VERL_DEPLOY_TESTS_COLD_VERL=1 turns it off. Standard library only: the client runs before `site` is done.
"""

from __future__ import annotations

import array
import hashlib
import json
import os
import signal
import socket
import sys
import time

DIR_VAR = "VERL_DEPLOY_ZYGOTE_DIR"
OWNER_VAR = "VERL_DEPLOY_ZYGOTE_OWNER"  # the pytest process whose session the servers serve
CLIENT_VAR = "VERL_DEPLOY_ZYGOTE_CLIENT"  # this file's path, which the sitecustomize hook runs
SERVER_START_TIMEOUT = 120.0
IDLE_EXIT = 900.0  # a server nobody asked for this long ends even if its session's pytest is still there
# environment read at import time by torch, ray, transformers, hydra or verl: a different value, another server
# (not TOKENIZERS_PARALLELISM: tokenizers and transformers read it when they run, from the child's own environment)
_IMPORT_ENV_PREFIXES = ("VERL", "RAY", "CUDA", "ASCEND", "HCCL", "NCCL", "TORCH", "PYTORCH", "HF_", "HUGGING",
                        "TRANSFORMERS", "OMP", "MKL", "PYTHON", "LD_", "NPU", "VLLM", "SGLANG",
                        "TRITON", "XDG", "HOME", "WANDB", "SWANLAB", "HYDRA", "TMP", "LANG", "LC_")
# what the server imports before it forks: the modules every real-verl program of the suite starts with
WARM_MODULES = ("torch", "omegaconf", "hydra", "hydra.compose", "verl", "verl.utils.config",
                "verl.trainer.ppo.utils", "verl.trainer.main_ppo")
SITECUSTOMIZE = '''\
# Written by the verl-deploy tests (tests/realverl.py): hands `python -c`/`python -` runs to a warm verl
# interpreter while the suite runs (tests/verlzygote.py); does nothing anywhere else.
import os as _os
_code = _os.environ.get("VERL_DEPLOY_ZYGOTE_CLIENT")
if _os.environ.get("VERL_DEPLOY_ZYGOTE_DIR") and _code and _os.path.isfile(_code):
    _scope = {"__name__": "verl_zygote_client"}
    exec(compile(open(_code, encoding="utf-8").read(), _code, "exec"), _scope)
    _scope["client"]()
'''


def _import_env(env: dict) -> dict:
    return {k: v for k, v in sorted(env.items()) if k.startswith(_IMPORT_ENV_PREFIXES)
            and not k.startswith("VERL_DEPLOY_") and (k, v) not in _SAME_AS_UNSET}


# values that read as the variable's absence: importing ray sets RAY_CLIENT_MODE=0 in its own process (ray
# _private/client_mode_hook.py: client mode is "1" only), so a worker that imported ray passes it on
_SAME_AS_UNSET = {("RAY_CLIENT_MODE", "0")}


def key_of(executable: str, path: list[str], env: dict) -> str:
    """One server per interpreter, sys.path and import-relevant environment."""
    blob = json.dumps([os.path.realpath(executable), path, _import_env(env)], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _command() -> tuple[str, str] | None:
    """('-c', CODE) or ('-', '') for the two forms served; None for any other command line."""
    orig = list(getattr(sys, "orig_argv", []))
    if len(orig) >= 3 and orig[1] == "-c" and "multiprocessing" not in orig[2]:
        return "-c", orig[2]
    if len(orig) >= 2 and orig[1] == "-":
        return "-", ""
    return None


def _send_fds(sock: socket.socket, payload: bytes, fds: list[int]) -> None:
    sock.sendmsg([len(payload).to_bytes(8, "big")], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    sock.sendall(payload)


def _recv_exact(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _recv_line(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


# -- the client: runs inside the starting interpreter ------------------------------------------------------------

def _note_seen(directory: str, key: str, path: list[str]) -> None:
    """What the combination is, for whoever reads the directory (a server starts on its first run: its imports
    cost what one cold run costs, and every later run of it is a fork)."""
    marker = os.path.join(directory, key + ".seen")
    if os.path.exists(marker):
        return
    try:
        with open(marker, "x") as handle:
            json.dump({"path": path, "env": _import_env(dict(os.environ))}, handle, indent=1)
    except OSError:
        pass


def _address(directory: str, key: str) -> str:
    """An abstract-namespace socket name (Linux): pytest's deep temporary paths exceed AF_UNIX's 108 bytes."""
    return "\0verl-zygote-" + hashlib.sha256(directory.encode()).hexdigest()[:12] + "-" + key


def _connect(directory: str, key: str, path: list[str]) -> socket.socket | None:
    address = _address(directory, key)
    failed = os.path.join(directory, key + ".failed")
    if os.path.exists(failed):
        return None
    sock = _try_connect(address)
    if sock is not None:
        return sock
    import fcntl
    with open(os.path.join(directory, key + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sock = _try_connect(address)
        if sock is not None or os.path.exists(failed):
            return sock
        server = _start_server(directory, key, path)
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while time.monotonic() < deadline and server.poll() is None:
            sock = _try_connect(address)
            if sock is not None:
                return sock
            if os.path.exists(failed):
                return None
            time.sleep(0.05)
        sock = _try_connect(address)
        if sock is None:
            with open(failed, "a") as note:
                note.write("the server ended or did not listen in time (its .log says why)\n")
        return sock


def _try_connect(address: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)
        return sock
    except OSError:
        sock.close()
        return None


def _start_server(directory: str, key: str, path: list[str]):
    import subprocess
    env = {k: v for k, v in os.environ.items() if not k.startswith("VERL_DEPLOY_ZYGOTE")}
    with open(os.path.join(directory, key + ".log"), "ab") as log:
        return subprocess.Popen([sys.executable, os.environ[CLIENT_VAR], "serve", directory, key,
                                 json.dumps(path), os.environ.get(OWNER_VAR, "0")],
                                env=env, cwd=directory, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, close_fds=True)


def client() -> None:
    """At start-up of `python -c CODE`/`python -`: run on a warm server if one serves this interpreter."""
    if os.environ.get("VERL_DEPLOY_TESTS_COLD_VERL") == "1":
        return
    command = _command()
    directory = os.environ.get(DIR_VAR, "")
    if command is None or not os.path.isdir(directory):
        return
    path = list(sys.path)
    key = key_of(sys.executable, path, dict(os.environ))
    _note_seen(directory, key, path)
    sock = _connect(directory, key, path)
    if sock is None:
        return
    request = {"mode": command[0], "code": command[1], "argv": list(sys.argv), "cwd": os.getcwd(),
               "env": dict(os.environ)}  # sys.path is the server's already: it is part of the key
    try:
        _send_fds(sock, json.dumps(request).encode(), [0, 1, 2])
        pid = int(_recv_line(sock))
    except (OSError, ValueError):
        sock.close()
        return  # the server went away before taking it: run cold
    try:
        _follow(sock, pid)
    finally:
        os._exit(1)  # handed over: whatever fails here, the code must not run a second time, cold


def _follow(sock: socket.socket, pid: int) -> None:
    """Forward signals to the run, then end as it ended."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda number, frame: os.kill(pid, number))
    try:
        status = int(_recv_line(sock))
    except (OSError, ValueError):
        status = 1
    if status < 0:  # the code died of a signal: so does this process, as the cold one would have
        if -status not in (signal.SIGKILL, signal.SIGSTOP):  # the two whose handler cannot be set (nor was)
            signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status & 0xFF)


def stop_servers(directory: str) -> None:
    """End every server of a session (pytest's end; each would also end when its pytest is gone)."""
    for name in os.listdir(directory) if os.path.isdir(directory) else []:
        if name.endswith(".pid"):
            try:
                os.kill(int(open(os.path.join(directory, name)).read()), signal.SIGTERM)
            except (OSError, ValueError):
                pass


# -- the server: one per key, forks a child per run --------------------------------------------------------------

def serve(directory: str, key: str, path: list[str], owner: int) -> None:
    import importlib
    import threading

    sys.path[:] = [""] + path
    for name in WARM_MODULES:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # a release without the module: its runs import what they can themselves
            print(f"warm import of {name} failed: {type(exc).__name__}: {exc}", flush=True)
    if threading.active_count() > 1:
        open(os.path.join(directory, key + ".failed"), "w").write("threads after import; fork is unsafe\n")
        return
    sys.stdout.flush()
    sys.stderr.flush()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(_address(directory, key))
    listener.listen(64)
    with open(os.path.join(directory, key + ".pid"), "w") as handle:  # also: this key has a server
        handle.write(str(os.getpid()))
    listener.settimeout(5.0)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children report their own status; the kernel reaps them
    last = time.monotonic()
    while True:
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            if (owner and not _alive(owner)) or time.monotonic() - last > IDLE_EXIT:
                return
            continue
        last = time.monotonic()
        try:
            request, fds = _receive(conn)
        except (OSError, ValueError, ConnectionError):
            conn.close()
            continue
        child = os.fork()
        if child == 0:
            listener.close()
            _run_child(conn, request, fds)
        for fd in fds:
            os.close(fd)
        conn.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    fds = array.array("i")
    message, ancillary, _, _ = conn.recvmsg(8, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    if len(message) != 8 or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        raise ValueError("bad request")
    return json.loads(_recv_exact(conn, int.from_bytes(message, "big"))), list(fds)


def _run_child(conn: socket.socket, request: dict, fds: list[int]) -> None:
    """In the forked child: fork once more, the grandchild becomes the client's process and runs its code; this
    one waits for it and reports its exit status (also when the code ends with os._exit)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    runner = os.fork()
    if runner == 0:
        conn.close()
        _become_client(request)
    status = 1
    try:
        conn.sendall(f"{runner}\n".encode())
        _, raw = os.waitpid(runner, 0)
        status = os.waitstatus_to_exitcode(raw)  # -N: ended by signal N
        conn.sendall(f"{status}\n".encode())
    except OSError:
        pass
    os._exit(0)


def _become_client(request: dict) -> None:
    import atexit
    import importlib
    import traceback
    import types

    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    # sys.path stays the server's: the key made it the client's, plus what importing added (ray puts its
    # thirdparty_files first), as a cold run would have it after the same imports
    sys.argv[:] = request["argv"]
    importlib.invalidate_caches()
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    status = 0
    try:
        if request["mode"] == "-":
            source, name = sys.stdin.read(), "<stdin>"
        else:
            source, name = request["code"], "<string>"
        exec(compile(source, name, "exec"), main.__dict__)
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except BaseException:
        traceback.print_exc()
        status = 1
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(status)


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] == "serve":
    serve(sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), int(sys.argv[5]))
