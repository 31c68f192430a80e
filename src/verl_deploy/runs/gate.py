"""Everything that would stop a launch, found in one pass: `launch --dry-run`, `plan --check`, and `launch` itself.

An agent (or a person) fixing blockers one launch at a time loses a launch per blocker. Here every
gate the launch passes through runs even when an earlier one failed — the host check with the run's
own flags, the rules, the memory estimate, verl's validation, the entry import where the training
runs, SwanLab (host, key, package), the notify URLs, the nodes, the checkpoint directory, the
backend's cluster — and each problem is a finding (level, field, message, fix). `ok` is true only
when the launch would start. The Plan compiled here is the one the launch confirms and starts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from verl_deploy.backends.protocol import Where
from verl_deploy.backends.registry import UnknownBackend, backend_class, choose, listed, runs_here
from verl_deploy.findings import Finding, UserError, error, info, warning
from verl_deploy.compiler import Plan
from verl_deploy.pipeline import Prepared, prepare, prepare_spec
from verl_deploy.runs.ckptlock import live_users
from verl_deploy.runs.request import LaunchRequest
from verl_deploy.verify import VerifyResult, findings_for, verify_on_ray, verify_plan


@dataclass
class Gate:
    """What the gates found: the spec that would be launched (when it resolves), the check, every finding."""

    prepared: Optional[Prepared] = None
    checked: Any = None  # preflight CheckResult
    chosen: Optional[str] = None  # the backend's kind
    backend_options: dict = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    verified: Any = None  # verify.VerifyResult

    @property
    def blockers(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def ok(self) -> bool:
        return self.prepared is not None and self.prepared.plan is not None and not self.blockers

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "warning"]

    def ordered(self) -> list[Finding]:
        """Errors first (what blocks), then warnings, then notes; each group in the order the gates ran."""
        rank = {"error": 0, "warning": 1, "info": 2}
        return sorted(self.findings, key=lambda f: rank.get(f.level, 3))

    def add(self, found: list[Finding]) -> None:
        seen = {(f.level, f.field, f.message) for f in self.findings}
        for finding in found:
            if (finding.level, finding.field, finding.message) not in seen:
                self.findings.append(finding)
                seen.add((finding.level, finding.field, finding.message))


def _findings_of(exit_from: Callable[[], Any]) -> tuple[Any, list[Finding]]:
    """Run a step that reports by raising UserError: (its value, []) or (None, its findings)."""
    try:
        return exit_from(), []
    except UserError as exc:
        return None, list(exc.findings)


def host_check(flags: dict, config_file: Optional[str], *, search_roots: Optional[list[str]] = None,
               timeout: float = 10.0) -> Any:
    """The preflight check for these flags and config file, with the detected layer it finds itself."""
    from verl_deploy.preflight.run import run_check
    from verl_deploy.sources import resolve

    return run_check(lambda detected: resolve(flags=flags, environ=os.environ, config_file=config_file,
                                              detected=detected),
                     search_roots=search_roots, timeout=timeout)


def gather(request: LaunchRequest, *, announce: Optional[Callable[[str], None]] = None) -> Gate:
    """Every gate of a launch up to the confirmation; nothing here changes the machine."""
    gate = Gate()
    target = request.target
    first = choose(request.backend, ray_address=target.ray_address, container=None)
    flags = dict(request.flags)
    if not runs_here(first):
        flags["head_from_scheduler"] = True  # the job (or the running Ray cluster) gives the head at run time
    gate.add(_notify_findings(list(request.notify)))
    probe_host = request.check and runs_here(first)
    prepared = _prepared(request, flags, probe_host, gate, announce)
    if prepared is None or prepared.plan is None:
        return gate
    if request.estimate:
        gate.prepared = prepared = _with_estimate(prepared, gate)
    if not _backend_gates(request, prepared, probe_host, gate):
        return gate
    spec = prepared.spec
    users = live_users(spec.effective_ckpts_dir)
    if users and not request.force:
        gate.add([error("ckpts_dir", f"run {users[0]} is live and uses {spec.effective_ckpts_dir}: this run would "
                                     "resume from its checkpoints and overwrite them",
                        f"stop it (`verl-deploy stop {users[0]}`), choose another --ckpts-dir, or pass --force")])
    return gate


def _prepared(request: LaunchRequest, flags: dict, probe_host: bool, gate: Gate,
              announce: Optional[Callable[[str], None]]) -> Optional[Prepared]:
    """The spec compiled once: through the host check (which resolves it with what it detects), or from the sources."""
    from verl_deploy.preflight.saved import load_detected

    if probe_host:
        search_roots = list(request.search_roots) if request.search_roots is not None else None
        checked, found = _findings_of(lambda: host_check(flags, request.config_file, search_roots=search_roots))
        gate.add(found)
        if checked is None:
            return None
        gate.checked = checked
        gate.add(checked.findings)
        prepared = prepare_spec(checked.spec, announce=announce)
    else:
        detected = {} if request.ignore_detected else load_detected()[0]
        prepared, found = _findings_of(lambda: prepare(flags=flags, environ=os.environ, config_file=request.config_file,
                                                       detected=detected, announce=announce))
        gate.add(found)
        if prepared is None:
            return None
    gate.add(prepared.findings)
    gate.prepared = prepared
    return prepared


def _backend_gates(request: LaunchRequest, prepared: Prepared, probe_host: bool, gate: Gate) -> bool:
    """The backend's own: its options and cluster, verl's validation where it runs, what else it needs there
    (False: there is no such backend)."""
    spec, plan = prepared.spec, prepared.plan
    assert plan is not None
    chosen = choose(request.backend, ray_address=request.target.ray_address, container=spec.container)
    try:
        kind = backend_class(chosen)
    except UnknownBackend:
        gate.add([error("backend", f"{request.backend!r} is not a backend", f"use --backend {listed()}")])
        return False
    gate.chosen = chosen
    gate.backend_options, found = kind.configure(spec, request.target)
    gate.add(found)
    backend = kind.from_options(gate.backend_options, spec, spec.container, spec.run_dir)
    where = backend.where()
    if request.verify and where is not None:
        gate.verified = _verify(plan, where)
        gate.add(findings_for(gate.verified, plan, required=False))
    gate.add(backend.preflight(plan, verified=gate.verified, probe_host=probe_host,
                               allow_local_checkpoints=request.allow_local_checkpoints))
    return True


def _verify(plan: Plan, where: Where) -> VerifyResult:
    """verl's own validation where the training will run: as a job on its Ray cluster, in its container, or here."""
    if where.ray_address is not None:
        return verify_on_ray(plan, where.ray_address)
    return verify_plan(plan, container=where.container)


def invalid_notify(urls: list[str]) -> list[Finding]:
    """--notify values apprise cannot use (never echoing their secret parts)."""
    from verl_deploy.runs.notify import invalid, target

    found: list[Finding] = []
    for url in urls:
        problem = invalid(url)
        if problem:
            found.append(error("notify", f"--notify {target(url)[:80]!r}: {problem}",
                               "use an apprise URL: json://HOST:PORT/PATH, slack://..., feishu://..., dingtalk://..."))
    return found


def _notify_findings(urls: list[str]) -> list[Finding]:
    from verl_deploy.runs.notify import invalid, target, unreachable

    found: list[Finding] = invalid_notify(urls)
    for url in urls:
        if invalid(url):
            continue
        away = unreachable(url)
        if away:
            found.append(warning("notify", f"--notify {target(url)}: {away}; notices fail until it answers (each "
                                           "result is kept in the run record)", "check the URL's host and port"))
    return found


def _with_estimate(prepared: Prepared, gate: Gate) -> Prepared:
    """When the memory estimate says the plan does not fit, the first attempt has the memory features it needs."""
    from verl_deploy.memory import needed_features

    spec, memory, plan = prepared.spec, prepared.memory, prepared.plan
    if memory is None or memory.fits or plan is None:
        return prepared
    on = {s.name for s in plan.features if s.on}
    add = [name for name in needed_features(memory) if name not in on]
    if not add:
        return prepared
    changed = prepare_spec(spec.with_changes(source="estimate", estimate_features=[*spec.estimate_features, *add]))
    gate.add([info("memory", f"the memory estimate says the plan does not fit: the first attempt adds "
                             f"{', '.join(add)}", "pass --no-estimate to start exactly as planned", area="memory")])
    gate.add(changed.findings)
    return changed if changed.plan is not None else prepared
