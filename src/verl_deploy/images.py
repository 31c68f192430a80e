"""Official container images per verl release and device: the default `--image` is chosen here.

Read from verl's own repository at each release tag (docs, docker/README.md and the CI workflow
that tested the release); no registry was reachable when this table was made, so `evidence` says
whether the exact tag is written in verl's files at that tag ("seen") or was built from the naming
format verl's docs give for release images at that tag ("by format"). Ascend A2 = 910B (`910b`),
A3 = Atlas 800T A3 (`a3`).

Sources (path@tag in github.com/verl-project/verl):
- CUDA: docker/README.md and docs/start/install.rst ("All pre-built images are available in
  dockerhub ... For example ..."), .github/workflows/vllm.yml `IMAGE:` (the image the release's
  CI ran on, from the verlai/verl Docker Hub repository mirrored for CI).
- Ascend: docs/ascend_tutorial/dockerfile_build_guidance.rst@v0.7.0 and
  docs/ascend_tutorial/get_start/dockerfile_build_guidance.rst@v0.8.0/@v0.9.0 (quay.io/ascend/verl,
  release image name format, the "verl release版本镜像" Dockerfile list),
  docs/ascend_tutorial/model_support/examples/qwen3_5_megatron_npu.md@v0.9.0 (a published v0.8.0
  A3 tag), .github/workflows/e2e_ascend.yml@v0.6.1/@v0.9.0 (CI images).
"""

from __future__ import annotations

from dataclasses import dataclass

QUAY = "quay.io/ascend/verl:"
HUB = "verlai/verl:"


@dataclass(frozen=True)
class OfficialImage:
    release: str  # verl release line this serves: "0.7.0" exact, or "0.8." for a prefix
    device: str  # "gpu" (CUDA), "a2" or "a3" (Ascend)
    image: str
    evidence: str  # "seen" or "by format"
    source: str  # where in verl's repository, path@tag
    note: str = ""


TABLE: tuple[OfficialImage, ...] = (
    # -- NVIDIA CUDA (verlai/verl on Docker Hub)
    OfficialImage("0.6.0", "gpu", HUB + "app-verl0.5-transformers4.55.4-vllm0.10.0-mcore0.13.0-te2.2", "seen",
                  ".github/workflows/vllm.yml@v0.6.0"),
    OfficialImage("0.6.1", "gpu", HUB + "vllm011.dev7", "seen", ".github/workflows/vllm.yml@v0.6.1"),
    OfficialImage("0.7.0", "gpu", HUB + "vllm012.latest", "seen",
                  "docker/README.md@v0.7.0, .github/workflows/vllm.yml@v0.7.0"),
    OfficialImage("0.7.1", "gpu", HUB + "vllm017.latest", "seen",
                  "docker/README.md@v0.7.1 (CI: vllm017.dev2, .github/workflows/vllm.yml@v0.7.1)"),
    OfficialImage("0.8.", "gpu", HUB + "vllm020.dev1", "seen", ".github/workflows/vllm.yml@v0.8.0",
                  "docker/README.md@v0.8.0 still names vllm017.latest; v0.8.0's CI ran on vllm020.dev1"),
    OfficialImage("0.9.", "gpu", HUB + "vllm024.latest", "seen",
                  "docker/README.md@v0.9.0 (CI: vllm024.dev2, .github/workflows/vllm.yml@v0.9.0)"),
    # -- Ascend (quay.io/ascend/verl)
    OfficialImage("0.6.", "a2", QUAY + "verl-8.2.rc1-910b-ubuntu22.04-py3.11-latest", "seen",
                  ".github/workflows/e2e_ascend.yml@v0.6.1", "a daily build (tracks verl main), as v0.6.1's CI used"),
    OfficialImage("0.6.", "a3", QUAY + "verl-8.2.rc1-a3-ubuntu22.04-py3.11-latest", "by format",
                  "docker/ascend/Dockerfile.ascend_8.2.rc1_a3@v0.7.0, daily format in "
                  "docs/ascend_tutorial/dockerfile_build_guidance.rst@v0.7.0", "a daily build (tracks verl main)"),
    OfficialImage("0.7.0", "a2", QUAY + "verl-8.3.rc1-910b-ubuntu22.04-py3.11-v0.7.0", "by format",
                  "docs/ascend_tutorial/dockerfile_build_guidance.rst@v0.7.0 (release format "
                  "verl-{CANN}-{NPU}-{OS}-{python}-{release}), docker/ascend/Dockerfile.ascend_8.3.rc1_a2@v0.7.0",
                  "the seeds' image"),
    OfficialImage("0.7.0", "a3", QUAY + "verl-8.3.rc1-a3-ubuntu22.04-py3.11-v0.7.0", "by format",
                  "docs/ascend_tutorial/dockerfile_build_guidance.rst@v0.7.0, "
                  "docker/ascend/Dockerfile.ascend_8.3.rc1_a3@v0.7.0"),
    OfficialImage("0.7.1", "a2", QUAY + "verl-8.5.0-910b-ubuntu22.04-py3.11-v0.7.1", "by format",
                  "docs/ascend_tutorial/get_start/dockerfile_build_guidance.rst@v0.8.0 (release/v0.7.1: "
                  "Dockerfile.ascend_8.5.0_a2_v0.7.1)"),
    OfficialImage("0.7.1", "a3", QUAY + "verl-8.5.0-a3-ubuntu22.04-py3.11-v0.7.1", "by format",
                  "docs/ascend_tutorial/get_start/dockerfile_build_guidance.rst@v0.8.0 (release/v0.7.1: "
                  "Dockerfile.ascend_8.5.0_a3_v0.7.1)"),
    OfficialImage("0.8.", "a2", QUAY + "v0.8.0-cann9.0.0-torch2.9.0post2-910b-ubuntu22.04-py3.11-vllm", "by format",
                  "docs/ascend_tutorial/get_start/dockerfile_build_guidance.rst@v0.9.0 (release format "
                  "{release}-{CANN}-{TorchNPU}-{product}-{OS}-{python}-{backend}; Dockerfile.ascend_9.0.0_a2_v0.8.0)"),
    OfficialImage("0.8.", "a3", QUAY + "v0.8.0-cann9.0.0-torch2.9.0post2-a3-ubuntu22.04-py3.11-vllm", "seen",
                  "docs/ascend_tutorial/model_support/examples/qwen3_5_megatron_npu.md@v0.9.0"),
    OfficialImage("0.9.", "a2", QUAY + "latest-cann9.0.0-torch_npu2.9.0post2-910b-ubuntu22.04-py3.11-vllm", "seen",
                  ".github/workflows/e2e_ascend.yml@v0.9.0 (CI mirror of the same tag)",
                  "no v0.9 release image is listed in verl's docs at v0.9.0: a daily build (tracks verl main)"),
    OfficialImage("0.9.", "a3", QUAY + "latest-cann9.0.0-torch_npu2.9.0post2-a3-ubuntu22.04-py3.11-vllm", "seen",
                  ".github/workflows/e2e_ascend.yml@v0.9.0 (CI mirror of the same tag)",
                  "no v0.9 release image is listed in verl's docs at v0.9.0: a daily build (tracks verl main)"),
)

# the newest rows first: an unknown newer release gets the newest image of its device
_ORDER = ("0.9.", "0.8.", "0.7.1", "0.7.0", "0.6.", "0.6.1", "0.6.0")


def _serves(release: str, version: str) -> bool:
    return version == release or (release.endswith(".") and version.startswith(release))


def official_image(version: str, device: str, npu: str = "a2") -> OfficialImage | None:
    """The table's row for this verl version and device ("gpu", or "npu" with npu "a2"/"a3")."""
    kind = "gpu" if device == "gpu" else npu
    release = version.split("+")[0]
    for row in TABLE:
        if row.device == kind and _serves(row.release, release):
            return row
    return None


def default_image(version: str, device: str, npu: str = "a2") -> str:
    """The default --image: the table's row, else the newest official image for the device."""
    row = official_image(version, device, npu)
    if row is None:
        kind = "gpu" if device == "gpu" else npu
        rows = sorted((r for r in TABLE if r.device == kind), key=lambda r: _ORDER.index(r.release))
        row = rows[0]
    return row.image
