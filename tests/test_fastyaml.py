"""OmegaConf's loader on libyaml's parser reads every YAML file of every release's config tree exactly as
OmegaConf's own loader does, keeps its duplicate-key refusal and its float pattern, and a whole compose
gives the same config."""

from __future__ import annotations

import pytest
import yaml
from omegaconf import OmegaConf

from verl_deploy.verlconfig import fastyaml, index
from verl_deploy.verlconfig.locate import locate
from verl_deploy.profiles import profile_for

RELEASES = ["0.6.0", "0.6.1", "0.7.0", "0.7.1", "0.8.0", "0.9.0", "0.9.1"]
pytestmark = pytest.mark.skipif(not getattr(yaml, "__with_libyaml__", False), reason="this PyYAML has no libyaml")


def _python_loader():
    fastyaml.install()
    assert fastyaml._python_loader is not None
    return fastyaml._python_loader()


def _load(text: str, loader) -> object:
    return yaml.load(text, Loader=loader)


@pytest.mark.parametrize("version", RELEASES)
def test_every_config_file_of_a_release_loads_the_same_both_ways(version):
    root = locate(version).root / "verl"
    files = sorted(root.rglob("*.yaml"))
    assert len(files) > 20, files
    python_loader, c_loader = _python_loader(), fastyaml.c_loader()
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert _load(text, c_loader) == _load(text, python_loader), path


@pytest.mark.parametrize("text,expected", [
    ("lr: 1e-6\n", {"lr": 1e-6}),  # OmegaConf's float pattern (YAML 1.1 wants a dot)
    ("when: 2001-12-14\n", {"when": "2001-12-14"}),  # no timestamps
    ("n: 0x10\nok: yes\nnone: ~\nlist: [1, 'a', null]\n", {"n": 16, "ok": True, "none": None, "list": [1, "a", None]}),
    ("path: !!python/object/apply:pathlib.Path ['/a', 'b']\n", None),
])
def test_omegaconfs_own_rules_hold_on_the_c_parser(text, expected):
    python_loader, c_loader = _python_loader(), fastyaml.c_loader()
    assert _load(text, c_loader) == _load(text, python_loader)
    if expected is not None:
        assert _load(text, c_loader) == expected


def test_a_duplicate_key_is_still_refused():
    with pytest.raises(yaml.constructor.ConstructorError, match="found duplicate key lr"):
        _load("lr: 1\nlr: 2\n", fastyaml.c_loader())


def test_omegaconf_load_uses_the_c_parser_once_installed(tmp_path):
    fastyaml.install()
    path = tmp_path / "a.yaml"
    path.write_text("a: {b: 1e-3}\n")
    assert OmegaConf.to_container(OmegaConf.load(path)) == {"a": {"b": 1e-3}}
    from omegaconf import _utils

    assert _utils.get_yaml_loader() is fastyaml.c_loader()


@pytest.mark.parametrize("version", ["0.6.0", "0.7.1", "0.9.1"])
def test_a_whole_compose_is_the_same_on_either_parser(version, monkeypatch):
    source, profile = locate(version), profile_for(version)
    overrides = ["data.train_batch_size=64", "actor_rollout_ref.actor.optim.lr=1e-6", "trainer.n_gpus_per_node=4"]
    composed = {}
    for framework in ("megatron", "fsdp"):
        base = profile.base_configs[framework]
        fast = OmegaConf.to_container(index.compose(source, "x", base, {}, overrides), resolve=False)
        from omegaconf import _utils

        monkeypatch.setattr(_utils, "get_yaml_loader", fastyaml._python_loader)
        slow = OmegaConf.to_container(index.compose(source, "x", base, {}, overrides), resolve=False)
        monkeypatch.setattr(_utils, "get_yaml_loader", fastyaml.c_loader)
        assert fast == slow
        composed[framework] = fast
    assert composed["megatron"] != composed["fsdp"]


def test_the_key_tables_and_the_failure_signatures_read_the_same_on_libyaml_as_on_the_python_parser():
    """Our own data files load through libyaml where PyYAML has it (a key table is 100-220 KB, read by every
    `plan`); what they hold must not change with the parser."""
    from importlib import resources

    from verl_deploy.profiles import keytables
    from verl_deploy.watch import signatures

    assert keytables._LOADER is yaml.CSafeLoader
    tables = sorted(keytables.KEYS_DIR.glob("verl-*.yaml"))
    assert len(tables) >= len(RELEASES)
    for path in tables:
        text = path.read_text(encoding="utf-8")
        fast = yaml.load(text, Loader=yaml.CSafeLoader)
        assert fast == yaml.load(text, Loader=yaml.SafeLoader), path.name
        version = path.stem.removeprefix("verl-")
        keytables._load.cache_clear()
        assert keytables._load(version) == fast and fast["keys"], path.name
    text = resources.files("verl_deploy.watch").joinpath("signatures.yaml").read_text(encoding="utf-8")
    assert yaml.load(text, Loader=yaml.CSafeLoader) == yaml.safe_load(text)
    signatures.load_table.cache_clear()
    fast, slow = signatures.load_table(), signatures.build_table(yaml.safe_load(text))
    assert (fast.classes, fast.phases, fast.set_index) == (slow.classes, slow.phases, slow.set_index) and fast.classes
