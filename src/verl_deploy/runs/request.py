"""`LaunchRequest`: a launch as the user asked for it, built by the CLI from its options (or by any caller).

It holds where the spec comes from (the flags, a config file), where it runs (the backend and its
target), which gates run, and how the run is watched; runs/gate.py and runs/launch.py read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from verl_deploy.backends.protocol import Target


@dataclass(frozen=True)
class LaunchRequest:
    """A launch as asked: where the spec comes from, where it runs, which checks, how it is watched."""

    flags: dict[str, Any] = field(default_factory=dict)  # spec fields given as flags (the sources' flag layer)
    config_file: Optional[str] = None
    ignore_detected: bool = False
    backend: str = "auto"  # a kind of backends/registry.py, or auto
    target: Target = field(default_factory=Target)  # the Ray job server, --job-env, --reuse-ray, scheduler flags
    check: bool = True  # the host check first (--skip-check: not)
    search_roots: Optional[tuple[str, ...]] = None
    estimate: bool = True  # the first attempt gets the memory features the estimate says it needs
    verify: bool = True  # verl's own validation where the training runs
    force: bool = False  # even though a live run uses the checkpoint directory
    allow_local_checkpoints: bool = False
    notify: tuple[str, ...] = ()
    stall_seconds: float = 600.0
    preempt_oom: bool = True  # restart at a checkpoint before a predicted OOM with the feature that prevents it
    start_timeout: float = 180.0
    rehearse: bool = False
    rehearse_only: bool = False
    dry_run: bool = False  # the gates only: nothing is confirmed, written or started
