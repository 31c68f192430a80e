"""What verl-deploy's own scripts say in a log: whether they handed over to the training, and where they failed.

submit.sbatch, start_verl.sh and run_training.sh run before the training does; a failure there is
the scripts', never the training's. run_training.sh prints HANDOVER just before it execs the
trainer. Before that, each script names the step it is at: an early exit prints
`[SCRIPT] failed at: STEP (exit status N)`, a step that knows why prints `[SCRIPT] error: WHAT`
with `; fix: HOW` on the same line or a `[SCRIPT] fix: HOW` line after it. The templates print
these texts; this module reads them back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

HANDOVER = "[verl-deploy] handing over to the training:"
SCRIPTS = {"submit.sbatch": "submit.sbatch", "start_verl": "start_verl.sh", "run_training": "run_training.sh"}
TAGGED = re.compile(r"\[(submit\.sbatch|start_verl|run_training)\] (error|fix|failed at): (.*)$")
FAILED_AT = re.compile(r"^(.*) \(exit status (\d+)\)$")
TOOL_LINE = "[verl-deploy] "  # the pumps' own lines (slurm job N: RUNNING, ray job ...): not what the scripts printed
CONTROL = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]")
LAST_LINES = 5
MAX_TEXT = 400


@dataclass
class ScriptFailure:
    script: str | None = None  # the file name of the script that named its failed step
    step: str | None = None
    status: int | None = None
    errors: list[str] = field(default_factory=list)  # "[SCRIPT] error:" texts, oldest first
    fixes: list[str] = field(default_factory=list)
    last_lines: list[str] = field(default_factory=list)  # what the scripts printed last (tool lines left out)
    line_numbers: list[int] = field(default_factory=list)  # of last_lines, counted from the start of the text read


def handed_over(text: bytes) -> bool:
    return HANDOVER.encode() in text


def read_failure(tail: bytes) -> ScriptFailure:
    """The first named step that failed, the scripts' error and fix lines, and the last lines they printed."""
    seen = ScriptFailure()
    printed: list[tuple[int, str]] = []
    for number, raw in enumerate(tail.decode("utf-8", errors="replace").splitlines(), 1):
        line = CONTROL.sub("", raw).strip()[:MAX_TEXT]
        if not line or line.startswith(TOOL_LINE):
            continue
        printed.append((number, line))
        tagged = TAGGED.search(line)
        if not tagged:
            continue
        script, kind, text = SCRIPTS[tagged.group(1)], tagged.group(2), tagged.group(3).strip()
        if kind == "error":
            text, _, fix = text.partition("; fix: ")  # one line can carry both
            _add(seen.errors, text)
            _add(seen.fixes, fix)
        elif kind == "fix":
            _add(seen.fixes, text)
        else:
            printed.pop()  # the step and status are said once, from here
            match = FAILED_AT.match(text)
            if seen.step is None:
                seen.script, seen.step = script, match.group(1) if match else text
                seen.status = int(match.group(2)) if match else None
    seen.line_numbers = [number for number, _ in printed[-LAST_LINES:]]
    seen.last_lines = [line for _, line in printed[-LAST_LINES:]]
    return seen


def _add(texts: list[str], text: str) -> None:
    if text and text not in texts:
        texts.append(text)
