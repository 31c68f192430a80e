"""`check --fabric`: a real gloo all-reduce between two processes (one rank per device of the fake host; the
CPU stands in for the devices, as on a box without accelerators), then with an interface that does not exist
(one clear error before anything starts) and with one that exists but has no address (each rank's own error)."""

from __future__ import annotations

import json

import psutil
import pytest

from conftest import run_cli, skip_module_without

skip_module_without("torch")


def _fabric(npu_host, *extra):
    result = run_cli("check", "--fabric", "--json", "--no-save", "--no-verify", "--devices", "0,1",
                     "--search-root", str(npu_host["root"]), *extra, env=npu_host["env"])
    return result, json.loads(result.stdout)["areas"]["fabric"]


def test_a_real_gloo_all_reduce_between_two_ranks_reports_bus_bandwidth(npu_host):
    _, fabric = _fabric(npu_host, "--socket-ifname", "lo")
    ranks = fabric["data"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and [r["device"] for r in ranks] == [0, 1], fabric["rows"]
    assert all(r["ok"] and r["backend"] == "gloo" and r["busbw_gbps"] > 0 for r in ranks)
    node = next(iter(fabric["data"]["nodes"].values()))
    assert node["ranks"] == 2 and node["busbw_gbps"] > 0
    rows = {row["status"]: row for row in fabric["rows"]}
    assert "2 rank(s), bus bandwidth" in rows["ok"]["value"]
    assert "NPUs themselves were not exercised" in rows["warning"]["value"]  # said, not hidden: no torch_npu here


def test_an_interface_that_does_not_exist_is_one_clear_error(npu_host):
    result, fabric = _fabric(npu_host, "--socket-ifname", "nosuch0")
    assert result.returncode == 1 and fabric["status"] == "error" and len(fabric["rows"]) == 1
    row = fabric["rows"][0]
    assert row["value"].startswith("the interface nosuch0 does not exist on ") and "lo" in row["value"]
    assert "--socket-ifname" in row["fix"] and "GLOO_SOCKET_IFNAME" in row["fix"] and not fabric["data"]


def test_an_interface_without_an_address_fails_each_rank_with_the_fix(npu_host):
    import socket

    bare = [name for name, addrs in psutil.net_if_addrs().items()
            if not any(a.family in (socket.AF_INET, socket.AF_INET6) for a in addrs)]
    if not bare:
        pytest.skip("this machine has no network interface without an address")
    result, fabric = _fabric(npu_host, "--socket-ifname", bare[0])
    assert result.returncode == 1 and fabric["status"] == "error"
    errors = [row for row in fabric["rows"] if row["status"] == "error"]
    assert {e["value"].split(":")[0] for e in errors} == {f"rank 0 (device 0 on {socket.gethostname()})",
                                                          f"rank 1 (device 1 on {socket.gethostname()})"}
    assert all(bare[0] in e["value"] and "--socket-ifname" in e["fix"] for e in errors)


def test_eight_ranks_answering_at_once_are_each_read(npu_host):
    """Eight ranks finish at once and every one is read back (each answers in one write; print's two writes once
    glued two ranks' records onto one line, and both were lost; seen by hand, rare under test)."""
    result = run_cli("check", "--fabric", "--json", "--no-save", "--no-verify", "--devices", "0-7",
                     "--search-root", str(npu_host["root"]), "--socket-ifname", "lo", env=npu_host["env"])
    fabric = json.loads(result.stdout)["areas"]["fabric"]
    assert [r["rank"] for r in fabric["data"]["ranks"]] == list(range(8)), fabric["rows"]
