"""Recovery figures: how fast a device OOM becomes a running retry, and the device time it saves.

1. Measured: the stand-in trainer (tests/standin_trainer.py) prints real NPU OOM lines and then
   keeps its process alive (as a Ray driver waiting on a dead worker does); the time from that line
   to the retry's process being spawned (target: median <= 1 s).
2. Simulated with realistic timings (model load 5 min, 3 min per step, OOM at step 50, save_freq
   10, 8 devices): device time lost per OOM episode with verl-deploy (resume from the last
   checkpoint) against the seeds' flow (restart from step 0), not counting the person's reaction;
   and with the memory estimate, where a predicted OOM costs nothing (launch starts with the
   features) and a missed one costs the ladder's episode, weighted by benchmarks/memory.py's share.

Run (after the README's test install, `pip install '.[test]'`): python benchmarks/recovery.py [runs]   (--simulate: only the simulation)
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
sys.path.insert(0, str(TESTS))

from fakehost import TINY_MODEL, TRAIN_ROWS, make_model, write_train_rows  # noqa: E402

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 5


def host(tmp: Path) -> tuple[dict, list[str]]:
    root = tmp / "mnt"
    make_model(root / "models" / "Qwen3-8B", TINY_MODEL)
    (root / "data").mkdir(parents=True)
    write_train_rows(TESTS / "fixtures" / "dapo-math-17k.SYNTHETIC.parquet", root / "data" / "dapo-math-17k.parquet",
                     TRAIN_ROWS)  # more rows than one generation batch, as verl's loader needs
    shutil.copy(TESTS / "fixtures" / "aime-2024.SYNTHETIC.parquet", root / "data" / "aime-2024.parquet")
    verl = tmp / "verl"
    (verl / "recipe" / "dapo").mkdir(parents=True)
    shutil.copy(TESTS / "standin_trainer.py", verl / "recipe" / "dapo" / "main_dapo.py")
    env = {**os.environ, "PATH": f"{TESTS / 'fakes'}:{Path(sys.executable).parent}:/usr/bin:/bin",
           "FAKE_NPU_SMI": str(TESTS / "fixtures" / "hw" / "npu-smi-910b3-8npu-idle.txt"),
           "VERL_DEPLOY_STATE_DIR": str(tmp / "state"), "VERL_DEPLOY_CONFIG_DIR": str(tmp / "config"),
           "HOME": str(tmp), "STANDIN_STEP_SECONDS": "0.05", "STANDIN_FAIL": "device_oom", "STANDIN_FAIL_STEP": "3",
           "STANDIN_EXIT_DELAY": "30", "STANDIN_MARK_FILE": str(tmp / "oom-at")}
    args = ["--yes", "--skip-check", "--run-dir", str(verl), "--ckpts-dir", str(tmp / "ckpts"), "--train-steps", "6",
            "--save-freq", "2", "--backend", "local", "--model-path", str(root / "models" / "Qwen3-8B"),
            "--train-file", str(root / "data" / "dapo-math-17k.parquet"), "--test-file", str(root / "data" / "aime-2024.parquet")]
    return env, args


def one_run() -> float:
    tmp = Path(tempfile.mkdtemp(prefix="verl-deploy-recovery-"))
    try:
        env, args = host(tmp)
        started = json.loads(subprocess.run([sys.executable, "-m", "verl_deploy", "launch", *args, "--json"],
                                            capture_output=True, text=True, env=env).stdout)
        record_path = Path(started["directory"]) / "run.json"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            record = json.loads(record_path.read_text())
            if len(record["attempts"]) >= 2:
                break
            time.sleep(0.1)
        oom_at = float((tmp / "oom-at").read_text().split()[0])
        spawned = record["attempts"][1]["handle"]["spawned"]
        subprocess.run([sys.executable, "-m", "verl_deploy", "stop", started["id"]], capture_output=True, env=env)
        return spawned - oom_at
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def simulate(load_min=5.0, step_min=3.0, oom_step=50, save_freq=10, devices=8, detect_s=1.0) -> None:
    last_ckpt = (oom_step - 1) // save_freq * save_freq
    ours = load_min + (oom_step - 1 - last_ckpt) * step_min + detect_s / 60
    seeds = load_min + (oom_step - 1) * step_min
    print(f"simulation (load {load_min:g} min, {step_min:g} min/step, OOM at step {oom_step}, save_freq {save_freq}, "
          f"{devices} devices):")
    print(f"  verl-deploy: resume from step {last_ckpt}: {ours:.1f} min lost = {ours * devices / 60:.1f} device-hours")
    print(f"  seeds' flow: restart from step 0:   {seeds:.1f} min lost = {seeds * devices / 60:.1f} device-hours "
          f"({seeds / ours:.1f}x more), plus however long until someone notices")
    # With the memory estimate: an OOM it predicts never happens (launch starts with the features), so
    # that episode costs 0 device time; one it misses costs what the ladder costs. `hit` is the share
    # of the shared cases benchmarks/memory.py predicts right, used as the chance the OOM is predicted.
    hit = estimate_hit_rate()
    expected = (1 - hit) * ours
    print(f"  with the estimate: a predicted OOM loses 0.0 min (the seeds' flow: {seeds:.0f} min); taking its "
          f"{hit:.0%} right on the shared cases as the chance an OOM is predicted (a rough proxy: the shared half "
          f"has 1 OOM case):")
    print(f"    expected "
          f"{expected:.1f} min = {expected * devices / 60:.2f} device-hours per episode "
          + (f"({seeds / expected:.0f}x less than the seeds' flow)" if expected > 0 else "(none lost)"))


def estimate_hit_rate() -> float:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import memory  # benchmarks/memory.py

    return memory.run()["share"]


def main() -> None:
    if "--simulate" in sys.argv:
        simulate()
        return
    delays = sorted(one_run() for _ in range(RUNS))
    median = statistics.median(delays)
    print(f"OOM line -> retry process spawned: median {median:.2f} s  min {delays[0]:.2f}  max {delays[-1]:.2f}  "
          f"({RUNS} runs)  target <= 1 s  {'ok' if median <= 1 else 'OVER TARGET'}")
    simulate()


if __name__ == "__main__":
    main()
