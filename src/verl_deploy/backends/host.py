"""What the backends whose training runs here (local, docker) share: this host, a container on it, and the
other nodes of `--nodes`, reached over SSH with the user's own keys.

Before a launch they run what the training would run first where it runs (verl's validation, the entry
import, the SwanLab login's checks) and ask the other nodes; at start they start the workers and at the end
stop them; after a crash they end what an attempt left on each of them (backends/leftovers.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from verl_deploy.backends.handle import Handle
from verl_deploy.backends.protocol import BackendError, DetachedBackend, Say, Target, Where
from verl_deploy.findings import Finding

if TYPE_CHECKING:
    from verl_deploy.backends.leftovers import Freed
    from verl_deploy.compiler import Plan
    from verl_deploy.spec import RunSpec


class LoginFailed(BackendError):
    failure_class = "swanlab_login_failed"


class HostBackend(DetachedBackend):
    runs_here: ClassVar[bool] = True
    container: str | None = None  # the container the training runs in (docker), else None: on this host

    @classmethod
    def configure(cls, spec: RunSpec, target: Target) -> tuple[dict, list[Finding]]:
        return ({"reuse_ray": True} if target.reuse_ray else {}), []

    def where(self) -> Where:
        return Where(container=self.container or None)

    def preflight(self, plan: Plan, *, verified: Any, probe_host: bool, allow_local_checkpoints: bool) -> list[Finding]:
        found: list[Finding] = []
        if probe_host:  # a probe of where the training runs, like the host check (--skip-check skips both)
            found += self._entry_import(plan, verified)
        found += self._swanlab(plan.spec, host_checked=probe_host)
        if len(plan.spec.nodes) > 1:
            found += self._nodes(plan.spec, allow_local_checkpoints)
        return found

    def _entry_import(self, plan: Plan, verified: Any) -> list[Finding]:
        """start_verl.sh's own entry import, run now the way it will run (skipped when verify already imported it)."""
        from verl_deploy.verify.entry_import import entry_findings

        done = verified is not None and any(s.get("step") in ("locate_entry", "import_entry") for s in verified.steps)
        return [] if done else entry_findings(plan, container=self.container or None)

    @staticmethod
    def _swanlab(spec: RunSpec, *, host_checked: bool) -> list[Finding]:
        """What `login` needs: the host answers, a key is there, swanlab imports where the training runs."""
        from verl_deploy.swanlab_setup import preflight_findings

        if spec.swanlab_on and spec.swanlab_mode == "cloud":
            return preflight_findings(spec, check_host=not host_checked)
        return []

    @staticmethod
    def _nodes(spec: RunSpec, allow_local_checkpoints: bool) -> list[Finding]:
        """The other nodes answer; then: do they share the checkpoint directory (resume needs it)?"""
        from verl_deploy.backends.nodes import check_nodes
        from verl_deploy.preflight.shared_storage import storage_area

        found = check_nodes(spec)
        return found or storage_area(spec, allow_local_checkpoints).findings()

    def login(self, spec: RunSpec, say: Say) -> None:
        """SwanLab's cloud login where the training runs, with the key on stdin (swanlab_setup.py)."""
        if not (spec.swanlab_on and spec.swanlab_api_key is not None and spec.swanlab_mode == "cloud"):
            return
        from verl_deploy.swanlab_setup import SwanLabSetupError, setup_swanlab

        try:
            for step in setup_swanlab(spec, spec.swanlab_api_key.get_secret_value()).steps:
                say(f"swanlab: {step}")
        except SwanLabSetupError as exc:
            raise LoginFailed(str(exc), exc.fix) from None

    def start_nodes(self, spec: RunSpec, scripts_dir: Path, handle: Handle) -> None:
        if len(spec.nodes) < 2:
            return
        from verl_deploy.backends.nodes import start_workers

        try:
            handle.workers = start_workers(spec, str(scripts_dir))
        except Exception:
            self.stop(handle)
            raise

    def stop(self, handle: Handle) -> None:
        raise NotImplementedError

    def end_nodes(self, handle: Handle) -> None:
        if handle.workers:
            from verl_deploy.backends.nodes import stop_workers

            stop_workers(handle.workers)

    def clean(self, run_id: str, handles: list[Handle], grace: float) -> tuple[list[Freed], list[str]]:
        """Each attempt's leftovers here, in its container, and on its workers, found by the marks it recorded."""
        from verl_deploy.backends.leftovers import end_local, in_container, on_worker

        freed: list[Freed] = []
        notes: list[str] = []
        for handle in handles:
            freed += end_local(handle, grace)
            if handle.container:
                freed += in_container(handle, notes)
            for worker in handle.workers:
                freed += on_worker(worker, notes)
        return freed, notes
