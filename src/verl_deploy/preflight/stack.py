"""The Ascend stack each verl release documents as tested, and check's comparison with what is installed.

Read from verl's own install guidance at each tag (github.com/verl-project/verl):
- v0.6.0, v0.6.1, v0.7.0, v0.7.1: docs/ascend_tutorial/ascend_quick_start.rst (the "software | version"
  table, and the `git clone -b/--branch` lines for vllm, vllm-ascend, MindSpeed and Megatron-LM)
- v0.8.0, v0.9.0: docs/ascend_tutorial/get_start/install_guidance.rst ("关键版本支持与依赖" table)
The images are the ones those docs (or the seeds, for 0.7.0) name; where a release's docs name none
the fix says to build the stack from the install guidance instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from verl_deploy.preflight.report import Area


@dataclass(frozen=True)
class Stack:
    release: str
    versions: Mapping[str, str]  # component -> documented version (keys as software.PACKAGES, plus "cann")
    source: str  # the doc at the tag
    image: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


_QS = "docs/ascend_tutorial/ascend_quick_start.rst"
_IG = "docs/ascend_tutorial/get_start/install_guidance.rst"
STACKS: dict[str, Stack] = {
    "0.6.0": Stack("0.6.0", {"cann": "8.1.RC1", "torch": "2.5.1", "torch_npu": "2.5.1", "vllm": "0.7.3",
                             "vllm_ascend": "0.7.3.post1"}, f"verl v0.6.0 {_QS}"),
    "0.6.1": Stack("0.6.1", {"cann": "8.2.RC1", "torch": "2.5.1", "torch_npu": "2.5.1", "vllm": "0.9.1",
                             "vllm_ascend": "0.9.1"}, f"verl v0.6.1 {_QS}"),
    "0.7.0": Stack("0.7.0", {"cann": "8.3.RC1", "torch": "2.7.1", "torch_npu": "2.7.1", "vllm": "0.11.0",
                             "vllm_ascend": "0.11.0rc1", "megatron": "0.12.1"}, f"verl v0.7.0 {_QS}",
                   "quay.io/ascend/verl:verl-8.3.rc1-910b-ubuntu22.04-py3.11-v0.7.0",
                   ("MindSpeed at commit f2b0977e with Megatron-LM core_v0.12.1",)),
    "0.7.1": Stack("0.7.1", {"cann": "8.5.0", "torch": "2.8.0", "torch_npu": "2.8.0", "vllm": "0.13.0",
                             "vllm_ascend": "0.13.0", "megatron": "0.12.1"}, f"verl v0.7.1 {_QS}",
                   notes=("MindSpeed 2.3.0_core_r0.12.1 with Megatron-LM core_v0.12.1",)),
    "0.8.0": Stack("0.8.0", {"cann": "9.0.0", "torch": "2.9.0", "torch_npu": "2.9.0.post2", "vllm": "0.18.0",
                             "vllm_ascend": "0.18.0", "megatron": "0.16.0", "transformers": "5.3.0"}, f"verl v0.8.0 {_IG}",
                   "quay.io/ascend/verl:v0.8.0-cann9.0.0-torch2.9.0post2-a3-ubuntu22.04-py3.11-vllm",
                   ("MindSpeed core_r0.16.0 with Megatron-LM core_r0.16.0",)),
    "0.9.0": Stack("0.9.0", {"cann": "9.0.0", "torch": "2.10.0", "torch_npu": "2.10.0.post2", "vllm": "0.23.0",
                             "vllm_ascend": "0.23.0", "megatron": "0.16.0", "transformers": "5.10.4"},
                   f"verl v0.9.0 {_IG}", notes=("MindSpeed core_r0.16.0 with Megatron-LM core_r0.16.0",)),
}
STACKS["0.9.1"] = Stack("0.9.1", STACKS["0.9.0"].versions, STACKS["0.9.0"].source + " (0.9.1: same stack)",
                        notes=STACKS["0.9.0"].notes)
LABELS = {"cann": "CANN", "torch": "torch", "torch_npu": "torch_npu", "vllm": "vllm", "vllm_ascend": "vllm-ascend",
          "megatron": "megatron-core", "transformers": "transformers"}


def _release_parts(version: str) -> tuple[str, ...]:
    """`2.7.1+cpu` -> ("2", "7", "1"); `8.3.RC1` -> ("8", "3", "rc1"); `0.11.0rc1` -> ("0", "11", "0rc1")."""
    return tuple(p for p in re.split(r"[.+]", version.strip().lower()) if p)[:3]


def matches(installed: str, documented: str) -> bool:
    """Same release: major.minor.patch agree (build tags like +cpu and .post2 ignored for torch/torch_npu)."""
    got, want = _release_parts(installed), _release_parts(documented)
    return got[:len(want)] == want or got[:3] == want[:3]


def stack_for(version: str) -> Stack | None:
    release = re.match(r"\d+\.\d+\.\d+", version or "")
    return STACKS.get(release.group(0)) if release else None


def judge_stack(verl_version: str, versions: Mapping[str, str | None], cann_version: str | None) -> Area:
    """Rows comparing each installed component with the release's documented stack."""
    area = Area("stack", f"Ascend stack vs verl {verl_version}")
    stack = stack_for(verl_version)
    if stack is None:
        area.info("stack", f"no documented Ascend stack known for verl {verl_version}")
        return area
    installed = dict(versions)
    installed["cann"] = cann_version
    fix = (f"use the image {stack.image}" if stack.image else
           f"install the stack from {stack.source}") + f" (verl {stack.release} is tested with it)"
    compared = {}
    for component, documented in stack.versions.items():
        got = installed.get(component)
        label = LABELS[component]
        compared[component] = {"installed": got, "documented": documented}
        if not got or got == "present":
            area.info(label, f"version not readable (verl {stack.release} documents {documented})")
        elif matches(got, documented):
            area.ok(label, f"{got} (verl {stack.release} documents {documented})")
        else:
            area.warning(label, f"{got} installed, verl {stack.release} documents {documented} ({stack.source})", fix)
    area.data = {"release": stack.release, "source": stack.source, "image": stack.image, "notes": list(stack.notes),
                 "components": compared}
    return area
