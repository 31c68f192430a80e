"""A private SwanLab host, with the REAL swanlab package: the generated start_verl.sh exports what
swanlab's own settings read, and verl's tracker login (``swanlab.login(key)``) reaches a stand-in
SwanLab server on 127.0.0.1 — not the public cloud.

The training entry is a stand-in that does exactly what verl's tracker does for SwanLab
(verl/utils/tracking.py at v0.7.0..v0.9.0): read SWANLAB_API_KEY, SWANLAB_LOG_DIR and SWANLAB_MODE
from the environment, call ``swanlab.login(key)``. It also prints where swanlab's own settings say
the API and web hosts are. `ray` is a stub (no cluster needed); python3 is the real interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import FAKES, python_shim, run_cli, skip_module_without

skip_module_without("swanlab", reason="the swanlab package is not installed (pip install '.[test]')")

TRACKER_STANDIN = r'''
"""Stands in for verl's recipe entry: verl's tracker SwanLab lines, then what swanlab resolved."""
import json, os, sys
import swanlab

SWANLAB_API_KEY = os.environ.get("SWANLAB_API_KEY", None)
SWANLAB_LOG_DIR = os.environ.get("SWANLAB_LOG_DIR", "swanlog")
SWANLAB_MODE = os.environ.get("SWANLAB_MODE", "cloud")
resolved = {}
try:  # swanlab >= 0.8: pydantic settings
    from swanlab.sdk.internal.settings import Settings
    settings = Settings()
    resolved = {"api_host": settings.api_host, "web_host": settings.web_host, "mode": settings.mode,
                "workspace": settings.project.workspace, "log_dir": str(settings.log_dir)}
except ImportError:  # swanlab 0.5-0.7: module functions over the environment
    from swanlab.package import get_host_api, get_host_web
    resolved = {"api_host": get_host_api(), "web_host": get_host_web()}
print("RESOLVED " + json.dumps(resolved), flush=True)
ok = False
if SWANLAB_API_KEY:
    try:
        ok = bool(swanlab.login(SWANLAB_API_KEY))  # NOTE: exactly verl's call
    except Exception as exc:  # the stand-in server answers minimally; the request is what matters
        print("LOGIN-ERROR " + repr(exc)[:300], flush=True)
print("LOGIN " + json.dumps({"ok": ok, "mode": SWANLAB_MODE, "log_dir": SWANLAB_LOG_DIR}), flush=True)
'''


class StandInSwanLab(BaseHTTPRequestHandler):
    """Answers SwanLab's API-key login the way the real server does; records every request."""

    seen: list[dict] = []

    def _record(self, body: bytes) -> None:
        StandInSwanLab.seen.append({"method": self.command, "path": self.path,
                                    "authorization": self.headers.get("authorization"), "body": body.decode(errors="replace")})

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self._record(body)
        if self.path.rstrip("/") == "/api/login/api_key":
            payload = {"sid": "standin-session", "expiredAt": "2099-01-01T00:00:00.000Z",
                       "userInfo": {"name": "Stand In", "username": "standin"}}
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("set-cookie", "sid=standin-session; Path=/")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        self._record(b"")
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture()
def standin_server():
    StandInSwanLab.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandInSwanLab)  # a free private port
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _verl_root(tmp_path: Path) -> Path:
    root = tmp_path / "verl-root"
    entry = root / "recipe" / "dapo" / "main_dapo.py"
    entry.parent.mkdir(parents=True)
    (root / "recipe" / "__init__.py").write_text("")
    (root / "recipe" / "dapo" / "__init__.py").write_text("")
    entry.write_text(TRACKER_STANDIN)
    return root


def _bin_with_real_python(tmp_path: Path) -> Path:
    """A PATH dir: the real python3 (with swanlab), the fake `ray` (no cluster needed)."""
    bin_dir = tmp_path / "bin"
    python_shim(bin_dir)  # not a symlink: that would run the base interpreter, without this venv's swanlab
    (bin_dir / "ray").symlink_to(FAKES / "ray")
    return bin_dir


def _lines(output: str, tag: str) -> dict:
    line = next((line for line in output.splitlines() if line.startswith(tag + " ")), None)
    assert line is not None, f"no {tag} line in:\n{output[-3000:]}"
    return json.loads(line[len(tag) + 1:])


# Other swanlab versions, each installed with `pip install --target DIR swanlab==X` (os.pathsep-separated
# dirs): the same test runs the stand-in trainer on each. Checked so with 0.5.9, 0.6.13, 0.7.20, 0.8.5, 0.9.8.
OTHER_VERSIONS = [d for d in os.environ.get("VERL_DEPLOY_SWANLAB_TARGETS", "").split(os.pathsep) if d]


@pytest.mark.parametrize("target", [None, *OTHER_VERSIONS], ids=lambda t: "installed" if t is None else Path(t).name)
def test_private_host_login_reaches_the_private_server_with_the_real_package(tmp_path, standin_server, target):
    key = "PrivHost0123456789Key"  # alphanumeric: swanlab <= 0.7 refuses other characters
    out = tmp_path / "scripts"
    # the user gives one host, with a trailing slash as people type it
    made = run_cli("generate", "--output-dir", str(out), "--run-dir", str(_verl_root(tmp_path)),
                   "--swanlab-host", standin_server + "/", "--swanlab-log-dir", str(tmp_path / "swanlog"),
                   env={"SWANLAB_API_KEY": key})
    assert made.returncode == 0, made.stderr
    start = (out / "start_verl.sh").read_text()
    assert f"export SWANLAB_API_HOST={standin_server}/api" in start
    assert f"export SWANLAB_WEB_HOST={standin_server}" in start
    assert "SWANLAB_PROJECT" not in start and "SWANLAB_HOST=" not in start.replace("API_HOST", "").replace("WEB_HOST", "")
    assert key not in start

    home = tmp_path / "home"  # no ~/.swanlab login of this machine's user
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWANLAB_")}
    env.update(PATH=f"{_bin_with_real_python(tmp_path)}:{env['PATH']}", HOME=str(home),
               SWANLAB_SAVE_DIR=str(home / ".swanlab"), SWANLAB_CONFIG_DIR=str(home / ".swanlab"),
               NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    if target:
        env["PYTHONPATH"] = target
    ran = subprocess.run(["bash", str(out / "start_verl.sh")], capture_output=True, text=True, env=env, timeout=120)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output[-3000:]

    resolved = _lines(output, "RESOLVED")
    assert resolved["api_host"].rstrip("/").removesuffix("/api") == standin_server  # swanlab's own settings
    assert resolved["web_host"].rstrip("/") == standin_server
    if "workspace" in resolved:
        assert resolved["workspace"] == "TrainingMaster"
        assert resolved["log_dir"] == str(tmp_path / "swanlog")

    logins = [r for r in StandInSwanLab.seen if r["path"].rstrip("/") == "/api/login/api_key"]
    assert logins, f"the login never reached the private server; seen: {StandInSwanLab.seen}; output:\n{output[-2000:]}"
    assert logins[0]["method"] == "POST" and logins[0]["authorization"] == key
    assert _lines(output, "LOGIN")["ok"] is True or target  # swanlab <= 0.7's login() returns None
    assert "swanlab.cn" not in json.dumps(resolved)


def test_without_a_host_swanlab_keeps_its_own_cloud_defaults(tmp_path):
    out = tmp_path / "cloud"
    made = run_cli("generate", "--output-dir", str(out), "--swanlab", "yes", "--swanlab-host", "https://swanlab.cn")
    assert made.returncode == 0, made.stderr
    start = (out / "start_verl.sh").read_text()
    assert "SWANLAB_API_HOST" not in start and "SWANLAB_WEB_HOST" not in start
    assert "export SWANLAB_MODE=cloud" in start


def test_the_exported_names_parse_in_swanlabs_own_settings(tmp_path):
    """Every name start_verl.sh exports must be one the installed swanlab parses (SWANLAB_PROJECT breaks 0.10)."""
    out = tmp_path / "names"
    made = run_cli("generate", "--output-dir", str(out), "--swanlab-host", "http://192.168.1.100:8000")
    assert made.returncode == 0, made.stderr
    exported = dict(line.removeprefix("export ").split("=", 1) for line in (out / "start_verl.sh").read_text().splitlines()
                    if line.startswith("export SWANLAB_"))
    assert exported["SWANLAB_API_HOST"] == "http://192.168.1.100:8000/api"
    code = ("import json\ntry:\n    from swanlab.sdk.internal.settings import Settings\n    s = Settings()\n"
            "    print(json.dumps([s.api_host, s.web_host]))\nexcept ImportError:\n"
            "    from swanlab.package import get_host_api, get_host_web\n"
            "    print(json.dumps([get_host_api(), get_host_web()]))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWANLAB_")}
    env.update(exported, HOME=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    api, web = json.loads(result.stdout)
    assert api.removesuffix("/api") == "http://192.168.1.100:8000" and web == "http://192.168.1.100:8000"


def _recording_python(bin_dir: Path, log: Path, *, without_site: bool = False) -> None:
    """python3 on PATH: records its argv (one line per call), then runs this venv's interpreter.
    `without_site`: as a python3 where swanlab (and pip) are not installed (-S: no site-packages)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "python3"
    flags = "-S " if without_site else ""
    shim.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec "{sys.executable}" {flags}"$@"\n')
    shim.chmod(0o755)


def _login_env(tmp_path: Path, bin_dir: Path) -> tuple[dict, Path]:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWANLAB_")}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", HOME=str(home), SWANLAB_SAVE_DIR=str(home / ".swanlab"),
               NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
               VERL_DEPLOY_CONFIG_DIR=str(tmp_path / "config"))
    return env, home


def test_swanlab_login_logs_in_with_the_real_package_without_a_terminal_key_on_stdin(tmp_path, standin_server):
    """`verl-deploy swanlab login` with no tty (swanlab 0.10.3's `swanlab login` would refuse to prompt):
    the real package's login reaches the private server with the key, saves its login file, and the key
    is in no command line."""
    key = "PrivHost0123456789Key"
    calls = tmp_path / "python3.calls"
    _recording_python(tmp_path / "bin", calls)
    env, home = _login_env(tmp_path, tmp_path / "bin")
    env["SWANLAB_API_KEY"] = key
    result = subprocess.run([sys.executable, "-m", "verl_deploy", "swanlab", "login", "--swanlab-host", standin_server],
                            capture_output=True, text=True, env=env, timeout=240, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stdout + result.stderr
    logins = [r for r in StandInSwanLab.seen if r["path"].rstrip("/") == "/api/login/api_key"]
    assert logins and logins[0]["authorization"] == key, StandInSwanLab.seen
    assert "logged in to " + standin_server in result.stdout and "login verified" in result.stdout
    saved = [p for p in (home / ".swanlab").rglob("*") if p.is_file()]
    assert saved and any(key in p.read_text(errors="replace") for p in saved)  # swanlab's own netrc
    assert key not in calls.read_text() and key not in result.stdout + result.stderr


def test_a_missing_swanlab_is_installed_only_with_consent_and_pinned(tmp_path):
    calls = tmp_path / "python3.calls"
    _recording_python(tmp_path / "bin", calls, without_site=True)
    env, _ = _login_env(tmp_path, tmp_path / "bin")
    env["SWANLAB_API_KEY"] = "PrivHost0123456789Key"
    argv = [sys.executable, "-m", "verl_deploy", "swanlab", "login"]
    refused = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240, stdin=subprocess.DEVNULL)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "swanlab is not installed" in errors[0] and "--install-missing" in errors[0], refused.stderr
    assert "pip" not in calls.read_text()  # nothing installed without consent
    asked = subprocess.run([*argv, "--install-missing"], capture_output=True, text=True, env=env, timeout=240,
                           stdin=subprocess.DEVNULL)
    # this python3 has no pip either (no site-packages): the attempt itself is what is checked, pinned
    assert "-m pip install swanlab==0.10.3" in calls.read_text()
    assert asked.returncode == 1 and "pip install swanlab==0.10.3 failed" in asked.stderr, asked.stderr
