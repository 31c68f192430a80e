"""A live Ray cluster as the job submission server sees it, and whether a run fits on it.

Read through the dashboard's REST API (the same address jobs are submitted to), with the cluster's
token when it uses token authentication (rayauth): the alive nodes with their resources, and the
cluster's Ray version. A layout that could never be
placed (a placement group that would wait forever) is refused before anything is submitted.
"""

from __future__ import annotations

from dataclasses import dataclass

from verl_deploy import rayauth
from verl_deploy.findings import Finding, error, warning
from verl_deploy.spec import RunSpec


@dataclass(frozen=True)
class Node:
    ip: str
    resources: dict


def _get(address: str, path: str, timeout: float = 10) -> dict:
    """GET as JSON; rayauth.AuthError (one line with the fix) when the cluster wants a token we lack."""
    data = rayauth.get_json(address, path, timeout)
    return data if isinstance(data, dict) else {}


def cluster_nodes(address: str) -> list[Node]:
    """Alive nodes and their total resources (Ray's state API: /api/v0/nodes); AuthError for a token problem."""
    data = _get(address, "/api/v0/nodes?limit=1000&detail=true")
    rows = data.get("data", {}).get("result", {}).get("result", [])
    return [Node(row.get("node_ip", "?"), row.get("resources_total", {}) or {})
            for row in rows if row.get("state") == "ALIVE"]


def cluster_version(address: str) -> str | None:
    try:
        return _get(address, "/api/version").get("ray_version")
    except (OSError, ValueError, rayauth.AuthError):
        return None


def accelerator_name(spec: RunSpec) -> str:
    return "NPU" if spec.device == "npu" else "GPU"


def check_cluster(spec: RunSpec, nodes: list[Node], version: str | None, local_version: str | None) -> list[Finding]:
    """Refuse what cannot be placed: wrong resource name, too few devices in total or per node."""
    name = accelerator_name(spec)
    per_node, nnodes = len(spec.devices), spec.nnodes
    counts = [int(n.resources.get(name, 0)) for n in nodes]
    total = sum(counts)
    findings: list[Finding] = []
    other = "GPU" if name == "NPU" else "NPU"
    if not total and any(n.resources.get(other) for n in nodes):
        findings.append(error("cluster", f"the cluster registers {other}, not {name}",
                              f"start Ray with the devices as {name}: ray start ... "
                              + ("--resources='{\"NPU\": 8}'" if name == "NPU" else "--num-gpus=8")))
        return findings
    fitting = sum(1 for c in counts if c >= per_node)
    if fitting < nnodes:
        have = ", ".join(f"{n.ip}: {c}" for n, c in zip(nodes, counts)) or "no alive node"
        findings.append(error("cluster", f"the run needs {nnodes} node(s) x {per_node} {name} = {nnodes * per_node}; "
                                         f"the cluster has {len(nodes)} node(s), {total} {name} ({have})",
                              "use fewer devices (--devices, --nnodes) or wait for / add nodes; a placement group "
                              "that cannot be satisfied would wait forever"))
    if version and local_version and version != local_version:
        findings.append(warning("ray version", f"the cluster runs Ray {version}, this host {local_version}",
                                f"pip install 'ray[default]=={version}' here"))
    return findings
