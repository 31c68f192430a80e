"""`verl-deploy report`: one self-contained HTML page (plots embedded) and the PNGs, for a run or any verl log.

The page holds: what ran and how far it got, the failure with cause and fix, the attempts (OOM
retries, resumes) also marked on every plot's step axis, the curves of every logged metric
grouped by what it measures, the notices, and the configuration (the run's spec and Hydra
overrides, or the config verl printed at the start of a log from elsewhere). Nothing outside
the page is loaded: it opens offline and can be mailed.
"""

from __future__ import annotations

import base64
import html
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_deploy.boundedread import MAX_PLAN_BYTES, UnreadableFile, read_bytes, read_json
from verl_deploy.views.history import RunHistory, read_logs
from verl_deploy.watch.describe import duration, number

CONFIG_DUMP = re.compile(r"^(?:\([\w.]+ pid=\d+[^)]*\)\s*)?(\{'(?:actor_rollout_ref|data|algorithm|trainer)'.*\})\s*$")
CONFIG_SCAN_BYTES = 8 << 20  # the config dump is near the start of a log
MAX_CONFIG_CHARS = 60_000
SUMMARY_KEYS = (("critic/score/mean", "score"), ("critic/rewards/mean", "reward"), ("response_length/mean", "response length"),
                ("response_length/clip_ratio", "clip ratio"), ("actor/entropy", "entropy"), ("actor/pg_clipfrac", "pg_clipfrac"),
                ("actor/grad_norm", "grad norm"), ("perf/throughput", "throughput (tok/s/device)"),
                ("timing_s/step", "step time (s)"))


@dataclass
class Source:
    """What the report is about: a run of this tool, or a log from anywhere."""

    title: str
    logs: list[tuple[int, str, str, int | None]]  # (attempt, log, reason, resumed from)
    record: Any = None
    config_rows: list[tuple[str, str]] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    verl_config: str | None = None


def from_run(record) -> Source:
    spec = {k: v for k, v in record.spec.items() if k not in ("sources", "swanlab_api_key")}
    rows = [(k, json.dumps(v) if isinstance(v, (list, dict)) else str(v)) for k, v in spec.items()]
    overrides: list[str] = []
    if record.current:
        try:
            plan = read_json(record.directory / f"attempt-{record.current.n}" / "scripts" / "plan.json", MAX_PLAN_BYTES)
            overrides = [str(o.get("text", o)) if isinstance(o, dict) else str(o) for o in plan.get("overrides", [])]
        except (OSError, ValueError, AttributeError):
            overrides = []
    logs = [(a.n, a.log, a.reason, a.resumed_from_step) for a in record.attempts if a.log]
    source = Source(f"run {record.id}", logs, record, rows, overrides)
    if logs:
        source.verl_config = verl_config_of(Path(logs[-1][1]))
    return source


def from_log(path: Path) -> Source:
    return Source(f"log {path}", [(1, str(path), "log", None)], verl_config=verl_config_of(path))


def verl_config_of(path: Path) -> str | None:
    """The config dict verl prints when it starts (`{'actor_rollout_ref': ...}`), if the log has it."""
    try:  # never blocks on a FIFO; a directory or device is simply no config (build() names the bad log)
        head = read_bytes(path, CONFIG_SCAN_BYTES, head=True).decode("utf-8", errors="replace")
    except (OSError, UnreadableFile):
        return None
    for line in head.splitlines():
        if "'actor_rollout_ref'" in line or "'trainer'" in line:
            match = CONFIG_DUMP.match(line.strip())
            if match:
                return match.group(1)[:MAX_CONFIG_CHARS]
    return None


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _link(url: str | None) -> str:
    if not url:
        return "—"
    if url.startswith(("http://", "https://")):
        return f'<a href="{_e(url)}">{_e(url)}</a>'
    return f"<code>{_e(url)}</code>"


STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1280px;color:#222;padding:0 1rem}
h1{font-size:1.5rem;margin-bottom:.2rem} h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;font-size:.9rem} td,th{padding:.2rem .7rem;text-align:left;border-bottom:1px solid #eee;vertical-align:top}
.state-succeeded{color:#1a7f37} .state-failed{color:#cf222e} .state-stopped,.state-running{color:#9a6700}
.failure{border-left:4px solid #cf222e;background:#fff5f5;padding:.6rem 1rem} .warning{border-left-color:#d4a72c;background:#fffbea}
pre{background:#f6f8fa;padding:.6rem;overflow-x:auto;font-size:.8rem;white-space:pre-wrap;word-break:break-all}
figure{margin:1rem 0} figure img{max-width:100%;border:1px solid #eee} figcaption{font-size:.85rem;color:#555}
.legend span{margin-right:1.2rem} .muted{color:#666}
"""


def _summary(history: RunHistory, source: Source) -> str:
    record = source.record
    state = getattr(record, "state", None)
    step = max(history.step, getattr(record, "step", 0) or 0)
    total = getattr(record, "total_steps", None) or history.total_steps
    rows = [("state", f'<span class="state-{_e(state)}">{_e(state)}</span>')] if state else []
    rows += [("step", f"{step} of {total}" if total else str(step)),
            ("SwanLab", _link(getattr(record, "swanlab_url", None) or history.swanlab_url))]
    median = history.median_step_seconds
    if median:
        rows.append(("median step time", f"{median:.1f} s"))
    if record is not None and getattr(record, "attempts", None):
        first, last = record.attempts[0], record.attempts[-1]
        end = last.ended or time.time()
        rows.append(("wall time", duration(end - first.started)))
    for key, label in SUMMARY_KEYS:
        value = history.series.last(key)
        if value is not None:
            rows.append((f"last {label}", number(value)))
    return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _failure_block(class_id, cause, fix, decision, lines, severity, heading: str) -> str:
    kind = "failure" if severity == "fatal" else "failure warning"
    text = "".join(f"{_e(n)}: {_e(t)}\n" for n, t in lines)
    return (f'<div class="{kind}"><p><b>{_e(heading)}{_e(class_id)}</b>' +
            (f" ({_e(severity)})" if severity and severity != "fatal" else "") +
            f"</p><p><b>cause:</b> {_e(cause)}</p><p><b>fix:</b> {_e(fix)}</p>" +
            (f"<p><b>what verl-deploy did:</b> {_e(decision)}</p>" if decision else "") +
            (f"<pre>{text}</pre>" if text else "") + "</div>")


def _failure(source: Source, diagnoses: list) -> str:
    """The run's failure in full; failures of earlier attempts that recovery dealt with, one line each."""
    record = source.record
    failure = getattr(record, "failure", None)
    out = []
    if failure and failure.get("class"):
        out.append(_failure_block(failure.get("class"), failure.get("cause"), failure.get("fix"), failure.get("decision"),
                                  [(line.get("line"), line.get("text")) for line in failure.get("lines") or []],
                                  "fatal", ""))
    elif diagnoses and diagnoses[-1] is not None and diagnoses[-1].class_id:
        d = diagnoses[-1]
        out.append(_failure_block(d.class_id, d.cause, d.fix, None, [(h.line, h.text) for h in d.lines], d.severity, ""))
    attempts = getattr(record, "attempts", None) or []
    recovered = []
    for attempt, d in zip(attempts[:-1], diagnoses[:-1]):
        if d is not None and d.class_id:
            line = d.lines[0].text if d.lines else ""
            recovered.append(f"<li>attempt {attempt.n} at step {d.step}: <b>{_e(d.class_id)}</b> — {_e(line[:300])}</li>")
    if recovered:
        out.append("<p>Recovered by a new attempt (see Attempts):</p><ul>" + "".join(recovered) + "</ul>")
    return "\n".join(out) or '<p class="muted">No failure found in the log.</p>'


def _attempts(source: Source) -> str:
    record = source.record
    if record is None or not getattr(record, "attempts", None):
        return ""
    rows = "".join(
        f"<tr><td>{a.n}</td><td>{_e(a.reason)}</td><td>{_e(','.join(a.features) or '—')}</td>"
        f"<td>{_e(a.resumed_from_step if a.resumed_from_step is not None else '—')}</td>"
        f"<td>{_e(a.exit_code if a.exit_code is not None else '—')}</td>"
        f"<td>{_e((a.failure or {}).get('class') or '—')}</td></tr>" for a in record.attempts)
    return ("<h2>Attempts</h2><table><tr><th>#</th><th>why</th><th>features added</th><th>resumed from step</th>"
            f"<th>exit</th><th>failure</th></tr>{rows}</table>")


def _marks(history: RunHistory) -> str:
    drawn = sorted((m for m in history.marks if m.kind in ("attempt", "resume", "failure")), key=lambda m: m.step)
    if not drawn:
        return ""
    items = "".join(f"<li>step {m.step}: {_e(m.label)}</li>" for m in drawn)
    return ('<p class="legend"><span style="color:#d62728">- - attempt</span><span style="color:#ff7f0e">··· resume</span>'
            f'<span style="color:#d62728">— failure</span></p><ul>{items}</ul>')


def _configuration(source: Source) -> str:
    parts = []
    if source.config_rows:
        parts.append("<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in source.config_rows)
                     + "</table>")
    if source.overrides:
        parts.append("<h3>Hydra overrides</h3><pre>" + _e("\n".join(source.overrides)) + "</pre>")
    if source.verl_config:
        parts.append("<h3>Configuration as verl printed it</h3><pre>" + _e(source.verl_config) + "</pre>")
    return "\n".join(parts) or '<p class="muted">The log holds no configuration dump.</p>'


def build(source: Source, out_dir: Path) -> dict:
    """Read the logs, draw the curves, write report.html; returns what was written."""
    from verl_deploy.views.curves import draw

    history, diagnoses = read_logs(source.logs)
    if history.log_problems:  # before anything is written: a report of a log we could not read would mislead
        raise UnreadableFile("; ".join(history.log_problems))
    figures = draw(history.series, history.marks, out_dir)
    plots = []
    for figure in figures:
        data = base64.b64encode(figure.path.read_bytes()).decode()
        plots.append(f'<figure id="{_e(figure.path.stem)}"><img alt="{_e(figure.title)}: {_e(", ".join(figure.keys))}" '
                     f'src="data:image/png;base64,{data}"><figcaption>{_e(figure.title)} — '
                     f"{_e(', '.join(figure.keys))}</figcaption></figure>")
    notices = getattr(source.record, "notices", None) or []
    notice_html = "".join(f"<pre>{_e(n.get('body') or n.get('title'))}</pre>" for n in notices[-10:])
    no_metrics = '<p class="muted">This log has no <code>step:N - key:value</code> metric lines.</p>'
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>verl-deploy report: {_e(source.title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style></head>
<body>
<h1>verl-deploy report: {_e(source.title)}</h1>
<p class="muted">written {_e(time.strftime('%Y-%m-%d %H:%M:%S'))} from {len(source.logs)} log(s), {len(history.series.points)} metrics</p>
<h2>Summary</h2>{_summary(history, source)}
<h2>Failure</h2>{_failure(source, diagnoses)}
{_attempts(source)}
<h2>Metrics</h2>{_marks(history)}
{''.join(plots) or no_metrics}
{'<h2>Notices</h2>' + notice_html if notice_html else ''}
<h2>Configuration</h2>{_configuration(source)}
</body></html>
"""
    html_path = out_dir / "report.html"
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = html_path.with_suffix(".html.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(html_path)
    return {"html": str(html_path), "pngs": [str(f.path) for f in figures], "metrics": len(history.series.points),
            "steps": history.step, "failure": next((d.class_id for d in reversed(diagnoses) if d and d.class_id), None),
            "marks": [{"step": m.step, "kind": m.kind, "label": m.label} for m in history.marks if m.kind != "checkpoint"]}
