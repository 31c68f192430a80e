"""Two processes fetching the same verl release's configs at once (CI's first run on a clean clone): the second
must not swap the first one's published cache out from under a compose that reads it (CI run 5 lost a file so)."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

from verl_deploy.verlconfig import locate


def _fake_pip(files: dict[str, str]):
    """subprocess.run for `pip download -d DIR verl==X`: writes a wheel holding `files` into DIR."""
    def run(cmd, **_kwargs):
        folder = Path(cmd[cmd.index("-d") + 1])
        with zipfile.ZipFile(folder / "verl-0.0.1-py3-none-any.whl", "w") as wheel:
            for name, text in files.items():
                wheel.writestr(name, text)
        return subprocess.CompletedProcess(cmd, 0, "", "")
    return run


def test_a_second_fetch_keeps_the_cache_another_process_published(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_DEPLOY_CACHE_DIR", str(tmp_path / "cache"))
    target = tmp_path / "cache" / "verl" / "0.0.1"
    published = {"verl/trainer/config/ppo_trainer.yaml": "a: 1\n", "verl/workers/config/__init__.py": ""}
    (target / "verl" / "trainer" / "config").mkdir(parents=True)
    (target / "verl" / "workers" / "config").mkdir(parents=True)
    for name, text in published.items():
        (target / name).write_text(text)
    inode = (target / "verl" / "trainer" / "config" / "ppo_trainer.yaml").stat().st_ino
    monkeypatch.setattr(locate.subprocess, "run", _fake_pip({**published, "verl/trainer/config/ppo_trainer.yaml": "a: 2\n"}))
    source = locate._fetch_wheel("0.0.1", target)  # as a process that saw no cache when it started
    kept = target / "verl" / "trainer" / "config" / "ppo_trainer.yaml"
    assert source.root == target and kept.read_text() == "a: 1\n" and kept.stat().st_ino == inode
    assert [p.name for p in target.parent.iterdir()] == ["0.0.1"]  # its own staging folder is gone


def test_an_older_cache_without_the_dataclasses_is_still_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_DEPLOY_CACHE_DIR", str(tmp_path / "cache"))
    target = tmp_path / "cache" / "verl" / "0.0.1"
    (target / "verl" / "trainer" / "config").mkdir(parents=True)
    (target / "verl" / "trainer" / "config" / "ppo_trainer.yaml").write_text("a: 1\n")
    monkeypatch.setattr(locate.subprocess, "run", _fake_pip({"verl/trainer/config/ppo_trainer.yaml": "a: 2\n",
                                                             "verl/workers/config/__init__.py": ""}))
    locate._fetch_wheel("0.0.1", target)
    assert (target / "verl" / "trainer" / "config" / "ppo_trainer.yaml").read_text() == "a: 2\n"
    assert (target / "verl" / "workers" / "config").is_dir()
