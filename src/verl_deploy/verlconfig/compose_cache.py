"""Hydra's composition of a release's base config, done once per process and reused by every later compose
that only adds value overrides to it.

A compose is Hydra's defaults list and the merge of ~30 files (about 0.2 s), then the overrides (milliseconds).
`import` composes a launch 4-5 times while it finds the overrides that make it equal to a script, and `migrate`
and the rule checks compose the same base again with other overrides. Hydra applies `key=value`, `+key`, `++key`
and `~key` overrides after the merge, to the merged config (hydra 1.3 `ConfigLoaderImpl._load_configuration_impl`:
`create_defaults_list`, `_compose_config_from_defaults_list`, then `_apply_overrides_to_config`), so applying them
with that same function to a copy of the merged base gives the config Hydra gives. Anything else -- an override
that picks a config group option, a sweep, a `hydra.` key, an override Hydra refuses, a Hydra without those
functions -- is composed whole, so its result and its error are Hydra's own. `tests/test_compose_cache.py`
composes launches of every release both ways.
"""

from __future__ import annotations

import contextlib
import copy
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

_KEPT = 16  # bases kept per process: a release x framework x entry config each


@dataclass
class _Base:
    config: Any  # the DictConfig Hydra composed with no override, its `hydra` node still in it
    repository: Any  # Hydra's config repository of that compose: tells a config group from a key


_bases: dict[tuple, _Base | None] = {}  # None: this base could not be kept (every compose of it is whole)


def compose(base_dir: Path, name: str, document: str, overrides: list[str]):
    """The DictConfig `hydra.compose(name, overrides)` returns, `document` being the primary config `name.yaml`
    (its search path reaches `base_dir`)."""
    key = (str(base_dir), _stamp(base_dir), name, document)
    if key not in _bases:
        if len(_bases) >= _KEPT:
            del _bases[next(iter(_bases))]  # the oldest
        _bases[key] = _compose_base(name, document)
    base = _bases[key]
    if base is not None:
        applied = _with_value_overrides(base, overrides)
        if applied is not None:
            return applied
    return _compose_whole(name, document, overrides)


def _stamp(base_dir: Path) -> tuple:
    """The config tree's files as they are now: an edited or added file makes a new base."""
    try:
        return tuple((str(path), stat.st_mtime_ns, stat.st_size)
                     for path in sorted(base_dir.rglob("*.yaml")) for stat in (path.stat(),))
    except OSError:
        return ()


def _compose_whole(name: str, document: str, overrides: list[str]):
    from hydra import compose as hydra_compose

    with _primary(name, document):
        return hydra_compose(config_name=name, overrides=list(overrides))


def _compose_base(name: str, document: str) -> _Base | None:
    """The base composed with no override and the repository it was composed from; None where this Hydra does
    not offer what applying overrides to it needs, or the base itself does not compose (the whole compose then
    raises Hydra's own error)."""
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra._internal.defaults_list import Overrides
        from hydra.core.global_hydra import GlobalHydra
        from hydra.types import RunMode

        assert callable(getattr(ConfigLoaderImpl, "_apply_overrides_to_config")) and callable(Overrides)
        with _primary(name, document):
            loader = GlobalHydra.instance().config_loader()
            config = loader.load_configuration(config_name=name, overrides=[], run_mode=RunMode.RUN,
                                               from_shell=False)
            _, repository = loader._parse_overrides_and_create_caching_repo(name, [])  # type: ignore[attr-defined]
        return _Base(config, repository)
    except Exception:
        return None


def _with_value_overrides(base: _Base, overrides: list[str]):
    """The base with the overrides applied as Hydra applies value overrides; None where one is not a value
    override or Hydra refuses one (the whole compose then gives Hydra's own result or error)."""
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra._internal.defaults_list import Overrides
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from omegaconf import open_dict

        parsed = OverridesParser.create().parse_overrides(overrides=list(overrides))
        if any(o.is_sweep_override() or o.is_hydra_override() or o.key_or_group == "hydra" for o in parsed):
            return None
        split = Overrides(base.repository, parsed)
        if len(split.config_overrides) != len(parsed):
            return None  # one picks a config group option: the defaults list changes
        config = copy.deepcopy(base.config)
        ConfigLoaderImpl._apply_overrides_to_config(split.config_overrides, config)
        with open_dict(config):
            del config["hydra"]  # as hydra.compose does without return_hydra_config
        return config
    except Exception:
        return None


@contextlib.contextmanager
def _primary(name: str, document: str) -> Iterator[None]:
    """A fresh Hydra whose primary config is `name.yaml` holding `document`, in a temporary directory."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    with tempfile.TemporaryDirectory(prefix="verl-deploy-compose-") as tmp:
        Path(tmp, f"{name}.yaml").write_text(document, encoding="utf-8")
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=tmp, version_base=None):
                yield
        finally:
            GlobalHydra.instance().clear()
