"""Ray's token authentication as verl-deploy reads it: the same token Ray 2.60's own loader finds (checked
against the installed ray's C++ AuthenticationTokenLoader), and `plan` saying which mode the scripts' Ray
uses and why, without the token. Every environment here is built from nothing: no machine state leaks in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import VERL_BIN, run_scripts
from test_ray import write_token

RAY_LOADER = """
import json, sys
from ray._raylet import AuthenticationTokenLoader
loader = AuthenticationTokenLoader.instance()
try:
    found = loader.has_token(ignore_auth_mode=True)
    print(json.dumps(loader.get_raw_token(ignore_auth_mode=True) if found else None))
except Exception as exc:
    print(json.dumps({"error": str(exc)}))
"""


def base_env(home: Path) -> dict:
    return {"HOME": str(home), "PATH": os.environ["PATH"], "RAY_USAGE_STATS_ENABLED": "0"}


def rays_token(env: dict):
    done = subprocess.run([sys.executable, "-c", RAY_LOADER], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def cases(tmp_path: Path) -> dict[str, dict]:
    home = tmp_path / "home"
    write_token(home / ".ray" / "auth_token", "  from-default-file  ")
    named = write_token(tmp_path / "named", "from-named-file\nsecond line")
    return {
        "the default file": base_env(home),
        "RAY_AUTH_TOKEN_PATH over the default file": {**base_env(home), "RAY_AUTH_TOKEN_PATH": str(named)},
        "RAY_AUTH_TOKEN over both": {**base_env(home), "RAY_AUTH_TOKEN_PATH": str(named), "RAY_AUTH_TOKEN": " from-env "},
        "nothing": base_env(tmp_path / "empty-home"),
    }


@pytest.mark.parametrize("name", ["the default file", "RAY_AUTH_TOKEN_PATH over the default file",
                                  "RAY_AUTH_TOKEN over both", "nothing"])
def test_the_token_is_the_one_rays_own_loader_finds(tmp_path, name):
    pytest.importorskip("ray")
    from verl_deploy.rayauth import find_token

    env = cases(tmp_path)[name]
    ours = find_token(env)
    assert (ours.value if ours else None) == rays_token(env)


def test_a_token_path_that_gives_nothing_is_an_error_as_in_ray_not_a_fall_back(tmp_path):
    from verl_deploy.rayauth import AuthError, find_token

    env = {**cases(tmp_path)["the default file"], "RAY_AUTH_TOKEN_PATH": str(tmp_path / "missing")}
    with pytest.raises(AuthError) as raised:
        find_token(env)
    assert "RAY_AUTH_TOKEN_PATH is set but" in raised.value.problem and "default" not in str(raised.value)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(AuthError):
        find_token({**env, "RAY_AUTH_TOKEN_PATH": str(empty)})


def plan(env: dict, *args: str):
    return subprocess.run([*VERL_BIN, "plan", *args], capture_output=True, text=True, timeout=120,
                          env={**env, "COLUMNS": "200", "VERL_DEPLOY_CACHE_DIR": os.environ["VERL_DEPLOY_CACHE_DIR"],
                               "VERL_DEPLOY_STATE_DIR": os.environ["VERL_DEPLOY_STATE_DIR"],
                               "VERL_DEPLOY_CONFIG_DIR": os.environ["VERL_DEPLOY_CONFIG_DIR"]})


def test_plan_says_which_mode_the_scripts_ray_uses_and_why_never_the_token(tmp_path):
    with_token = base_env(tmp_path / "home")
    write_token(tmp_path / "home" / ".ray" / "auth_token", "plan-secret-token-9f9f")
    shown = {
        "detected token": (with_token, (), "token", "detected (a Ray token in ~/.ray/auth_token"),
        "detected none": (base_env(tmp_path / "nohome"), (), "disabled", "detected (no Ray token here"),
        "env": ({**with_token, "RAY_AUTH_MODE": "Disabled"}, (), "disabled", "env RAY_AUTH_MODE"),
        "flag": (base_env(tmp_path / "nohome"), ("--ray-auth", "disabled"), "disabled", "flag --ray-auth"),
    }
    for name, (env, args, mode, source) in shown.items():
        document = plan(env, "--json", *args)
        data = json.loads(document.stdout)
        assert data["spec"]["ray_auth"] == mode and data["sources"]["ray_auth"].startswith(source), name
        table = plan(env, *args)
        row = next(line for line in table.stdout.splitlines() if line.startswith("ray_auth"))
        assert mode in row and source in row, name
        assert "plan-secret-token-9f9f" not in document.stdout + document.stderr + table.stdout + table.stderr


def test_token_auth_asked_for_without_a_token_is_one_line_before_anything_starts(tmp_path):
    result = plan({**base_env(tmp_path / "nohome"), "RAY_AUTH_MODE": "token"})
    errors = [line for line in result.stdout.splitlines() + result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 1 and len(errors) == 1
    assert errors[0].startswith("error: ray_auth: token authentication (env RAY_AUTH_MODE) but no Ray token")
    assert "RAY_AUTH_TOKEN_PATH" in errors[0] and "ray get-auth-token --generate" in errors[0]


def test_the_scripts_refuse_a_node_without_the_token_in_one_line(tmp_path, stubs):
    home = tmp_path / "home"
    write_token(home / ".ray" / "auth_token", "script-secret-token-1234")
    out = tmp_path / "out"
    made = subprocess.run([*VERL_BIN, "generate", "--output-dir", str(out), "--run-dir", str(stubs["verl_root"])],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **base_env(home),
                                                                             "RAY_AUTH_MODE": "token"})
    assert made.returncode == 0, made.stderr
    script = (out / "start_verl.sh").read_text()
    assert "export RAY_AUTH_MODE=token" in script and "script-secret-token-1234" not in script
    assert not (out / "ray_auth_token").exists()  # one node, this host: Ray finds the user's own token
    result = run_scripts(out, stubs)  # HOME is the output folder: no token there
    assert result.returncode == 3
    assert result.stderr.strip().splitlines() == [
        "[start_verl] error: Ray token authentication is on (ray_auth: token) but this node has no Ray token: set "
        "RAY_AUTH_TOKEN to the cluster's token, or RAY_AUTH_TOKEN_PATH to a file holding it, or put it in "
        "~/.ray/auth_token (ray get-auth-token on the head prints it); or generate the scripts with --ray-auth disabled",
        "[start_verl] failed at: checking this node's Ray token (exit status 3)"]  # the step, as every early exit says
    assert not (stubs["log"] / "ray.calls").exists()  # no Ray was started
    started = run_scripts(out, stubs, {"RAY_AUTH_TOKEN_PATH": str(home / ".ray" / "auth_token")})
    assert started.returncode == 0, started.stderr


@pytest.mark.parametrize("where", ["slurm", "container", "one node"])
def test_the_token_goes_with_scripts_that_run_elsewhere_in_a_0600_file_only(tmp_path, stubs, where):
    home = tmp_path / "home"
    write_token(home / ".ray" / "auth_token", "handed-secret-token-5678")
    out = tmp_path / "out"
    args = {"slurm": ["--scheduler", "slurm", "--nnodes", "2"], "container": ["--container", "verl-npu"],
            "one node": []}[where]
    env = {**os.environ, **base_env(home), "RAY_AUTH_MODE": "token"}
    made = subprocess.run([*VERL_BIN, "generate", "--output-dir", str(out), "--run-dir", str(stubs["verl_root"]), *args],
                          capture_output=True, text=True, timeout=120, env=env)
    assert made.returncode == 0, made.stderr
    handed = out / "ray_auth_token"
    holding = sorted(p.name for p in out.iterdir() if p.is_file() and "handed-secret-token-5678" in p.read_text())
    if where == "one node":  # this host: Ray finds the user's own token, nothing is copied
        assert holding == [] and not handed.exists()
    else:
        assert holding == ["ray_auth_token"] and handed.stat().st_mode & 0o777 == 0o600
    assert "handed-secret-token-5678" not in made.stdout + made.stderr
    missing = subprocess.run([*VERL_BIN, "generate", "--output-dir", str(tmp_path / "none"), "--run-dir",
                              str(stubs["verl_root"]), *args], capture_output=True, text=True, timeout=120,
                             env={**env, "HOME": str(tmp_path / "nohome")})
    assert missing.returncode == 1 and "no Ray token was found here" in missing.stderr
    assert not (tmp_path / "none").exists()  # nothing half-written


def test_a_proxy_that_wants_a_token_but_does_not_say_so_gets_it_with_ray_auth_mode_token(tmp_path):
    """Something in front of the dashboard (no /api/authentication_mode) that answers 401 without the header."""
    import http.server
    import threading

    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the http.server API)
            seen.append(self.headers.get("Authorization") or "")
            ok = self.path != "/api/authentication_mode" and self.headers.get("Authorization") == "Bearer proxied-tok"
            self.send_response(200 if ok else 404 if self.path == "/api/authentication_mode" else 401)
            self.end_headers()
            self.wfile.write(b'{"ray_version": "2.60.0"}' if ok else b"Unauthorized")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"http://127.0.0.1:{server.server_address[1]}"
    from verl_deploy.rayauth import AuthError, get_json

    env = {"HOME": str(tmp_path), "RAY_AUTH_TOKEN": "proxied-tok"}
    try:
        with pytest.raises(AuthError) as raised:
            get_json(address, "/api/version", environ=env)
        assert "did not say so, and the one in RAY_AUTH_TOKEN was not sent" in raised.value.problem
        assert raised.value.fix == "set RAY_AUTH_MODE=token to send it" and "proxied-tok" not in str(raised.value)
        assert get_json(address, "/api/version", environ={**env, "RAY_AUTH_MODE": "token"}) == {"ray_version": "2.60.0"}
        assert seen[-1] == "Bearer proxied-tok" and "" in seen[:2]  # not sent until asked to
    finally:
        server.shutdown()
