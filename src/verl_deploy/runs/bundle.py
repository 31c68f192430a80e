"""`verl-deploy bundle RUN`: one .tar.gz holding what a verl maintainer asks for, every secret redacted.

Members: README.md (a summary to paste into an issue), run.json, failure.json (the classified
failure with its evidence lines, per attempt), for each attempt its scripts and plan.json (never
swanlab.env or ray_auth_token), handle.json, the log's head, tail and error lines with context
(watch/excerpt.py: bounded whatever the log's size) and the watcher's verdict, supervisor.log's
tail, the newest evidence folder's summary and stacks (bounded), check.json (the check of the
run's spec on this host now) and versions.json. Everything passes the redactor (redact.py) and is
checked once more for a known secret before the archive is written (a temporary file renamed into
place: never half an archive).
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from verl_deploy import __version__, boundedread
from verl_deploy.redact import SECRET_FILES, Redactor, configured_patterns, known_values
from verl_deploy.runs.record import RunRecord
from verl_deploy.statedir import atomic_file

MAX_SCRIPT = 1 << 20  # a script or plan.json we wrote: tens of KB
MAX_SMALL = 256 << 10  # supervisor.log tail, one evidence file
MAX_EVIDENCE = 2 << 20  # all of one evidence folder's files


class BundleError(Exception):
    """One line: why no bundle was written."""


@dataclass
class Bundle:
    path: Path
    members: dict[str, int] = field(default_factory=dict)  # name -> bytes (uncompressed)
    redacted: int = 0
    size: int = 0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"path": str(self.path), "bytes": self.size, "members": self.members, "redactions": self.redacted,
                "problems": self.problems}


class _Writer:
    """Members in memory (all bounded), each passed through the redactor."""

    def __init__(self, redactor: Redactor):
        self.redact = redactor
        self.members: dict[str, bytes] = {}

    def text(self, name: str, text: str) -> None:
        self.members[name] = self.redact(text).encode("utf-8")

    def json(self, name: str, data: Any) -> None:
        self.text(name, json.dumps(data, indent=2, default=str) + "\n")


def _secret_files(record: RunRecord) -> list[Path]:
    return [record.directory / f"attempt-{a.n}" / "scripts" / name for a in record.attempts for name in SECRET_FILES]


def _read(path: Path, limit: int, *, tail: bool = False) -> str | None:
    try:
        raw = boundedread.read_tail(path, limit) if tail else boundedread.read_bytes(path, limit, head=True)
    except (OSError, boundedread.UnreadableFile):
        return None
    return raw.decode("utf-8", errors="replace")


def _attempt(writer: _Writer, record: RunRecord, attempt, problems: list[str]) -> dict:
    """The attempt's scripts, handle, log excerpt and verdict; returns its verdict for the summary."""
    from verl_deploy.watch.excerpt import excerpt_log

    base = f"attempt-{attempt.n}"
    folder = record.directory / base
    scripts = folder / "scripts"
    if scripts.is_dir():
        for path in sorted(scripts.iterdir()):
            if path.name in SECRET_FILES or not path.is_file() or path.is_symlink():
                continue
            text = _read(path, MAX_SCRIPT)
            if text is not None:
                writer.text(f"{base}/scripts/{path.name}", text)
    handle = _read(folder / "handle.json", MAX_SCRIPT)
    if handle is not None:
        writer.text(f"{base}/handle.json", handle)
    if not attempt.log:
        return {}
    excerpt = excerpt_log(attempt.log)
    if excerpt.problem:
        problems.append(f"attempt {attempt.n}'s log: {excerpt.problem}")
    writer.text(f"{base}/log-head.txt", "\n".join(excerpt.head) + "\n")
    writer.text(f"{base}/log-tail.txt", excerpt.tail_text())
    writer.text(f"{base}/log-errors.txt", excerpt.errors_text())
    verdict = {**excerpt.diagnosis.as_dict(), "log_bytes": excerpt.bytes, "log_lines": excerpt.lines,
               "error_lines": excerpt.error_lines, "error_windows_left_out": excerpt.dropped}
    writer.json(f"{base}/diagnosis.json", verdict)
    return verdict


def _evidence(writer: _Writer, record: RunRecord) -> None:
    """The newest evidence folder (stack dumps, devices, summary), bounded."""
    root = record.directory / "evidence"
    if not root.is_dir():
        return
    folders = sorted((p for p in root.iterdir() if p.is_dir() and not p.is_symlink()), key=lambda p: p.name)
    if not folders:
        return
    newest, total = folders[-1], 0
    for path in sorted(newest.rglob("*")):
        if not path.is_file() or path.is_symlink() or total > MAX_EVIDENCE:
            continue
        text = _read(path, MAX_SMALL, tail=True)
        if text is not None:
            total += len(text)
            writer.text(f"evidence/{newest.name}/{path.relative_to(newest)}", text)


def _check(record: RunRecord, timeout: float) -> dict:
    """`check` of the run's spec on this host now, as `check --json` prints it."""
    from verl_deploy.preflight.run import run_check
    from verl_deploy.runs.attempts import spec_of

    spec = spec_of(record)
    return run_check(lambda detected: spec, timeout=timeout).as_dict()


def _dig(data: dict | None, *keys: str) -> dict:
    """data[k1][k2]... where each level is a dict; {} where one is missing or empty."""
    for key in keys:
        data = (data or {}).get(key) or {}
    return data or {}


def versions_of(check: dict | None, plan: dict | None, record: RunRecord) -> dict:
    """verl-deploy, verl, torch/torch_npu, CANN or CUDA, vLLM/SGLang, driver, image: as the check and plan saw them."""
    packages = _dig(check, "areas", "software", "data", "versions")
    accel = _dig(check, "accelerators")
    container = _dig(check, "areas", "docker", "data", "container")
    verl = _dig(plan, "verl")
    spec = record.spec
    return {
        "verl-deploy": __version__,
        "verl": packages.get("verl") or verl.get("version") or spec.get("verl_version"),
        "verl_profile": verl.get("profile"),
        **{name: packages.get(name) for name in ("python", "torch", "torch_npu", "vllm", "vllm_ascend", "sglang",
                                                 "megatron", "mindspeed", "transformers", "ray", "swanlab")},
        "cann": _dig(check, "areas", "ascend", "data").get("cann_version"),
        "cuda": _dig(check, "areas", "accelerators", "data").get("cuda_version"),
        "driver": accel.get("driver_version"),
        "device": accel.get("kind") or spec.get("device"),
        "image": container.get("image") or spec.get("image"),
        "container": spec.get("container"),
        "backend": record.backend,
    }


def _summary(record: RunRecord, verdicts: dict[int, dict], versions: dict, check: dict | None) -> str:
    """README.md: what happened, the failure and its fix, the versions, what is in the archive."""
    failure = record.failure or {}
    spec = record.spec
    lines = [f"# verl-deploy run {record.id}: {record.state}", "",
             f"- backend: {record.backend}; step {record.step}" + (f"/{record.total_steps}" if record.total_steps else "")
             + f"; {len(record.attempts)} attempt(s); last checkpoint: {record.last_checkpoint_step}",
             f"- model: {spec.get('model_path')}; framework: {spec.get('framework')}; devices: {spec.get('devices')}; "
             f"nodes: {len(spec.get('nodes') or []) or 1}", ""]
    if failure:
        lines += ["## Failure", "", f"- class: `{failure.get('class')}`" + (f" (phase {failure['phase']})"
                                                                           if failure.get("phase") else ""),
                  f"- cause: {failure.get('cause')}", f"- fix suggested: {failure.get('fix')}"]
        if failure.get("decision"):
            lines.append(f"- decision: {failure['decision']}")
        for hit in failure.get("lines") or []:
            lines.append(f"    {hit.get('line')}: {str(hit.get('text'))[:300]}")
        lines.append("")
    lines += ["## Attempts", ""]
    for attempt in record.attempts:
        verdict = verdicts.get(attempt.n, {})
        lines.append(f"- {attempt.n}: {attempt.reason}; exit {attempt.exit_code}; "
                     f"failure {(attempt.failure or {}).get('class')}; log {verdict.get('log_lines', 0)} lines, "
                     f"{verdict.get('error_lines', 0)} error line(s) (attempt-{attempt.n}/log-errors.txt)")
    lines += ["", "## Versions", "", "| component | version |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in versions.items() if value]
    if check is not None:
        lines += ["", "## Check (this host, now)", "", f"{check.get('verdict')}"]
        lines += [f"- {f.get('level')}: {f.get('check')}: {f.get('message')}" for f in check.get("findings", [])[:20]]
    lines += ["", "## In this archive", "",
              "run.json, failure.json, check.json, versions.json; attempt-N/: scripts/ (start_verl.sh, "
              "run_training.sh, plan.json), handle.json, diagnosis.json, log-head.txt, log-tail.txt, "
              "log-errors.txt (every error line with 5 lines around it, bounded); supervisor.log; evidence/ "
              "(the newest stack dumps). Secrets are replaced by [REDACTED].", ""]
    return "\n".join(lines)


def build_bundle(record: RunRecord, output: Path, *, run_check: bool = True, check_timeout: float = 10.0,
                 say: Callable[[str], None] = lambda text: None) -> Bundle:
    """Write the archive; BundleError (one line) when it cannot be written or a secret would leak."""
    from verl_deploy.redact import PatternError

    try:
        patterns = configured_patterns()
    except PatternError as exc:
        raise BundleError(str(exc)) from None
    redactor = Redactor(known_values(files=_secret_files(record)), patterns)
    writer = _Writer(redactor)
    bundle = Bundle(output)
    writer.json("run.json", asdict(record))
    verdicts: dict[int, dict] = {}
    for attempt in record.attempts:
        say(f"attempt {attempt.n}: reading its log")
        verdicts[attempt.n] = _attempt(writer, record, attempt, bundle.problems)
    writer.json("failure.json", {"run": record.failure,
                                 "attempts": [{"n": a.n, "failure": a.failure, "exit_code": a.exit_code,
                                               "verdict": {k: verdicts.get(a.n, {}).get(k) for k in
                                                           ("class", "phase", "cause", "fix", "lines", "secondary")}}
                                              for a in record.attempts],
                                 "supervisor_deaths": record.supervisor_deaths})
    supervisor = _read(record.directory / "supervisor.log", MAX_SMALL, tail=True)
    if supervisor is not None:
        writer.text("supervisor.log", supervisor)
    _evidence(writer, record)
    check: dict | None = None
    if run_check:
        say("checking this host for the run's spec")
        try:
            check = _check(record, check_timeout)
        except Exception as exc:  # noqa: BLE001 - the bundle is still worth having without it
            bundle.problems.append(f"the check could not run: {type(exc).__name__}: {exc}")
    writer.json("check.json", check if check is not None else {"skipped": True, "problems": bundle.problems})
    plan = None
    if record.current is not None:
        try:
            plan = boundedread.read_json(record.directory / f"attempt-{record.current.n}" / "scripts" / "plan.json",
                                         boundedread.MAX_PLAN_BYTES)
        except (OSError, boundedread.UnreadableFile):
            plan = None
    versions = versions_of(check, plan if isinstance(plan, dict) else None, record)
    writer.json("versions.json", versions)
    writer.text("README.md", _summary(record, verdicts, versions, check))
    leaked = [name for name, data in writer.members.items() if redactor.leaks(data.decode("utf-8", errors="replace"))]
    if leaked:  # a redactor bug must never ship a key
        raise BundleError(f"a secret is still in {leaked[0]} after redaction; no bundle was written")
    bundle.redacted = redactor.count
    _write_archive(writer.members, output, f"verl-deploy-{record.id}")
    bundle.members = {name: len(data) for name, data in writer.members.items()}
    bundle.size = output.stat().st_size
    return bundle


def _write_archive(members: dict[str, bytes], output: Path, top: str) -> None:
    """The tar.gz written whole or not at all, readable by its owner only (statedir.atomic_file)."""
    with atomic_file(output) as raw, tarfile.open(fileobj=raw, mode="w:gz") as archive:
        now = time.time()
        for name, data in members.items():
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mtime, info.mode = len(data), now, 0o644
            archive.addfile(info, io.BytesIO(data))
