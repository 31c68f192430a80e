"""Notices, only when something is wrong: the run record, and every apprise URL configured.

apprise covers Feishu, DingTalk, Slack, e-mail and plain webhooks (`json://host/path`); a
notice names the run, the step, the failure class, cause and fix, and the last log lines.
"""

from __future__ import annotations

import re
import time
from collections import deque

from verl_deploy import boundedread

LAST_LINES = 15


def last_lines(log: str | None, count: int = LAST_LINES) -> list[str]:
    if not log:
        return []
    try:
        tail = boundedread.read_tail(log, 64 * 1024).decode("utf-8", errors="replace").splitlines()
    except (OSError, boundedread.UnreadableFile):
        return []
    return list(deque(tail, maxlen=count))


def compose(run_id: str, title: str, step: int, total: int | None, failure: dict | None, log: str | None) -> str:
    where = f"step {step}/{total}" if total else f"step {step}"
    lines = [f"run {run_id}: {title} ({where})"]
    if failure:
        lines += [f"class: {failure.get('class')}" + (f" (phase {failure['phase']})" if failure.get("phase") else ""),
                  f"cause: {failure.get('cause')}", f"fix: {failure.get('fix')}"]
        following = failure.get("next")
        if isinstance(following, dict) and following.get("command"):
            lines += [f"next: {following.get('what')}", f"  {following['command']}"]
    tail = last_lines(log)
    if tail:
        lines += ["last log lines:", *tail]
    return "\n".join(lines)


_PLAIN = re.compile(r"[A-Za-z0-9_.+-]{1,40}")


def target(url: str) -> str:
    """What a notice went to, without the secret parts of the URL (user, password, tokens, paths).

    Every message about a notify URL shows this form, never the URL itself: apprise URLs carry
    credentials in the user, password and path parts (slack://T/B/TOKEN, mailto://user:pass@host).
    """
    from urllib.parse import urlsplit

    if not isinstance(url, str):
        return "(not a URL)"
    if "://" not in url:
        # a bare word ("notaurl") is shown; anything else may be a pasted secret
        return url if _PLAIN.fullmatch(url) else "(not a URL; not shown: it may hold a secret)"
    scheme = url.split("://")[0]
    scheme = scheme if _PLAIN.fullmatch(scheme) else "?"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return scheme + "://"
    return f"{scheme}://{host}{port}"


def scrub(text: str, url: str) -> str:
    """Text (an apprise error) with the secret parts of url replaced by ***."""
    from urllib.parse import unquote, urlsplit

    try:
        parts = urlsplit(url)
        secrets = [parts.password, parts.username, parts.path.strip("/"), parts.query, *parts.path.split("/")]
    except ValueError:
        secrets = [url]
    text = text.replace(url, target(url))
    for secret in sorted({s for s in secrets if s and len(s) >= 3}, key=len, reverse=True):
        text = text.replace(secret, "***").replace(unquote(secret), "***")
    return text


def invalid(url: str) -> str | None:
    """Why apprise cannot use this URL (None: it can), without sending anything."""
    import apprise

    if not isinstance(url, str) or not url.strip() or len(url) > 4096:
        return "an empty or over-long URL"
    if "://" not in url:
        return "not a URL"
    if apprise.Apprise.instantiate(url, suppress_exceptions=True) is None:
        return f"apprise does not accept this {target(url).split('://')[0]}:// URL"
    return None


WEBHOOKS = {"json": 80, "xml": 80, "form": 80, "jsons": 443, "xmls": 443, "forms": 443}


def unreachable(url: str, timeout: float = 2.0) -> str | None:
    """For plain webhooks (json://, xml://, form://): why nothing answers at host:port now (None: it does)."""
    import socket
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port or WEBHOOKS.get(parts.scheme)
    except ValueError:
        return None
    if parts.scheme not in WEBHOOKS or not parts.hostname:
        return None
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            return None
    except OSError as exc:
        return f"nothing answers at {parts.hostname}:{port} ({exc.strerror or exc})"


def send(urls: list[str], title: str, body: str) -> list[dict]:
    """Deliver to every URL; one result per URL (a notice that cannot be sent must not stop the run)."""
    if not urls:
        return []
    import apprise

    results = []
    for url in urls:
        sender = apprise.Apprise()
        if not sender.add(url):
            results.append({"target": target(url), "ok": False, "error": "not a notification URL apprise knows",
                            "time": time.time()})
            continue
        with apprise.LogCapture(level=apprise.logging.WARNING) as captured:
            ok = bool(sender.notify(title=title, body=body))
            lines = [line.strip() for line in captured.getvalue().splitlines() if line.strip()]
        results.append({"target": target(url), "ok": ok, "time": time.time(),
                        "error": None if ok else (scrub(lines[-1].split(" - ")[-1], url)[:300] if lines
                                                  else "apprise reported a failed delivery")})
    return results


def notice(record, title: str, *, failure: dict | None = None) -> dict:
    """Record a notice on the run with the result of every delivery, and send it; returns the notice."""
    log = record.current.log if record.current else None
    body = compose(record.id, title, record.step, record.total_steps, failure, log)
    deliveries = send(record.notify, f"verl-deploy: {title}", body)
    entry = {"time": time.time(), "title": title, "body": body, "deliveries": deliveries,
             "delivery_problems": [f"{d['target']}: {d['error']}" for d in deliveries if not d["ok"]]}
    record.notices.append(entry)
    return entry
