"""Notices, only when something is wrong: the run record, and every apprise URL configured.

apprise covers Feishu, DingTalk, Slack, e-mail and plain webhooks (`json://host/path`); a
notice names the run, the step, the failure class, cause and fix, and the last log lines.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

LAST_LINES = 15


def last_lines(log: str | None, count: int = LAST_LINES) -> list[str]:
    if not log or not Path(log).is_file():
        return []
    with open(log, "rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        handle.seek(max(0, size - 64 * 1024))
        tail = handle.read().decode("utf-8", errors="replace").splitlines()
    return list(deque(tail, maxlen=count))


def compose(run_id: str, title: str, step: int, total: int | None, failure: dict | None, log: str | None) -> str:
    where = f"step {step}/{total}" if total else f"step {step}"
    lines = [f"run {run_id}: {title} ({where})"]
    if failure:
        lines += [f"class: {failure.get('class')}" + (f" (phase {failure['phase']})" if failure.get("phase") else ""),
                  f"cause: {failure.get('cause')}", f"fix: {failure.get('fix')}"]
    tail = last_lines(log)
    if tail:
        lines += ["last log lines:", *tail]
    return "\n".join(lines)


def send(urls: list[str], title: str, body: str) -> list[str]:
    """Deliver to every URL; return the problems (a notice that cannot be sent must not stop the run)."""
    if not urls:
        return []
    import apprise

    problems = []
    for url in urls:
        sender = apprise.Apprise()
        if not sender.add(url):
            problems.append(f"{url.split('://')[0]}:// is not a notification URL apprise knows")
            continue
        if not sender.notify(title=title, body=body):
            problems.append(f"could not deliver to {url.split('://')[0]}://")
    return problems


def notice(record, title: str, *, failure: dict | None = None) -> dict:
    """Record a notice on the run and send it; returns the notice."""
    log = record.current.log if record.current else None
    body = compose(record.id, title, record.step, record.total_steps, failure, log)
    problems = send(record.notify, f"verl-deploy: {title}", body)
    entry = {"time": time.time(), "title": title, "body": body, "delivery_problems": problems}
    record.notices.append(entry)
    return entry
