"""Median wall time of `verl-deploy --help` and of `generate` on the built-in example.

Targets on the 2-core dev machine: --help <= 0.3 s, generate <= 0.6 s (after the first
run has cached verl's config index). Run (after the README's test install, `pip install '.[test]'`): python benchmarks/cli_latency.py [runs]
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 15
TARGETS = {"--help": 0.3, "generate": 0.6}


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> None:
    exe = shutil.which("verl-deploy") or sys.exit("verl-deploy is not on PATH: pip install . first")
    out = tempfile.mkdtemp(prefix="verl-deploy-bench-")
    commands = {
        "--help": [exe, "--help"],
        "generate": [exe, "generate", "--output-dir", out, "--force"],
    }
    for cmd in commands.values():
        timed(cmd)  # warm-up: fills the verl config cache and the OS page cache
    for name, cmd in commands.items():
        times = sorted(timed(cmd) for _ in range(RUNS))
        median = statistics.median(times)
        verdict = "ok" if median <= TARGETS[name] else "OVER TARGET"
        print(f"{name:10s} median {median:.3f} s  min {times[0]:.3f}  max {times[-1]:.3f}  "
              f"(target {TARGETS[name]} s, {RUNS} runs) {verdict}")
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
