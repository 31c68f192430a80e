"""The failure-dense fast path (saturated signatures and phases read back) gives the exact verdict.

A failure-dense log is scanned with signatures that already hold their lines left out of the
combined search, and phase marks read back only where a failure first shows; `exact=True` looks
at every matching line. Both must give the same diagnosis and the same failure events on every
failure fixture, each repeated, and mixes of them, read whole or in small blocks as a live run is.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from verl_deploy.watch.diagnosis import diagnose
from verl_deploy.watch.scan import FailureSeen, LogScanner

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "failures").glob("S-*.log"))


def cases() -> dict[str, bytes]:
    texts = {path.name: path.read_bytes() for path in FIXTURES}
    rng = random.Random(7)
    found = {f"{name} x30": text * 30 for name, text in texts.items()}
    for n in range(12):
        picked = rng.sample(sorted(texts), 4)
        found[f"mix {n}: {', '.join(picked)}"] = b"".join(
            re.sub(rb"pid=\d+", b"pid=%d" % rng.randrange(1000, 99999), texts[name]) * rng.randrange(1, 25)
            for name in picked)
    return found


@pytest.mark.parametrize("eager", [False, True])
def test_the_fast_path_gives_the_exact_verdict(eager):
    assert FIXTURES
    for name, data in cases().items():
        lines = data.split(b"\n")
        blocks = [b"\n".join(lines[i:i + 200]) + b"\n" for i in range(0, len(lines), 200)]
        results = []
        for exact in (True, False):
            worst: dict[str, str] = {}

            def seen(event, worst=worst) -> None:
                if isinstance(event, FailureSeen):
                    worst[event.class_id] = ("fatal" if "fatal" in (event.severity, worst.get(event.class_id))
                                             else event.severity)

            scanner = LogScanner(eager=eager, on_event=seen, exact=exact)
            for block in blocks if eager else [b"".join(blocks)]:
                scanner.feed(block)
            results.append((diagnose(scanner).as_dict(), worst))
        assert results[0] == results[1], name


@pytest.mark.parametrize("exact", [True, False])
def test_a_phase_named_before_the_first_failure_is_found_across_blocks(exact):
    """The phase line is in an earlier block than the failure (a live run feeds a few lines at a time)."""
    scanner = LogScanner(eager=True, exact=exact)
    scanner.feed(b'(WorkerDict pid=7)   File "/verl/verl/workers/fsdp_workers.py", line 9, in update_actor\n')
    for n in range(60):
        scanner.feed(b"(WorkerDict pid=7) INFO nothing to see %d\n" % n)
    scanner.feed(b"(WorkerDict pid=7) RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB "
                 b"(NPU 0; 60.00 GiB total capacity; 50.00 GiB already allocated)\n")
    scanner.feed(b"(WorkerDict pid=9) INFO after\n" * 400)
    result = diagnose(scanner)
    assert result.class_id == "device_oom" and result.phase == "actor_update", result.phase
