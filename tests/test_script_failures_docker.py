"""The Docker path: start_verl.sh runs inside the container through `docker exec` (a real private dockerd,
tests/realdocker.py); its Ray head failing to start there is the scripts' failure, not the training's."""

from __future__ import annotations

import json

from test_docker_real import cli, in_container, unique  # noqa: F401  (in_container is a fixture)

FAILING_RAY = """#!/usr/bin/env bash
if [ "$1" = start ]; then echo "ray: the raylet did not come up (see the session's raylet.err)" >&2; exit 1; fi
exec /usr/local/bin/ray.fake "$@"
"""


def test_a_ray_head_that_cannot_start_in_the_container_is_the_scripts_failure(in_container, tmp_path):  # noqa: F811
    name = in_container["start"](unique("vd-noray"))
    shim = tmp_path / "ray"
    shim.write_text(FAILING_RAY)
    shim.chmod(0o755)
    engine = in_container["engine"]
    engine.docker("exec", name, "mv", "/usr/local/bin/ray", "/usr/local/bin/ray.fake")
    engine.docker("cp", str(shim), f"{name}:/usr/local/bin/ray")
    result = cli(in_container["env"], "launch", *in_container["args"], "--container", name, "--follow", "--json")
    final = json.loads(result.stdout)
    assert result.returncode == 1 and final["state"] == "failed", result.stderr[-3000:]
    failure = final["failure"]
    assert failure["class"] == "script_failed" and failure["step"] == "starting the Ray head", failure
    assert failure["cause"].startswith("the training never started: verl-deploy's start_verl.sh failed at starting "
                                       "the Ray head (exit status 1); its last lines: ")
    assert "the raylet did not come up" in failure["cause"] and len(final["attempts"]) == 1
