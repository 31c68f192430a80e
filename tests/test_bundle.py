"""`verl-deploy bundle`: a failed run of the stand-in trainer whose 60 MB log holds the SwanLab key and other
secrets becomes one small archive with the record, scripts, failure, error lines, check and versions, and
no secret in any member."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import time
from pathlib import Path

from conftest import VERL_BIN, child_env, run_cli
from test_launch import trainer, wait_for  # noqa: F401 - the stand-in trainer's fixture

KEY = "sk-bundle-7f3a9c2e5b1d"
URL_PASSWORD = "pa55w0rd-Secret"
CORP = "corp-0123456789abcdef"  # matches the user's configured pattern
INFO = (b"(WorkerDict pid=812) INFO 11-29 10:01:12 [gpu_model_runner.py:1843] Model loading took 15.2 GiB "
        b"and 3.1 seconds; KV cache usage 41.7%, prefix cache hit rate 12.5%\n")


def noisy_log(path: Path, megabytes: int) -> None:
    """verl-like filler with a non-fatal error every ~200 lines and the secrets printed in a few places."""
    secrets = [f"(TaskRunner pid=77) SWANLAB_API_KEY={KEY}\n".encode(),
               f"swanlab: logging in with {KEY}\n".encode(),
               f"pip: Looking in indexes: https://bob:{URL_PASSWORD}@mirror.example/simple?token={URL_PASSWORD}\n".encode(),
               f"(WorkerDict pid=812) Exception ignored in credential helper for {CORP}\n".encode()]
    block = INFO * 200
    with open(path, "wb") as handle:
        written, n = 0, 0
        while written < megabytes << 20:
            handle.write(block)
            handle.write(b"(WorkerDict pid=812) UserWarning: RuntimeError in a profiler hook, ignored\n")
            handle.write(secrets[n % len(secrets)])
            written += len(block) + 120
            n += 1


def test_a_failed_run_with_the_key_in_its_60mb_log_gives_a_small_redacted_bundle(trainer, tmp_path):
    lines = tmp_path / "noise.log"
    noisy_log(lines, 60)
    env = {**os.environ, **trainer["env"], "COLUMNS": "200", "STANDIN_FAIL": "host_oom", "STANDIN_FAIL_STEP": "2",
           "STANDIN_LINES_FILE": str(lines), "VERL_DEPLOY_SECRET_PATTERNS": "corp-[0-9a-f]{16}\n"}
    result = subprocess.run([*VERL_BIN, "launch", *trainer["args"], "--swanlab", "yes", "--swanlab-mode", "local",
                             "--swanlab-api-key", "-", "--json"], input=KEY + "\n", capture_output=True, text=True,
                            env=child_env(env), timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    run = json.loads(result.stdout)
    final = wait_for(trainer, run["id"], lambda d: d["state"] in ("succeeded", "failed"), timeout=240)
    assert final["state"] == "failed" and final["failure"]["class"] == "host_oom"
    log = Path(final["log"])
    assert log.stat().st_size > 60 << 20 and KEY.encode() in log.read_bytes()

    out = tmp_path / "issue.tar.gz"
    started = time.monotonic()
    made = run_cli("bundle", run["id"], "--output", str(out), "--json",
                   env={**trainer["env"], "VERL_DEPLOY_SECRET_PATTERNS": "corp-[0-9a-f]{16}\n"})
    seconds = time.monotonic() - started
    assert made.returncode == 0, made.stderr[-2000:]
    summary = json.loads(made.stdout)
    print(f"bundle of a {log.stat().st_size / 2**20:.0f} MB log: {out.stat().st_size / 1024:.0f} KiB in {seconds:.1f} s")
    assert out.stat().st_size < 3 << 20 and summary["bytes"] == out.stat().st_size
    assert out.stat().st_mode & 0o777 == 0o600  # for its owner only, though redacted
    assert summary["redactions"] > 0

    with tarfile.open(out) as archive:
        members = {m.name.split("/", 1)[1]: archive.extractfile(m).read() for m in archive.getmembers()}
    everything = b"\n".join(members.values())
    for secret in (KEY, URL_PASSWORD, CORP):
        assert secret.encode() not in everything, secret
    assert not any(name.endswith(("swanlab.env", "ray_auth_token")) for name in members)
    assert b"[REDACTED]" in members["attempt-1/log-errors.txt"]
    # what a maintainer asks for is there
    for name in ("README.md", "run.json", "failure.json", "check.json", "versions.json", "attempt-1/scripts/start_verl.sh",
                 "attempt-1/scripts/run_training.sh", "attempt-1/scripts/plan.json", "attempt-1/handle.json",
                 "attempt-1/diagnosis.json", "attempt-1/log-head.txt", "attempt-1/log-tail.txt"):
        assert name in members, name
    failure = json.loads(members["failure.json"])
    assert failure["run"]["class"] == "host_oom" and failure["attempts"][0]["verdict"]["class"] == "host_oom"
    errors = members["attempt-1/log-errors.txt"].decode()
    assert "Task was killed due to the node running low on memory" in errors  # the failure, with context
    assert "RuntimeError in a profiler hook" in errors and "left out" in errors  # bounded: first and last windows
    assert len(errors) < 2_000_000 and errors.rstrip().endswith("run_training.sh exited with status 1")
    versions = json.loads(members["versions.json"])
    assert versions["verl-deploy"] and versions["verl"] and versions["driver"] and versions["cann"] == "8.3.RC1"
    readme = members["README.md"].decode()
    assert f"run {run['id']}: failed" in readme and "host_oom" in readme and "| cann | 8.3.RC1 |" in readme
    check = json.loads(members["check.json"])
    assert "verdict" in check and check["accelerators"]["kind"] == "npu"


def test_bundle_refuses_a_bad_output_and_a_bad_pattern_in_one_line(trainer, tmp_path):
    result = subprocess.run([*VERL_BIN, "launch", *trainer["args"], "--json"], capture_output=True, text=True,
                            env=child_env({**os.environ, **trainer["env"]}), timeout=240)
    run = json.loads(result.stdout)
    wait_for(trainer, run["id"], lambda d: d["state"] in ("succeeded", "failed"), timeout=240)
    wrong = run_cli("bundle", run["id"], "--output", str(tmp_path / "x.zip"), env=trainer["env"])
    assert wrong.returncode == 1 and "--output" in wrong.stderr and "Traceback" not in wrong.stderr
    existing = tmp_path / "old.tar.gz"
    existing.write_text("keep")
    again = run_cli("bundle", run["id"], "--output", str(existing), env=trainer["env"])
    assert again.returncode == 1 and "--force" in again.stderr and existing.read_text() == "keep"
    bad = run_cli("bundle", run["id"], "--output", str(tmp_path / "b.tar.gz"), "--no-check",
                  env={**trainer["env"], "VERL_DEPLOY_SECRET_PATTERNS": "corp-[0-9"})
    assert bad.returncode == 1 and "VERL_DEPLOY_SECRET_PATTERNS line 1" in bad.stderr
    assert not (tmp_path / "b.tar.gz").exists() and not list(tmp_path.glob(".b.tar.gz.*"))
