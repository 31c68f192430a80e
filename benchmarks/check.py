"""Wall time of `verl-deploy check` on a healthy host (target < 3 s), and how long each probe took.

The host is the tests' fake Ascend host: npu-smi / docker / ray answer with real captured output
(tests/fakes), a model directory and DAPO parquet files sit under a search root. The machine's
own network, disk and Python are real.

Run (after the README's test install, `pip install '.[test]'`): python benchmarks/check.py [runs]
"""

from __future__ import annotations

import json
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

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 7
TARGET = 3.0


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="verl-deploy-check-bench-"))
    root = tmp / "mnt"
    make_model(root / "models" / "Qwen3-8B", TINY_MODEL)
    (root / "data").mkdir(parents=True)
    write_train_rows(TESTS / "fixtures" / "dapo-math-17k.SYNTHETIC.parquet", root / "data" / "dapo-math-17k.parquet",
                     TRAIN_ROWS)  # more rows than one generation batch, as verl's loader needs
    shutil.copy(TESTS / "fixtures" / "aime-2024.SYNTHETIC.parquet", root / "data" / "aime-2024.parquet")
    for deep in range(300):  # some unrelated directories to walk past
        (root / "other" / f"d{deep % 30}" / f"e{deep}").mkdir(parents=True, exist_ok=True)
    env = {"PATH": f"{TESTS / 'fakes'}:{Path(sys.executable).parent}:/usr/bin:/bin",
           "FAKE_NPU_SMI": str(TESTS / "fixtures" / "hw" / "npu-smi-910b3-8npu-idle.txt"),
           "VERL_DEPLOY_STATE_DIR": str(tmp / "state"), "HOME": str(tmp)}
    command = [sys.executable, "-m", "verl_deploy", "check", "--search-root", str(root), "--json"]
    subprocess.run(command, env=env, capture_output=True)  # warm-up
    walls, probes = [], {}
    for _ in range(RUNS):
        started = time.perf_counter()
        report = json.loads(subprocess.run(command, env=env, capture_output=True, text=True).stdout)
        walls.append(time.perf_counter() - started)
        for area, data in report["areas"].items():
            probes.setdefault(area, []).append(data["seconds"])
    median = statistics.median(walls)
    print(f"verl-deploy check (whole process): median {median:.2f} s  min {min(walls):.2f}  max {max(walls):.2f}  "
          f"({RUNS} runs)  target < {TARGET} s  {'ok' if median < TARGET else 'OVER TARGET'}")
    for area, seconds in probes.items():
        print(f"  {area:13s} median {statistics.median(seconds):.3f} s")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
