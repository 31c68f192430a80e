"""Everything that would stop `launch`, found in one pass: `launch --dry-run`, `plan --check`, and `launch` itself.

An agent (or a person) fixing blockers one launch at a time loses a launch per blocker. Here every
gate the launch passes through runs even when an earlier one failed — the host check with the run's
own flags, the rules, the memory estimate, verl's validation, the entry import where the training
runs, SwanLab (host, key, package), the notify URLs, the nodes, the checkpoint directory, the
backend's cluster — and each problem is a finding (level, field, message, fix). `ok` is true only
when the launch would start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import typer

from verl_deploy.findings import Finding, UserError, error, info, warning


@dataclass
class Gate:
    """What the gates found: the spec that would be launched (when it resolves), the check, every finding."""

    prepared: Any = None  # pipeline.Prepared
    checked: Any = None  # preflight CheckResult
    chosen: Optional[str] = None  # the backend
    backend_options: dict = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    verified: Any = None  # verify.VerifyResult

    @property
    def blockers(self) -> list[Finding]:
        return [f for f in self.findings if f.level == "error"]

    @property
    def ok(self) -> bool:
        return self.prepared is not None and self.prepared.plan is not None and not self.blockers

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


def gather(flags: dict, config_file: Optional[str], options: dict, *, backend: str, ray_address: Optional[str],
           job_env: list[str], notify: list[str], skip_check: bool, no_estimate: bool, verify: bool,
           search_root: Optional[list[str]], force: bool, reuse_ray: bool,
           announce: Optional[Callable[[str], None]] = None, allow_local_checkpoints: bool = False) -> Gate:
    """Every gate of `launch` up to the confirmation; nothing here changes the machine."""
    from verl_deploy.cli.run_common import check_with
    from verl_deploy.pipeline import prepare, prepare_spec
    from verl_deploy.preflight.saved import load_detected

    gate = Gate()
    if backend in ("slurm", "kuberay", "ray") or (backend == "auto" and ray_address):
        flags["head_from_scheduler"] = True  # the job (or the running Ray cluster) gives the head at run time
    gate.add(_notify_findings(notify))
    runs_check = not skip_check and backend not in ("ray", "slurm", "kuberay") and not (backend == "auto" and ray_address)
    if runs_check:
        checked, found = _findings_of(lambda: check_with(flags, config_file, search_roots=search_root))
        gate.add(found)
        if checked is None:
            return gate
        gate.checked = checked
        gate.add(checked.findings)
        prepared = prepare_spec(checked.spec, announce=announce)
    else:
        detected = {} if options.get("ignore_detected") else load_detected()[0]
        prepared, found = _findings_of(lambda: prepare(flags=flags, environ=os.environ, config_file=config_file,
                                                       detected=detected, announce=announce))
        gate.add(found)
        if prepared is None:
            return gate
    gate.add(prepared.findings)
    gate.prepared = prepared
    if prepared.plan is None:
        return gate
    if not no_estimate:
        gate.prepared = _with_estimate(prepared, gate)
    spec = gate.prepared.spec
    chosen = backend if backend != "auto" else ("ray" if ray_address else "docker" if spec.container else "local")
    if chosen not in ("local", "docker", "ray", "slurm", "kuberay"):
        gate.add([error("backend", f"{backend!r} is not a backend", "use --backend local, docker, ray, slurm or kuberay")])
        return gate
    gate.chosen = chosen
    if chosen == "docker" and not spec.container:
        gate.add([error("container", "the docker backend needs a container", "pass --container NAME")])
    gate.backend_options = {"reuse_ray": True} if reuse_ray else {}
    if chosen == "ray":
        gate.backend_options = _ray_gate(spec, ray_address, job_env, gate)
    elif chosen in ("slurm", "kuberay"):
        gate.backend_options = _scheduler_gate(spec, chosen, options, gate)
    if verify and chosen in ("local", "docker", "ray"):
        _verify_gate(gate, chosen, ray_address)
    if chosen in ("local", "docker"):
        if runs_check:  # a probe of where the training runs, like the host check (--skip-check skips both)
            _entry_gate(gate, chosen)
        _swanlab_gate(gate, chosen, host_checked=runs_check)
    if len(spec.nodes) > 1 and chosen in ("local", "docker"):
        from verl_deploy.backends.nodes import check_nodes

        node_findings = check_nodes(spec)
        gate.add(node_findings)
        if not node_findings:  # the nodes answer: do they share the checkpoint directory (resume needs it)?
            from verl_deploy.preflight.shared_storage import storage_area

            gate.add(storage_area(spec, allow_local_checkpoints).findings())
    from verl_deploy.runs.ckptlock import live_users

    users = live_users(spec.effective_ckpts_dir)
    if users and not force:
        gate.add([error("ckpts_dir", f"run {users[0]} is live and uses {spec.effective_ckpts_dir}: this run would "
                                     "resume from its checkpoints and overwrite them",
                        f"stop it (`verl-deploy stop {users[0]}`), choose another --ckpts-dir, or pass --force")])
    return gate



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


def _with_estimate(prepared, gate: Gate):
    """When the memory estimate says the plan does not fit, the first attempt has the memory features it needs."""
    from verl_deploy.memory import needed_features
    from verl_deploy.pipeline import prepare_spec

    spec, memory = prepared.spec, prepared.memory
    if memory is None or memory.fits:
        return prepared
    on = {s.name for s in prepared.plan.features if s.on}
    add = [name for name in needed_features(memory) if name not in on]
    if not add:
        return prepared
    changed = prepare_spec(spec.with_changes(source="estimate", estimate_features=[*spec.estimate_features, *add]))
    gate.add([info("memory", f"the memory estimate says the plan does not fit: the first attempt adds "
                             f"{', '.join(add)}", "pass --no-estimate to start exactly as planned", area="memory")])
    gate.add(changed.findings)
    return changed if changed.plan is not None else prepared


def _ray_gate(spec, address: Optional[str], job_env: list[str], gate: Gate) -> dict:
    from verl_deploy.backends.raycluster import check_cluster, cluster_nodes, cluster_version
    from verl_deploy.rayauth import AuthError

    if not address:
        gate.add([error("ray_address", "the ray backend needs the cluster's job server",
                        "pass --ray-address http://HEAD:8265 (or set RAY_API_SERVER_ADDRESS)")])
        return {}
    env: dict[str, str] = {}
    for item in job_env:
        name, sep, value = item.partition("=")
        if name == "SWANLAB_API_KEY":
            gate.add([error("job-env", "the SwanLab key must not go into the job's runtime environment (the "
                                       "dashboard shows it)", "log in on the nodes (`verl-deploy swanlab login`) instead")])
            continue
        if name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
            gate.add([error("job-env", f"{name} must not go into the job's runtime environment (the dashboard "
                                       "shows it)", "the cluster's own processes have its token; verl-deploy sends "
                                                    "yours in a request header")])
            continue
        env[name] = value if sep else os.environ.get(name, "")
    try:
        nodes = cluster_nodes(address)
    except AuthError as exc:  # one line naming the variables to set, never a bare 401
        gate.add([error("ray_address", exc.problem, exc.fix)])
        return {"address": address, "env": env}
    except (OSError, ValueError) as exc:
        gate.add([error("ray_address", f"{address} does not answer as a Ray job server: {exc}",
                        "check the address and that the head runs the dashboard (port 8265)")])
        return {"address": address, "env": env}
    try:
        import ray

        local_version = ray.__version__
    except ImportError:
        gate.add([error("backend", "the ray backend needs Ray here", "pip install 'verl-deploy[ray]'")])
        return {"address": address, "env": env}
    gate.add(check_cluster(spec, nodes, cluster_version(address), local_version))
    return {"address": address, "env": env}


def _scheduler_gate(spec, chosen: str, options: dict, gate: Gate) -> dict:
    from verl_deploy.cli.sched_options import scheduler_from

    try:
        sched = scheduler_from(options)
    except UserError as exc:
        gate.add(exc.findings)
        return {}
    if chosen == "slurm":
        from verl_deploy.backends.slurm import SlurmError, check_partition

        try:
            gate.add(check_partition(sched.partition, sched.gres(spec.device), spec.nnodes, len(spec.devices)))
        except SlurmError as exc:
            gate.add([error("backend", str(exc), "run it where sbatch, sinfo and scontrol work")])
    else:
        from verl_deploy.backends.kuberay import KubeError, check_cluster

        try:
            problem = check_cluster(sched.namespace)
        except KubeError as exc:
            problem = str(exc)
        if problem:
            gate.add([error("backend", problem, "see the README's KubeRay section")])
    return {"scheduler": sched.model_dump(mode="json")}


def _verify_gate(gate: Gate, chosen: str, ray_address: Optional[str]) -> None:
    from verl_deploy.verify import findings_for, verify_on_ray, verify_plan

    plan, spec = gate.prepared.plan, gate.prepared.spec
    verified = (verify_on_ray(plan, ray_address or "") if chosen == "ray" else
                verify_plan(plan, container=spec.container if chosen == "docker" else None))
    gate.verified = verified
    gate.add(findings_for(verified, plan, required=False))


def _entry_gate(gate: Gate, chosen: str) -> None:
    """start_verl.sh's own entry import, run now the way it will run (skipped when verify already imported it)."""
    from verl_deploy.verify.entry_import import entry_findings

    done = gate.verified is not None and any(s.get("step") in ("locate_entry", "import_entry")
                                             for s in gate.verified.steps)
    if not done:
        gate.add(entry_findings(gate.prepared.plan, container=gate.prepared.spec.container if chosen == "docker" else None))


def _swanlab_gate(gate: Gate, chosen: str, *, host_checked: bool) -> None:
    """The login launch does: the host answers, a key is there, swanlab imports where the training runs."""
    from verl_deploy.swanlab_setup import preflight_findings

    spec = gate.prepared.spec
    if spec.swanlab_on and spec.swanlab_mode == "cloud":
        gate.add(preflight_findings(spec, check_host=not host_checked))


def document(gate: Gate, *, dry_run: bool) -> dict:
    """The one JSON document of `launch --dry-run` / `plan --check` (and of a refused launch)."""
    from verl_deploy.render import plan_document

    data: dict[str, Any] = {}
    prepared = gate.prepared
    if prepared is not None and prepared.plan is not None:
        data = plan_document(prepared.plan, gate.findings, prepared.checked_against, prepared.memory)
        data["command"] = ["python3", *prepared.plan.argv()]
    data["ok"] = gate.ok
    data["dry_run"] = dry_run
    data["backend"] = gate.chosen
    data["findings"] = [f.as_dict() for f in gate.ordered()]
    data["blockers"] = [f.as_dict() for f in gate.blockers]
    if gate.checked is not None:
        data["check"] = gate.checked.as_dict()
    if gate.verified is not None:
        data["verify"] = gate.verified.as_dict()
    return data


def report(gate: Gate, *, as_json: bool, dry_run: bool) -> None:
    """Print the gate's outcome: one JSON document, or one line per finding and a verdict."""
    from verl_deploy.cli.output import console, print_findings, print_json

    if as_json:
        print_json(document(gate, dry_run=dry_run))
        return
    print_findings([f for f in gate.ordered() if dry_run or f.level != "info"], stderr=not dry_run)
    out = console(stderr=not dry_run)
    count = len(gate.blockers)
    if gate.ok:
        out.print(f"[bold green]launch would start[/] ({gate.chosen} backend)" if dry_run else "")
    else:
        out.print(f"[bold red]launch {'would be' if dry_run else 'was'} refused[/]: {count} blocker(s), listed above "
                  "(each names the field and the fix)", soft_wrap=True)


def refuse(gate: Gate, *, as_json: bool) -> "typer.Exit":
    report(gate, as_json=as_json, dry_run=False)
    return typer.Exit(code=1)
