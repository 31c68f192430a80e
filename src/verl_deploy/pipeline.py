"""The pipeline up to the scripts: sources -> RunSpec -> checks -> Plan -> verl config check.

Commands (`plan`, `generate`, later `launch`) call ``prepare`` and decide what to do with
the result; nothing here prints or writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from verl_deploy.checks import Facts, read_model_facts, run_checks, sort_findings
from verl_deploy.compiler import Plan, compile_plan, without_effect
from verl_deploy.findings import Finding, has_errors, info
from verl_deploy.profiles import Profile, profile_for_spec
from verl_deploy.rules import run_rules
from verl_deploy.sources import resolve
from verl_deploy.spec import RunSpec


@dataclass
class Prepared:
    spec: RunSpec
    plan: Plan | None
    findings: list[Finding] = field(default_factory=list)
    checked_against: str | None = None
    memory: Any = None  # memory.MemoryEstimate, or None with memory_note saying why
    memory_note: str = ""

    @property
    def ok(self) -> bool:
        return not has_errors(self.findings)


def prepare_spec(spec: RunSpec, *, facts: Facts | None = None, check_verl: bool = True,
                 announce: Callable[[str], None] | None = None) -> Prepared:
    """Check a resolved spec, compile it and check the overrides against verl's real config."""
    profile, stand_in = profile_for_spec(spec)
    facts = facts if facts is not None else read_model_facts(spec.model_path)
    findings = run_checks(spec, profile, facts) + ([stand_in] if stand_in else [])
    if not isinstance(profile, Profile):
        return Prepared(spec, None, sort_findings(findings))
    from verl_deploy.profiles.modes import refusal

    refused = refusal(spec)
    if refused is not None:  # the release lacks the mode: one line, no plan
        return Prepared(spec, None, [refused])
    plan = compile_plan(spec, profile)
    from verl_deploy.override_owners import override_findings

    findings += override_findings(plan)  # an override must not take a key away from a field or feature
    findings += without_effect(spec, profile, plan.features)  # a feature asked for that this release cannot send
    from verl_deploy.trackers import tracker_findings

    findings += tracker_findings(spec)  # each --logger tracker: in this release, its environment there
    findings += run_rules(plan, facts)  # verl's runtime assertions, per release, on the values sent
    memory, memory_note = estimate_memory(plan)
    from verl_deploy.memory.findings import memory_findings

    findings += memory_findings(memory, memory_note)
    from verl_deploy.profiles.recipes import plan_notes

    findings += [info("verl_version", note, area="verl") for note in plan_notes(profile, plan.mechanism, spec.verl_version)]
    from verl_deploy.profiles.modes import what_runs

    findings.append(info("mode", what_runs(spec, plan), area="verl"))
    checked_against = None
    if check_verl:
        from verl_deploy.verlconfig.validate import validate_plan

        verl_findings, checked_against = validate_plan(plan, announce=announce)
        findings += verl_findings
    return Prepared(spec, plan, sort_findings(findings), checked_against, memory, memory_note)


def estimate_memory(plan: Plan):
    """The memory estimate of a compiled plan; a fault in it is a note, never a crash of the command."""
    from verl_deploy.memory import estimate_plan

    try:
        return estimate_plan(plan)
    except Exception as exc:  # the estimate is advice: a bug in it must not stop plan or launch
        return None, f"the estimate failed ({type(exc).__name__}: {exc})"


def prepare(*, flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None,
            config_file: str | None = None, detected: Mapping[str, Any] | None = None,
            check_verl: bool = True, announce: Callable[[str], None] | None = None) -> Prepared:
    """Resolve every source into a spec and prepare it. Raises UserError for unresolvable input."""
    spec = resolve(flags=flags, environ=environ, config_file=config_file, detected=detected)
    return prepare_spec(spec, check_verl=check_verl, announce=announce)
