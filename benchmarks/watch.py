"""Watcher figures: event latency while following, scan throughput against grep, peak memory.

Targets (issue 5): a failure line appended to a followed log is delivered as an event in
p50 <= 0.25 s; a whole 1 GiB synthetic verl log is scanned at >= 0.5x the speed of
`grep -E` with the same patterns (C locale, grep's fastest); peak memory < 150 MB.

Failure-dense (issues 12, 22): a log that is nothing but failure lines (every line of the failure
fixtures, with fresh pids on each repeat) must cost at most 3x a healthy one of the same size
(whole process, measured in one run): printed as MiB/s, as the ratio to the healthy log, and
against `grep -E -c` with the same patterns.

Run (after the README's test install, `pip install '.[test]'`): python benchmarks/watch.py [--size-mib 1024] [--dense-mib 256] [--only-dense] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from verl_logs import healthy_lines, metric_line, write_big_log  # noqa: E402

from verl_deploy.watch.scan import LogScanner, prefilter_sources  # noqa: E402

VERL = [sys.executable, "-m", "verl_deploy"]


def to_ere(source: str) -> str:
    """A Python/RE2 pattern of the table as POSIX ERE for grep -E (same meaning for these patterns)."""
    def caseless(text: str) -> str:
        out, i = [], 0
        while i < len(text):
            if text[i] == "\\":
                out.append(text[i:i + 2])
                i += 2
                continue
            char = text[i]
            out.append(f"[{char.lower()}{char.upper()}]" if char.isalpha() else char)
            i += 1
        return "".join(out)

    source = re.sub(r"\(\?i:((?:[^()]|\([^()]*\))*)\)", lambda m: "(" + caseless(m.group(1)) + ")", source)
    return source.replace("(?:", "(").replace(r"\d", "[0-9]")


def grep_seconds(patterns: Path, log: Path, locale: str) -> tuple[float, int]:
    env = dict(os.environ, LC_ALL=locale)
    start = time.perf_counter()
    result = subprocess.run(["grep", "-E", "-c", "-f", str(patterns), str(log)], capture_output=True, text=True, env=env)
    return time.perf_counter() - start, int(result.stdout.strip() or 0)


def diagnose_run(log: Path) -> tuple[float, float, dict, float]:
    """Wall seconds, peak MiB, the verdict and CPU seconds of `verl-deploy diagnose LOG --json` as its own process."""
    measure = ("import json, resource, subprocess, sys, time; t = time.perf_counter(); "
               "r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "print(json.dumps({'s': time.perf_counter() - t, 'out': r.stdout, "
               "'kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
               "'cpu': resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime "
               "+ resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime}))")
    report = json.loads(subprocess.run([sys.executable, "-c", measure, *VERL, "diagnose", str(log), "--json"],
                                       capture_output=True, text=True).stdout)
    return report["s"], report["kib"] / 1024, json.loads(report["out"]), report["cpu"]


def throughput(size_mib: int, workdir: Path) -> None:
    log = workdir / "verl-1g.log"
    tail = ["(WorkerDict pid=5107) RuntimeError: NPU out of memory. Tried to allocate 3.20 GiB (NPU 5; 60.96 GiB total capacity)"]
    write_big_log(log, size_mib << 20, tail=tail)
    mib = log.stat().st_size / (1 << 20)
    patterns = workdir / "patterns.ere"
    patterns.write_text("\n".join(to_ere(s) for s in prefilter_sources(LogScanner().table, eager=False)) + "\n")
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL)  # page cache warm for everyone

    runs = 3
    grep_c = sorted(grep_seconds(patterns, log, "C")[0] for _ in range(runs))
    grep_utf8 = grep_seconds(patterns, log, "C.UTF-8")[0]
    ours = [diagnose_run(log) for _ in range(runs)]
    ours_s = sorted(r[0] for r in ours)
    peak = max(r[1] for r in ours)
    verdict = ours[0][2]
    ratio = statistics.median(grep_c) / statistics.median(ours_s)
    print(f"log: {mib:.0f} MiB synthetic verl log, {verdict['lines_read']:,} lines, verdict {verdict['class']}")
    print(f"grep -E (LC_ALL=C)       median {statistics.median(grep_c):6.2f} s  {mib / statistics.median(grep_c):6.0f} MiB/s")
    print(f"grep -E (LC_ALL=C.UTF-8) once   {grep_utf8:6.2f} s  {mib / grep_utf8:6.0f} MiB/s")
    print(f"verl-deploy diagnose     median {statistics.median(ours_s):6.2f} s  {mib / statistics.median(ours_s):6.0f} MiB/s"
          f"  (whole process, {runs} runs)")
    print(f"throughput vs grep (C locale): {ratio:.2f}x   target >= 0.5x   {'ok' if ratio >= 0.5 else 'UNDER TARGET'}")
    print(f"peak memory: {peak:.0f} MiB   target < 150 MB   {'ok' if peak * 1.048576 < 150 else 'OVER TARGET'}")
    log.unlink()


def write_dense_log(path: Path, size: int) -> int:
    """Only failure lines: every fixture line a signature matches, numbers varied on each repeat."""
    import random

    from verl_deploy.watch.signatures import load_table

    table = load_table()
    lines = [line for fixture in sorted((ROOT / "tests" / "fixtures" / "failures").glob("S-*.log"))
             for line in fixture.read_text(errors="replace").splitlines() if table.failures_in(line)]
    rng = random.Random(12)
    written = 0
    with open(path, "w", encoding="utf-8") as handle:
        while written < size:
            chunk = "\n".join(re.sub(r"pid=\d+", f"pid={rng.randrange(1000, 99999)}", line) for line in lines) + "\n"
            handle.write(chunk)
            written += len(chunk.encode())
    return len(lines)


def dense(size_mib: int, workdir: Path) -> None:
    """Failure-dense against healthy of the same size, and both against `grep -E -c` with the same patterns.

    Target (issue 22): the failure-dense log costs at most 3x the healthy one, whole process, one run.
    """
    healthy, failing = workdir / "healthy.log", workdir / "dense.log"
    write_big_log(healthy, size_mib << 20)
    kinds = write_dense_log(failing, size_mib << 20)
    words = workdir / "words.ere"  # the words `logs --errors` looks for (grep -E with all 170 table patterns
    words.write_text("Error|OOM|Exception\n")  # takes minutes on a failure-dense log: its engine backtracks)
    results = {}
    for name, log in (("healthy", healthy), ("failure-dense", failing)):
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL)  # page cache warm for both tools
        runs = [diagnose_run(log) for _ in range(3)]
        seconds = sorted(r[0] for r in runs)[1]
        cpu = sorted(r[3] for r in runs)[1]  # CPU time: steadier than wall time on a shared machine
        grep_s, grep_lines = sorted(grep_seconds(words, log, "C") for _ in range(3))[1]
        mib = log.stat().st_size / (1 << 20)
        results[name] = {"cpu": cpu / mib, "wall": seconds / mib, "grep": grep_s}
        print(f"{name:14s} {mib:5.0f} MiB  median wall {seconds:6.2f} s  cpu {cpu:6.2f} s  {mib / cpu:6.1f} MiB/cpu-s  "
              f"peak {max(r[1] for r in runs):4.0f} MiB  verdict {runs[0][2]['class']}  ·  grep -E -c {grep_s:5.2f} s "
              f"({grep_lines:,} lines match)")
        log.unlink()
    cpu_ratio = results["failure-dense"]["cpu"] / results["healthy"]["cpu"]
    wall_ratio = results["failure-dense"]["wall"] / results["healthy"]["wall"]
    print(f"failure-dense costs {cpu_ratio:.2f}x healthy CPU per MiB (wall {wall_ratio:.2f}x)   target <= 3x   "
          f"{'ok' if cpu_ratio <= 3 else 'OVER TARGET'}   ({kinds} distinct failure lines repeated)")
    for name, log in (("healthy", healthy), ("failure-dense", failing)):
        print(f"{name:14s} diagnose takes {results[name]['wall'] * size_mib / results[name]['grep']:.0f}x the wall time of "
              "grep -E -c 'Error|OOM|Exception' (LC_ALL=C; grep only counts, diagnose classifies)")


def latency(workdir: Path) -> None:
    """Append lines to a followed log; time until `diagnose --follow --json` prints their event."""
    from verl_deploy.watch.signatures import load_table

    log = workdir / "live.log"
    log.write_text("\n".join(healthy_lines(2, 100)) + "\n")
    process = subprocess.Popen([*VERL, "diagnose", str(log), "--follow", "--json"], stdout=subprocess.PIPE, text=True)
    json.loads(process.stdout.readline())  # "following": caught up
    fixtures = ROOT / "tests" / "fixtures" / "failures"
    table = load_table()
    failure_lines, seen = [], set()
    for path in sorted(fixtures.glob("S-*.log")):
        for line in path.read_text().splitlines():
            found = table.failures_in(line)
            key = tuple((c.id, c.signatures.index(s)) for c, s in found)
            if found and key not in seen and all(s.min_count == 1 for _, s in found):
                seen.add(key)
                failure_lines.append(line)
                break
    failure_delays, metric_delays = [], []
    with open(log, "a", buffering=1) as handle:
        for step, line in enumerate(failure_lines, start=3):
            for text, kind, delays in ((metric_line(step), "metrics", metric_delays), (line, "failure", failure_delays)):
                time.sleep(0.05)
                written = time.perf_counter()
                handle.write(text + "\n")
                while True:
                    record = json.loads(process.stdout.readline())
                    if record["event"] == kind:
                        delays.append(time.perf_counter() - written)
                        break
    process.terminate()
    process.wait()
    for kind, delays in (("failure", failure_delays), ("metrics", metric_delays)):
        delays.sort()
        p50, p90 = statistics.median(delays), delays[int(0.9 * (len(delays) - 1))]
        note = f"target p50 <= 0.25 s   {'ok' if p50 <= 0.25 else 'OVER TARGET'}" if kind == "failure" else ""
        print(f"{kind} event latency: p50 {p50 * 1000:.0f} ms  p90 {p90 * 1000:.0f} ms  max {delays[-1] * 1000:.0f} ms"
              f"  ({len(delays)} lines)  {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--dense-mib", type=int, default=256, help="size of the healthy and failure-dense logs")
    parser.add_argument("--only-dense", action="store_true", help="only the failure-dense comparison")
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="verl-deploy-watch-") as tmp:
        if not args.only_dense:
            latency(Path(tmp))
            throughput(args.size_mib, Path(tmp))
        dense(args.dense_mib, Path(tmp))


if __name__ == "__main__":
    main()
