"""Two nodes, each with its own real Docker engine and the run's container in it: `check --fabric` runs a real gloo
all-reduce between the two containers, an interface one container lacks is one error naming that node, and the
shared-storage check tells a volume both containers mount from a node-local one.

Node 0 is this host, its engine the test session's (DOCKER_HOST); node 1 is an sshd whose sessions talk to a second
engine (SetEnv DOCKER_HOST), so `docker exec` there reaches node 1's container as on a real second machine. Both
containers run the test image with this interpreter (and its torch) mounted read-only at the same path.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import FAKES, run_cli, skip_module_without
from sshnodes import SSHD, start_nodes, stop_nodes

skip_module_without("torch")
pytestmark = pytest.mark.skipif(not os.path.exists(SSHD) or os.geteuid() != 0,
                                reason="needs sshd and root (a second private Docker engine)")
CONTAINER = "verl-node"


@pytest.fixture(scope="module")
def second_engine():
    from realdocker import Unavailable, import_image, start_engine

    try:
        engine = start_engine()
        engine.image = import_image(engine)
    except Unavailable as exc:
        pytest.skip(f"no second Docker engine here: {exc}")
    yield engine
    engine.stop()


IN_CONTAINER = "/opt/vd-venv"  # this test environment, seen from inside the container (a path the host lacks)


def imported_from_elsewhere() -> list[str]:
    """The folders this interpreter imports from outside its own prefixes: what a .pth file of the environment
    points at (an editable install's src, the site-packages of a venv this one is layered on). Mounted at their
    own paths, the environment imports the same inside the container (its torch included)."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}
    found: list[str] = []
    for entry in sys.path:
        path = os.path.realpath(entry) if entry else ""
        if not path or not os.path.isdir(path) or any(path == p or path.startswith(p + os.sep) for p in prefixes):
            continue
        if not any(path == f or path.startswith(f + os.sep) for f in found):
            found.append(path)
    return found


def run_container(engine, ckpts: Path, network: str = "host") -> None:
    """The run's container on one node: this environment and its torch mounted read-only at IN_CONTAINER (its
    base interpreter at its own path, and whatever it imports from elsewhere at its own path), ckpts at /ckpts."""
    engine.docker("rm", "-f", CONTAINER, check=False)
    elsewhere = [arg for path in imported_from_elsewhere() for arg in ("-v", f"{path}:{path}:ro")]
    engine.docker("run", "-d", "--name", CONTAINER, f"--network={network}", "-v",
                  f"{sys.base_prefix}:{sys.base_prefix}:ro", "-v", f"{sys.prefix}:{IN_CONTAINER}:ro", *elsewhere,
                  "-v", f"{ckpts}:/ckpts", "-e", f"PATH={IN_CONTAINER}/bin:/usr/sbin:/usr/bin:/sbin:/bin", engine.image,
                  "sleep", "infinity")


@pytest.fixture()
def two_nodes(tmp_path, npu_host, docker_engine, second_engine):
    real = tmp_path / "real-docker"  # the fake host's device tools, but the real docker CLI before its stand-in
    real.mkdir()
    (real / "docker").symlink_to(shutil.which("docker", path="/usr/bin:/bin") or "/usr/bin/docker")
    env, daemons = start_nodes(tmp_path / "ssh", {"node1": {"env": {
        "PATH": f"{real}:{FAKES}:/usr/bin:/bin", "FAKE_NPU_SMI": npu_host["env"]["FAKE_NPU_SMI"],
        "DOCKER_HOST": second_engine.host}}})
    env["PATH"] = f"{real}:{npu_host['env']['PATH']}"
    folders = {name: tmp_path / name for name in ("shared", "node1-disk")}
    for folder in folders.values():
        folder.mkdir()
    yield {"env": {**npu_host["env"], **docker_engine.env(), **env}, "engines": (docker_engine, second_engine),
           "folders": folders, "root": npu_host["root"]}
    stop_nodes(daemons)
    for engine in (docker_engine, second_engine):
        engine.docker("rm", "-f", CONTAINER, check=False)


def check(nodes: dict, *extra: str) -> tuple[int, dict]:
    result = run_cli("check", "--json", "--no-save", "--no-verify", "--container", CONTAINER, "--nodes",
                     "127.0.0.1,node1", "--master-addr", "127.0.0.1", "--devices", "0,1", "--search-root",
                     str(nodes["root"]), *extra, env=nodes["env"])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    return result.returncode, json.loads(result.stdout)["areas"]


def test_a_real_gloo_all_reduce_between_two_containers_on_two_engines(two_nodes):
    head, node1 = two_nodes["engines"]
    for engine in (head, node1):
        run_container(engine, two_nodes["folders"]["shared"])
    _, areas = check(two_nodes, "--fabric", "--socket-ifname", "lo")
    fabric = areas["fabric"]
    ranks = fabric["data"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3], fabric["rows"]
    assert all(r["ok"] and r["backend"] == "gloo" and r["busbw_gbps"] > 0 for r in ranks), ranks
    assert sorted(fabric["data"]["nodes"]) == ["127.0.0.1", "node1"], fabric["data"]["nodes"]
    assert all(n["ranks"] == 2 and n["busbw_gbps"] > 0 for n in fabric["data"]["nodes"].values())
    # the ranks ran in the containers: each node's probe ran the python3 that exists only inside them
    assert {n["python"] for n in fabric["data"]["nodes"].values()} == {f"{IN_CONTAINER}/bin/python3"}
    assert not Path(IN_CONTAINER).exists()


def test_an_interface_one_container_lacks_is_one_error_naming_that_node(two_nodes):
    interface = next((n for n in sorted(os.listdir("/sys/class/net")) if n != "lo"), None)
    if interface is None:
        pytest.skip("this host has no network interface but lo")
    head, node1 = two_nodes["engines"]
    run_container(head, two_nodes["folders"]["shared"])
    run_container(node1, two_nodes["folders"]["shared"], network="none")  # node1's container sees only lo
    code, areas = check(two_nodes, "--fabric", "--socket-ifname", interface)
    fabric = areas["fabric"]
    assert code == 1 and fabric["status"] == "error" and len(fabric["rows"]) == 1, fabric
    row = fabric["rows"][0]
    assert row["value"] == f"the interface {interface} does not exist on node1 (it has: lo)", row
    assert "--socket-ifname" in row["fix"] and not fabric["data"]  # said before any rank started


def test_shared_storage_across_two_containers_with_and_without_a_shared_volume(two_nodes):
    head, node1 = two_nodes["engines"]
    folders = two_nodes["folders"]
    run_container(head, folders["shared"])
    run_container(node1, folders["shared"])  # the same host folder behind /ckpts in both: shared
    _, areas = check(two_nodes, "--ckpts-dir", "/ckpts/run")
    assert areas["storage"]["status"] == "ok", areas["storage"]
    assert areas["storage"]["data"]["shared_with"] == ["node1"]

    run_container(node1, folders["node1-disk"])  # node1's /ckpts is its own disk now
    code, areas = check(two_nodes, "--ckpts-dir", "/ckpts/run")
    storage = areas["storage"]
    assert code == 1 and storage["status"] == "error", storage
    assert storage["data"]["not_shared_with"] == ["node1"] and "--allow-local-checkpoints" in storage["rows"][0]["fix"]
    for folder in folders.values():  # the token was written in the head's container and removed, with its folder
        assert list(folder.iterdir()) == [], list(folder.rglob("*"))
