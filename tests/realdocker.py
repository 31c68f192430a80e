"""A private, real Docker engine for the tests, and a small Debian image to run in it.

The engine is Debian's `dockerd` started for the test session with its own socket, data root,
exec root and pid file, no iptables and no bridge (containers use `--network host`), so it never
touches a Docker the machine already runs. No registry is reachable here, so the image is a
`debootstrap --variant=minbase` root file system with python3, made once per machine and kept as
a tarball (`$VERL_DEPLOY_TEST_CACHE` or ~/.cache/verl-deploy-tests), then `docker import`ed.
Anything that cannot be had on this machine is a skip reason, never a silent pass.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

IMAGE = "verl-deploy-test/debian:bookworm-py3"
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
PACKAGES = "python3,procps"


def cache_dir() -> Path:
    root = os.environ.get("VERL_DEPLOY_TEST_CACHE") or os.path.expanduser("~/.cache/verl-deploy-tests")
    return Path(root)


class Unavailable(Exception):
    """This machine cannot run a real engine or build the image; the message is the skip reason."""


@dataclass
class Engine:
    socket: Path
    root: Path
    process: subprocess.Popen

    @property
    def host(self) -> str:
        return f"unix://{self.socket}"

    def env(self) -> dict[str, str]:
        return {"DOCKER_HOST": self.host}

    def docker(self, *args: str, timeout: float = 120, check: bool = True, input: str | None = None):
        result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, input=input,
                                env={**os.environ, **self.env()})
        if check and result.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)}: {result.stderr.strip()[-800:]}")
        return result

    def stop(self) -> None:
        """Remove every container of this engine, then stop the daemon (and the containerd it started)."""
        try:
            ids = self.docker("ps", "-aq", check=False, timeout=30).stdout.split()
            if ids:
                self.docker("rm", "-f", *ids, check=False, timeout=120)
        except (subprocess.TimeoutExpired, OSError):
            pass
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        for mounted in ("data", "exec/netns/default", "exec"):  # dockerd's own mounts, should it have left any
            subprocess.run(["umount", "-R", str(self.root / mounted)], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def start_engine() -> Engine:
    """Start a private dockerd; raise Unavailable with the reason when this machine cannot."""
    if os.geteuid() != 0:
        raise Unavailable("a private dockerd needs root")
    if not shutil.which("dockerd") or not shutil.which("docker"):
        raise Unavailable("dockerd / docker not installed (Debian: apt-get install docker.io)")
    root = Path(tempfile.mkdtemp(prefix="vd-dk-", dir="/tmp"))  # short: a unix socket path has 108 bytes
    socket = root / "sock"
    log = open(root / "dockerd.log", "w")
    process = subprocess.Popen(
        ["dockerd", "--iptables=false", "--ip6tables=false", "--bridge=none", "--data-root", str(root / "data"),
         "--exec-root", str(root / "exec"), "--pidfile", str(root / "pid"), "-H", f"unix://{socket}"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    engine = Engine(socket, root, process)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = (root / "dockerd.log").read_text()[-600:]
            shutil.rmtree(root, ignore_errors=True)
            raise Unavailable(f"dockerd exited at start: {tail}")
        if socket.exists() and engine.docker("info", check=False, timeout=20).returncode == 0:
            return engine
        time.sleep(0.3)
    engine.stop()
    raise Unavailable("dockerd did not answer within 60 s")


def rootfs_tarball() -> Path:
    """The minimal Debian root file system as a tarball, built once per machine with debootstrap."""
    from filelock import FileLock

    tarball = cache_dir() / f"debian-{SUITE}-minbase-py3.tar"
    if tarball.exists():
        return tarball
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(tarball.with_suffix(".lock"))):  # another test session may be building it right now
        return tarball if tarball.exists() else _build_rootfs(tarball)


def _build_rootfs(tarball: Path) -> Path:
    if not shutil.which("debootstrap"):
        raise Unavailable("debootstrap not installed and no cached test image (apt-get install debootstrap)")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix="vd-rootfs-", dir=str(tarball.parent)))
    try:
        made = subprocess.run(["debootstrap", "--variant=minbase", f"--include={PACKAGES}", SUITE, str(build / "root"),
                               MIRROR], capture_output=True, text=True, timeout=1200)
        if made.returncode != 0:
            raise Unavailable(f"debootstrap failed (no Debian mirror?): {made.stdout[-300:]} {made.stderr[-300:]}")
        for cached in (build / "root" / "var" / "cache" / "apt" / "archives").glob("*.deb"):
            cached.unlink()
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(build / "root"), "-cf", str(partial), "."], check=True, timeout=600)
        partial.rename(tarball)
    finally:
        subprocess.run(["rm", "-rf", "--one-file-system", str(build)], check=False)
    return tarball


def import_image(engine: Engine) -> str:
    """The test image inside this engine (imported from the cached tarball)."""
    if engine.docker("image", "inspect", IMAGE, check=False).returncode != 0:
        engine.docker("import", str(rootfs_tarball()), IMAGE, timeout=600)
    return IMAGE
