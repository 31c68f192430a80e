"""Find verl's real config files for a version: a checkout, the installed package, or the wheel.

Order: ``--verl-dir`` (a verl checkout, which may also hold ``recipe/``), then an installed
``verl`` of the same version, then the version's wheel from PyPI (``pip download verl==X
--no-deps``) unpacked once into the cache. Only the YAML configs and the version file are
kept; verl's code is never imported.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from verl_deploy.statedir import cache_dir

# the configs, and the config dataclasses' source (read, never imported: the types verl declares per key)
KEEP_PREFIXES = ("verl/trainer/config/", "verl/experimental/one_step_off_policy/config/", "verl/version/",
                 "verl/workers/config/")
DATACLASS_DIR = ("verl", "workers", "config")  # a cache made before it was kept is fetched again, once


class ConfigUnavailable(Exception):
    """verl's config for the version could not be found or fetched (the message says why)."""


@dataclass(frozen=True)
class ConfigSource:
    version: str
    root: Path  # the directory that contains verl/ (and recipe/ in a checkout)
    origin: str  # "verl-dir", "installed" or "wheel"

    @property
    def base_dir(self) -> Path:
        return self.root / "verl" / "trainer" / "config"

    def recipe_config(self, module: str, config_name: str) -> Path | None:
        """The entry's own yaml if this source has it (checkout recipe/ or a wheel's experimental config)."""
        package_dir = self.root / Path(*module.split(".")[:-1])
        candidate = package_dir / "config" / f"{config_name}.yaml"
        return candidate if candidate.is_file() else None


def read_version(root: Path) -> str | None:
    version_file = root / "verl" / "version" / "version"
    try:
        return version_file.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def from_checkout(verl_dir: str) -> ConfigSource:
    root = Path(verl_dir).resolve()
    if not (root / "verl" / "trainer" / "config").is_dir():
        raise ConfigUnavailable(f"{root} is not a verl checkout (no verl/trainer/config)")
    version = read_version(root)
    if version is None:
        raise ConfigUnavailable(f"{root} has no verl/version/version file")
    return ConfigSource(version, root, "verl-dir")


def from_installed(version: str) -> ConfigSource | None:
    try:
        spec = importlib.util.find_spec("verl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))).parent
    found = read_version(root)
    if found is None or found.split(".dev")[0] != version:
        return None
    return ConfigSource(found, root, "installed")


def from_wheel(version: str, *, download: bool = True, announce=None) -> ConfigSource:
    """The configs of verl==version, fetched from PyPI once and kept in the cache."""
    target = cache_dir() / "verl" / version
    cached = (target / "verl" / "trainer" / "config").is_dir()
    if _complete(target) or (cached and not download):
        return ConfigSource(version, target, "wheel")
    if not download:
        raise ConfigUnavailable(f"verl {version} configs are not in the cache ({target})")
    try:
        return _fetch_wheel(version, target, announce)
    except ConfigUnavailable:
        if cached:  # an older cache without the dataclasses: the configs still check keys
            return ConfigSource(version, target, "wheel")
        raise


def _fetch_wheel(version: str, target: Path, announce=None) -> ConfigSource:
    if announce:
        announce(f"fetching verl {version}'s config files (pip download verl=={version} --no-deps, once)")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--disable-pip-version-check",
               "-d", tmp, f"verl=={version}"]
        try:
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ConfigUnavailable(f"pip download verl=={version} failed: {exc}") from None
        wheels = list(Path(tmp).glob("verl-*.whl"))
        if result.returncode != 0 or not wheels:
            last = (result.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise ConfigUnavailable(f"pip download verl=={version} failed: {last}")
        staging = Path(tempfile.mkdtemp(prefix=f"verl-{version}-", dir=_ensure(target.parent)))
        try:
            with zipfile.ZipFile(wheels[0]) as wheel:
                for name in wheel.namelist():
                    if name.startswith(KEEP_PREFIXES) and not name.endswith("/"):
                        wheel.extract(name, staging)
            if _complete(target):  # another process published the same release meanwhile, maybe in use: keep it
                shutil.rmtree(staging, ignore_errors=True)
            elif target.is_dir():  # an older cache: swap it out, then in with the new one
                old = Path(tempfile.mkdtemp(prefix=f"verl-{version}-old-", dir=target.parent))
                os.replace(target, old / "cache")
                os.replace(staging, target)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(staging, target)  # atomic: a half-extracted cache never appears
        except (OSError, zipfile.BadZipFile) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            if not target.is_dir():
                raise ConfigUnavailable(f"cannot unpack the verl {version} wheel: {exc}") from None
    return ConfigSource(version, target, "wheel")


def _complete(target: Path) -> bool:
    """A cache with the configs and the dataclasses: nothing to fetch (and not to be swapped out under a reader)."""
    return (target / "verl" / "trainer" / "config").is_dir() and target.joinpath(*DATACLASS_DIR).is_dir()


def _ensure(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def locate(version: str, verl_dir: str | None = None, *, download: bool = True, announce=None) -> ConfigSource:
    if verl_dir:
        return from_checkout(verl_dir)
    return from_installed(version) or from_wheel(version, download=download, announce=announce)
