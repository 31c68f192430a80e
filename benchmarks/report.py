"""Wall time of `verl-deploy report` on a long real-format verl log, and of reading it alone.

    python benchmarks/report.py [STEPS]     # default 2000 steps (~39 metrics each, 30 noise lines per step)

Prints the log size, the time to read it into metric series (views/history.py) and the time of
the whole command (read + matplotlib SVG plots + HTML), so a slower plot or parse shows as a number.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from verl_logs import healthy_lines  # noqa: E402


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    tmp = Path(tempfile.mkdtemp(prefix="verl-deploy-report-bench-"))
    log = tmp / "train.log"
    log.write_text("\n".join(healthy_lines(steps)) + "\n")
    from verl_deploy.views.history import read_logs

    started = time.perf_counter()
    history, _ = read_logs([(1, str(log), "log", None)])
    read = time.perf_counter() - started
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "verl_deploy", "report", str(log), "-o", str(tmp / "out")], check=True,
                   capture_output=True)
    whole = time.perf_counter() - started
    size = log.stat().st_size / 2**20
    print(f"log        {steps} steps, {size:.1f} MiB, {len(history.series.points)} metrics")
    print(f"read       {read:.2f} s ({size / read:.0f} MiB/s)")
    print(f"report     {whole:.2f} s (read + {len(list((tmp / 'out').glob('*.svg')))} SVG plots + HTML)")


if __name__ == "__main__":
    main()
