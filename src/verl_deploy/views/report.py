"""`verl-deploy report`: one self-contained HTML page (SVG plots inline) and the SVGs, for a run or any verl log.

The page holds: what ran and how far it got, verl's validation results, the failure with cause
and fix, the attempts (OOM retries, resumes) also marked on every plot's step axis, one curve per
logged metric in a grid as wide as the window, grouped by what it measures, the notices, and the
configuration (as `plan` shows it, with the Hydra overrides, or the config verl printed at the
start of a log from elsewhere). Nothing outside the page is loaded: it opens offline and can be mailed.
"""

from __future__ import annotations

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
    config_rows: list[tuple[str, str]] = field(default_factory=list)  # raw spec rows (a record plan cannot read)
    config_sections: list[tuple[str, list[tuple[str, str, str]]]] = field(default_factory=list)  # as `plan` shows
    overrides: list[str] = field(default_factory=list)
    verl_config: str | None = None


def from_run(record) -> Source:
    spec = {k: v for k, v in record.spec.items() if k not in ("sources", "swanlab_api_key")}
    rows = [(k, json.dumps(v) if isinstance(v, (list, dict)) else str(v)) for k, v in spec.items()]
    overrides: list[str] = []
    superseded: dict = {}
    if record.current:
        try:
            plan = read_json(record.directory / f"attempt-{record.current.n}" / "scripts" / "plan.json", MAX_PLAN_BYTES)
            overrides = [str(o.get("text", o)) if isinstance(o, dict) else str(o) for o in plan.get("overrides", [])]
            superseded = plan.get("superseded") if isinstance(plan.get("superseded"), dict) else {}
        except (OSError, ValueError, AttributeError):
            overrides = []
    from verl_deploy.views.report_config import config_rows

    logs = [(a.n, a.log, a.reason, a.resumed_from_step) for a in record.attempts if a.log]
    source = Source(f"run {record.id}", logs, record, config_rows=rows, overrides=overrides,
                    config_sections=config_rows(record.spec, superseded))
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
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5rem auto;max-width:2400px;color:#222;padding:0 1.5rem}
h1{font-size:1.5rem;margin-bottom:.2rem} h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;font-size:.9rem} td,th{padding:.2rem .7rem;text-align:left;border-bottom:1px solid #eee;vertical-align:top}
.state-succeeded{color:#1a7f37} .state-failed{color:#cf222e} .state-stopped,.state-running{color:#9a6700}
.failure{border-left:4px solid #cf222e;background:#fff5f5;padding:.6rem 1rem} .warning{border-left-color:#d4a72c;background:#fffbea}
pre{background:#f6f8fa;padding:.6rem;overflow-x:auto;font-size:.8rem;white-space:pre-wrap;word-break:break-all}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(380px,1fr));gap:.8rem}
.plots figure{margin:0;border:1px solid #eee;border-radius:4px;padding:.2rem} .plots svg{width:100%;height:auto;display:block}
h3{font-size:1rem;margin:1.4rem 0 .5rem} .legend{display:flex;gap:1.6rem;align-items:center;flex-wrap:wrap}
.legend svg{vertical-align:middle} .muted{color:#666} .config th{font-weight:normal;color:#444} .config td.src{color:#888}
.config h3{margin-top:1rem} .columns{columns:2 520px;column-gap:2rem} .columns>div{break-inside:avoid}
"""


def _summary(history: RunHistory, source: Source) -> str:
    record = source.record
    state = getattr(record, "state", None)
    step = max(history.step, getattr(record, "step", 0) or 0)
    total = getattr(record, "total_steps", None) or history.total_steps
    rows = [("state", f'<span class="state-{_e(state)}">{_e(state)}</span>')] if state else []
    rows += [("step", f"{step} of {total}" if total else str(step)),
            ("SwanLab", _link(getattr(record, "swanlab_url", None) or history.swanlab_url))]
    names = {"wandb": "Weights & Biases", "mlflow": "MLflow", "clearml": "ClearML", "tensorboard": "TensorBoard log"}
    rows += [(names.get(tracker, tracker), _link(url)) for tracker, url in history.tracker_links.items()]
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
    rows += _validation_rows(history, record)
    return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _validation_rows(history: RunHistory, record) -> list[tuple[str, str]]:
    """verl's `Final validation metrics` when training got there, else the newest val-core/val-aux values."""
    from verl_deploy.watch.describe import short_key

    final = history.final_validation or ((getattr(record, "validation", None) or {}).get("metrics")
                                         if (getattr(record, "validation", None) or {}).get("final") else None)
    if final:
        values, when = final, "final validation"
    else:
        keys = [k for k in history.series.points if k.startswith(("val-core/", "val-aux/"))]
        if not keys:
            return []
        newest = max(history.series.points[k][-1][0] for k in keys)
        values = {k: history.series.points[k][-1][1] for k in keys if history.series.points[k][-1][0] == newest}
        when = f"validation at step {newest}"
    ordered = sorted(values, key=lambda k: (not k.startswith("val-core/"), k))
    return [(f"{when}: {short_key(k)}", f"<b>{_e(number(values[k]))}</b>" if k.startswith("val-core/")
             else _e(number(values[k]))) for k in ordered[:12]]


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
        out.append(_failure_block(d.class_id, d.cause, d.fix, None, [(h.line, h.text) for h in d.lines],
                                  "survived" if d.survived else d.severity, ""))
    recovered = [_recovered(attempt, d) for attempt, d in zip((getattr(record, "attempts", None) or [])[:-1],
                                                                diagnoses[:-1])]
    recovered = [item for item in recovered if item]
    if recovered:
        out.append("<p>Recovered by a new attempt (see Attempts):</p><ul>" + "".join(recovered) + "</ul>")
    return "\n".join(out) or '<p class="muted">No failure found in the log.</p>'


def _recovered(attempt, d) -> str:
    """One earlier attempt's end, as the supervisor recorded it, else as its log shows it ('' when neither names one)."""
    ended = getattr(attempt, "failure", None) or {}
    name = ended.get("class") or (d.class_id if d is not None else None)
    if not name:
        return ""
    line = (ended.get("lines") or [{}])[0].get("text") or (d.lines[0].text if d is not None and d.lines else "")
    step = d.step if d is not None else "?"
    return f"<li>attempt {attempt.n} at step {step}: <b>{_e(name)}</b> — {_e(line[:300])}</li>"


def _failure_class(source: Source, diagnoses: list) -> str | None:
    """The run's failure as its record says, else the last attempt whose log shows one (a warning or a line the
    scripts survived is none)."""
    recorded = getattr(source.record, "failure", None) or {}
    return recorded.get("class") or next((d.class_id for d in reversed(diagnoses) if d and d.failed), None)


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


LEGEND = {"attempt": "a new attempt starts (OOM retry, resume)", "resume": "verl resumed from a checkpoint",
          "failure": "the training printed a failure"}


def _sample(kind: str) -> str:
    """The mark as the plots draw it: its line and its marker, in a small inline SVG."""
    from verl_deploy.views.curves import MARK_STYLE

    colour, style, marker, _ = MARK_STYLE[kind]
    dash = {"attempt": "5,3", "resume": "1,2"}.get(kind, "")
    shape = {"D": '<rect x="11" y="5" width="6" height="6" transform="rotate(45 14 8)"', "^": '<path d="M14 4 L18 11 L10 11 Z"',
             "X": '<path d="M10 4 L18 12 M18 4 L10 12" stroke-width="2.5" stroke="' + colour + '"'}[marker]
    return (f'<svg width="28" height="16" aria-hidden="true"><line x1="14" y1="0" x2="14" y2="16" stroke="{colour}" '
            f'stroke-width="1.5" stroke-dasharray="{dash}"/>{shape} fill="{colour}"/></svg>')


def _marks(history: RunHistory) -> str:
    """The legend of what the plots draw, and every mark as a line (warnings and survived lines are listed, not drawn:
    nothing failed there)."""
    listed = sorted((m for m in history.marks if m.kind in LEGEND or m.kind in ("warning", "survived")),
                    key=lambda m: m.step)
    if not listed:
        return ""
    kinds = [k for k in LEGEND if any(m.kind == k for m in listed)]
    legend = "".join(f'<span class="mark-{k}">{_sample(k)} {_e(k)}: {_e(LEGEND[k])}</span>' for k in kinds)
    items = "".join(f'<li class="mark-{_e(m.kind)}">step {m.step}: {_e(m.label)}</li>' for m in listed)
    return (f'<p class="legend">{legend}</p>' if legend else "") + f"<ul>{items}</ul>"


def _plots(figures: list) -> str:
    """One grid of plots per group, each plot an inline SVG (its text is text: searchable, copyable)."""
    out: list[str] = []
    group = None
    for figure in figures:
        if figure.group != group:
            if group is not None:
                out.append("</div>")
            group = figure.group
            out.append(f'<h3 id="{_e(group)}">{_e(figure.title)}</h3><div class="plots">')
        svg = re.sub(r"<metadata>.*?</metadata>\s*", "", figure.svg[figure.svg.find("<svg"):], count=1, flags=re.S)
        out.append(f'<figure id="{_e(figure.path.stem)}" data-key="{_e(figure.key)}" aria-label="{_e(figure.key)}">'
                   f"{svg}</figure>")
    if group is not None:
        out.append("</div>")
    return "".join(out)


def _configuration(source: Source) -> str:
    parts = []
    if source.config_sections:
        blocks = "".join(f"<div><h3>{_e(title)}</h3><table>" + "".join(
            f'<tr><th>{_e(name)}</th><td>{_e(value)}</td><td class="src">{_e(origin)}</td></tr>'
            for name, value, origin in rows) + "</table></div>" for title, rows in source.config_sections)
        parts.append(f'<div class="config columns">{blocks}</div>')
    elif source.config_rows:
        parts.append("<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in source.config_rows
                                         if v not in ("None", "[]", "{}", "")) + "</table>")
    if source.overrides:
        parts.append("<h3>Hydra overrides</h3><pre>" + _e("\n".join(source.overrides)) + "</pre>")
    if source.verl_config:
        parts.append("<h3>Configuration as verl printed it</h3><pre>" + _e(source.verl_config) + "</pre>")
    return "\n".join(parts) or '<p class="muted">The log holds no configuration dump.</p>'


def build(source: Source, out_dir: Path) -> dict:
    """Read the logs, draw the curves, write report.html; returns what was written."""
    from verl_deploy.views.curves import GROUPS, draw

    history, diagnoses = read_logs(source.logs)
    if history.log_problems:  # before anything is written: a report of a log we could not read would mislead
        raise UnreadableFile("; ".join(history.log_problems))
    ours = re.compile(r"^(?:%s)(?:-\d+)?\.(?:svg|png)$" % "|".join(g for g, _, _ in GROUPS))
    for old in out_dir.iterdir() if out_dir.is_dir() else []:  # plots of an earlier report (PNGs of older versions)
        if ours.match(old.name) and old.is_file():
            old.unlink()
    figures = draw(history.series, history.marks, out_dir)
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
<h2>{"Failure" if _failure_class(source, diagnoses) else "Failure: none"}</h2>{_failure(source, diagnoses)}
{_attempts(source)}
<h2>Metrics</h2>{_marks(history)}
{_plots(figures) or no_metrics}
{'<h2>Notices</h2>' + notice_html if notice_html else ''}
<h2>Configuration</h2>{_configuration(source)}
</body></html>
"""
    html_path = out_dir / "report.html"
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = html_path.with_suffix(".html.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(html_path)
    return {"html": str(html_path), "plots": [str(f.path) for f in figures], "metrics": len(history.series.points),
            "steps": history.step, "failure": _failure_class(source, diagnoses),
            "validation": {"final": bool(history.final_validation), "metrics": dict(history.final_validation)}
            if history.final_validation else None,
            "marks": [{"step": m.step, "kind": m.kind, "label": m.label, "attempt": m.attempt, "line": m.line}
                      for m in history.marks if m.kind != "checkpoint"]}
