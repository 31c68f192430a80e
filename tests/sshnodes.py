"""Worker "nodes" of this machine for multi-node tests: one real sshd per node on a loopback port, reached by name
through an ssh config that VERL_DEPLOY_SSH_OPTIONS hands to verl-deploy (the way a user's ~/.ssh/config would).

Each node's sessions get the environment its sshd sets (SetEnv: the fake device tools, a DOCKER_HOST of the
node's own Docker engine), and a node may run its sshd under a wrapper (a mount namespace of its own).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from rayports import free_port

SSHD = "/usr/sbin/sshd"


def start_nodes(keys: Path, nodes: dict[str, dict]) -> tuple[dict[str, str], list[subprocess.Popen]]:
    """Start an sshd per node name; `nodes[name]` may hold `env` (its sessions' variables) and `wrap` (argv the
    sshd runs under). Returns the environment verl-deploy needs to reach them, and the daemons to terminate."""
    keys.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "id")], check=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / "host")], check=True)
    (keys / "authorized_keys").write_text((keys / "id.pub").read_text())
    Path("/run/sshd").mkdir(exist_ok=True)
    daemons, config = [], ""
    for name, node in nodes.items():
        port = free_port()
        conf = keys / f"{name}.conf"
        setenv = " ".join(f"{k}={v}" for k, v in node.get("env", {}).items())
        conf.write_text(f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keys / 'host'}\nPidFile {keys / name}.pid\n"
                        f"AuthorizedKeysFile {keys / 'authorized_keys'}\nStrictModes no\nPermitRootLogin prohibit-password\n"
                        f"PasswordAuthentication no\nUsePAM no\n" + (f"SetEnv {setenv}\n" if setenv else ""))
        argv = [*node.get("wrap", []), SSHD, "-D", "-f", str(conf), "-e"]
        daemons.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        config += (f"Host {name}\n  HostName 127.0.0.1\n  Port {port}\n  User root\n  IdentityFile {keys / 'id'}\n"
                   "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
    ssh_config = keys / "config"
    ssh_config.write_text(config)
    for name in nodes:
        deadline = time.monotonic() + 20
        while subprocess.run(["ssh", "-F", str(ssh_config), "-o", "BatchMode=yes", name, "true"],
                             capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                stop_nodes(daemons)
                raise AssertionError(f"sshd {name} did not come up")
            time.sleep(0.3)
    return {"VERL_DEPLOY_SSH_OPTIONS": f"-F {ssh_config}"}, daemons


def stop_nodes(daemons: list[subprocess.Popen]) -> None:
    for daemon in daemons:
        daemon.terminate()
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
