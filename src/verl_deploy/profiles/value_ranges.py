"""Ranges of verl config values that verl itself does not check but the rollout engine does at start.

verl's rollout dataclasses (verl/workers/config/rollout.py, 0.6.1 .. 0.9.0: `temperature: float = 1.0`,
`top_k: int = -1`, `top_p: float = 1.0`, also under `val_kwargs`) declare the types and no range; the
values go to vLLM's SamplingParams, whose `_verify_args` refuses them when the first batch is
generated, after the model has loaded. The same keys, checked here before launch.
"""

from __future__ import annotations

import math

ROLLOUT_SECTIONS = ("actor_rollout_ref.rollout.", "actor_rollout_ref.rollout.val_kwargs.")


def _top_p(value: float) -> str | None:
    return None if 0.0 < value <= 1.0 else "must be in (0, 1] (vLLM: top_p must be in (0, 1])"


def _top_k(value: float) -> str | None:
    return None if value >= -1 else "must be -1 or 0 (off) or at least 1 (vLLM: top_k must be 0 (disable), or at least 1)"


def _temperature(value: float) -> str | None:
    return None if value >= 0.0 else "must be non-negative (vLLM: temperature must be non-negative)"


CHECKS = {"top_p": _top_p, "top_k": _top_k, "temperature": _temperature}


def out_of_range(key: str, value: object) -> str | None:
    """Why `value` is out of the range the rollout engine accepts for `key`, or None."""
    section, _, leaf = key.rpartition(".")
    check = CHECKS.get(leaf)
    if check is None or section + "." not in ROLLOUT_SECTIONS:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None  # the type check speaks for other values
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    return check(value)
