"""Wall time of the test suite, tier by tier, as the README's test command runs it (pytest-xdist, pyproject's addopts).

The tiers are the marks registered in pyproject.toml (docker, slurm, ray, realverl, browser) and `fast`, every test
with none of them; a test with two marks (the Slurm tests start Ray too) is counted in the first tier that has it.
Target: the whole suite <= 12 minutes on a 2-core machine. Run (after the README's test install):

    python benchmarks/suite.py                 # every tier, one after the other
    python benchmarks/suite.py fast docker     # only these
    python benchmarks/suite.py --serial        # the same with -n 0 (one process: the time before xdist)
"""

from __future__ import annotations

import re
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


def run(tier: str, serial: bool) -> tuple[float, str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", expression(tier), "-p", "no:cacheprovider"]
    if serial:
        cmd += ["-n", "0"]
    start = time.monotonic()
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - start
    summary = next((line for line in reversed(result.stdout.splitlines()) if re.search(r"\d+ (passed|failed|skipped|deselected)", line)), "")
    return seconds, summary.strip("= ")


def main(argv: list[str]) -> int:
    serial = "--serial" in argv
    chosen = [a for a in argv if not a.startswith("--")] or ["fast", *TIERS]
    total = 0.0
    for tier in chosen:
        seconds, summary = run(tier, serial)
        total += seconds
        print(f"{tier:9s} {seconds:7.1f} s  {summary}", flush=True)
    verdict = "ok" if total <= TARGET_SECONDS else "OVER TARGET"
    print(f"{'total':9s} {total:7.1f} s  (target {TARGET_SECONDS} s for the whole suite{', serial' if serial else ''}) "
          f"{verdict if len(chosen) == 1 + len(TIERS) else ''}".rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
