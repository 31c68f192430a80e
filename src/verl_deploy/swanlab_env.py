"""The environment the swanlab package itself reads, derived from the one host the user gives.

verl's tracker (verl/utils/tracking.py, identical at v0.7.0, v0.8.0 and v0.9.0) reads only
SWANLAB_API_KEY, SWANLAB_LOG_DIR and SWANLAB_MODE, then calls ``swanlab.login(key)`` and
``swanlab.init(project=..., experiment_name=..., logdir=..., mode=...)``; where the key goes is
decided by swanlab's own settings, from these names (read in each version's code):

- swanlab 0.5.x-0.7.x (``swanlab/env.py``, ``package.py``): ``SWANLAB_API_HOST`` is the API base
  *with* ``/api`` (default ``https://api.swanlab.cn/api``), ``SWANLAB_WEB_HOST`` the web page,
  ``SWANLAB_WORKSPACE``, ``SWANLAB_LOG_DIR``, ``SWANLAB_MODE``.
- swanlab 0.8.x-0.10.x (pydantic-settings, prefix ``SWANLAB_``): ``SWANLAB_API_HOST`` and
  ``SWANLAB_WEB_HOST`` pass through ``nrc.fmt``, which keeps scheme, host and port only, so the
  ``/api`` suffix is dropped and the same value works; ``SWANLAB_WORKSPACE`` and
  ``SWANLAB_LOG_DIR`` are read by its compat layer. ``SWANLAB_PROJECT`` must NOT be set: the
  ``project`` field is a nested model and ``Settings()`` fails to parse it (0.10.3), so importing
  swanlab inside verl would crash. verl passes the project name to ``swanlab.init`` anyway.
- ``SWANLAB_HOST`` (the seeds' name) is read by no swanlab version: it is our input, not an export.

For a private server (the seeds' ``http://192.168.1.100:8000``) web and API share the host, the
API under ``/api``. The public cloud keeps swanlab's own defaults (nothing is exported).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from verl_deploy.spec import RunSpec

PUBLIC_HOSTS = frozenset({"swanlab.cn", "api.swanlab.cn", "www.swanlab.cn"})


def base_url(host: str) -> str:
    """scheme://host[:port] of what the user typed (a path such as /api or a trailing / is dropped)."""
    text = host.strip()
    parts = urlsplit(text if "://" in text else f"http://{text}")
    if not parts.hostname:
        return text.rstrip("/")
    netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if parts.port is not None:
        netloc += f":{parts.port}"
    return f"{parts.scheme or 'http'}://{netloc}"


def hosts(host: str | None) -> tuple[str, str] | None:
    """(api_host, web_host) to export for this host, or None for swanlab's own (public cloud) defaults."""
    if not host:
        return None
    base = base_url(host)
    if (urlsplit(base).hostname or "").lower() in PUBLIC_HOSTS:
        return None
    return base + "/api", base


def swanlab_environment(spec: RunSpec) -> list[tuple[str, str]]:
    """(name, value) pairs for start_verl.sh: only names swanlab or verl's tracker read, with their types."""
    if not spec.swanlab_on:
        return []
    env: list[tuple[str, str]] = []
    derived = hosts(spec.swanlab_host)
    if derived is not None:
        env += [("SWANLAB_API_HOST", derived[0]), ("SWANLAB_WEB_HOST", derived[1])]
    env += [("SWANLAB_MODE", spec.swanlab_mode), ("SWANLAB_WORKSPACE", spec.swanlab_workspace),
            ("SWANLAB_LOG_DIR", spec.effective_swanlab_log_dir)]
    return env
