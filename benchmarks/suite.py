"""Wall time of the test suite, tier by tier, as the README's test command runs it (pytest-xdist, pyproject's addopts).

The tiers are the marks registered in pyproject.toml (docker, slurm, ray, realverl, browser) and `fast`, every test
with none of them; a test with two marks (the Slurm tests start Ray too) is counted in the first tier that has it.
Target: the whole suite <= 12 minutes on a 2-core machine. Run (after the README's test install):

    python benchmarks/suite.py                 # every tier, one after the other
    python benchmarks/suite.py fast docker     # only these
    python benchmarks/suite.py --serial        # the same with -n 0 (one process: the time before xdist)
    python benchmarks/suite.py --log=DIR ray   # also keep each tier's pytest output, every test's duration, in DIR/TIER.log
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIERS = ["docker", "slurm", "ray", "realverl", "browser"]
TARGET_SECONDS = 12 * 60


def expression(tier: str) -> str:
    """The -m expression that picks the tier's tests and none of an earlier tier's."""
    earlier = TIERS[:TIERS.index(tier)] if tier in TIERS else TIERS
    exclude = " or ".join(earlier)
    if tier == "fast":
        return f"not ({exclude})"
    return f"{tier} and not ({exclude})" if exclude else tier


def children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far, theirs included."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(tier: str, serial: bool, log: Path | None = None) -> tuple[float, float, str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", expression(tier), "-p", "no:cacheprovider"]
    if serial:
        cmd += ["-n", "0"]
    if log is not None:
        cmd += ["--durations=0"]
    start, cpu = time.monotonic(), children_cpu()
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    seconds, cpu = time.monotonic() - start, children_cpu() - cpu
    if log is not None:
        log.mkdir(parents=True, exist_ok=True)
        (log / f"{tier}.log").write_text(f"{' '.join(cmd[1:])}\n{seconds:.1f} s, {cpu:.0f} CPU s\n"
                                         f"{result.stdout}{result.stderr}")
    summary = next((line for line in reversed(result.stdout.splitlines()) if re.search(r"\d+ (passed|failed|skipped|deselected)", line)), "")
    return seconds, cpu, summary.strip("= ")


def main(argv: list[str]) -> int:
    serial = "--serial" in argv
    log = next((Path(a.split("=", 1)[1]) for a in argv if a.startswith("--log=")), None)
    chosen = [a for a in argv if not a.startswith("--")] or ["fast", *TIERS]
    total = total_cpu = 0.0
    for tier in chosen:
        load = os.getloadavg()[0]
        seconds, cpu, summary = run(tier, serial, log)
        total, total_cpu = total + seconds, total_cpu + cpu
        print(f"{tier:9s} {seconds:7.1f} s  {cpu:6.0f} CPU s  load {load:4.1f} -> {os.getloadavg()[0]:4.1f}  {summary}",
              flush=True)
    verdict = "ok" if total <= TARGET_SECONDS else "OVER TARGET"
    print(f"{'total':9s} {total:7.1f} s  {total_cpu:6.0f} CPU s  (target {TARGET_SECONDS} s for the whole suite{', serial' if serial else ''}) "
          f"{verdict if len(chosen) == 1 + len(TIERS) else ''}".rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
