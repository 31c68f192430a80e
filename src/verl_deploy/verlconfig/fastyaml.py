"""OmegaConf's YAML loader on libyaml's C parser, for Hydra's composes of verl's config tree.

omegaconf 2.3 parses every YAML file with PyYAML's pure-Python scanner and builds a new loader class
on each load; one compose of verl's trainer config loads ~30 files, and the scanner was half of a
compose's time (`import`, `migrate`). The loader here keeps OmegaConf's own constructor and resolvers
(duplicate-key check, its float pattern, no timestamps) and swaps only the parser, built once.
`tests/test_fastyaml.py` composes every release's configs both ways and compares them.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import yaml

_python_loader: Callable[[], Any] | None = None  # omegaconf's own get_yaml_loader, kept for the C loader's base


@functools.cache
def c_loader() -> Any:
    """OmegaConf's loader class with libyaml's parser in front (one class for the process)."""
    from yaml.constructor import SafeConstructor
    from yaml.cyaml import CParser  # type: ignore[attr-defined]  # built only with libyaml
    from yaml.resolver import Resolver

    assert _python_loader is not None
    omegaconf_loader = _python_loader()

    class OmegaConfCLoader(CParser, omegaconf_loader):  # type: ignore[misc, valid-type]
        def __init__(self, stream: Any) -> None:
            CParser.__init__(self, stream)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

    return OmegaConfCLoader


def install() -> bool:
    """Make OmegaConf.load use the C parser (once; a no-op where PyYAML has no libyaml). True if in use."""
    global _python_loader
    if not getattr(yaml, "__with_libyaml__", False):
        return False
    from omegaconf import _utils

    if _python_loader is None:
        _python_loader = _utils.get_yaml_loader
        _utils.get_yaml_loader = c_loader
    return True
