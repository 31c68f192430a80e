"""Device platforms: what NPU and GPU need in the environment and from Ray.

These are not verl keys (those live in the profiles) but the device and network
variables that Ascend CANN/HCCL, NVIDIA NCCL, vLLM and Ray read.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Platform:
    name: str
    visible_devices_var: str
    ray_resource: str  # the Ray resource verl asks for ("NPU" / "GPU")
    ifname_vars: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    set_env_scripts: tuple[str, ...] = ()

    def ray_resource_args(self, count: int) -> list[str]:
        """`ray start` arguments that register `count` devices of this platform (one argv item each)."""
        if self.ray_resource == "GPU":
            return [f"--num-gpus={count}"]
        return [f'--resources={{"{self.ray_resource}": {count}}}']


NPU = Platform(
    name="npu",
    visible_devices_var="ASCEND_RT_VISIBLE_DEVICES",
    ray_resource="NPU",
    ifname_vars=("HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"),
    env=(
        ("HCCL_CONNECT_TIMEOUT", "1500"),
        ("HCCL_EXEC_TIMEOUT", "3600"),
        ("VLLM_USE_V1", "1"),
        ("VLLM_ASCEND_ENABLE_NZ", "0"),
        ("TASK_QUEUE_ENABLE", "1"),
        ("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True"),
        ("HYDRA_FULL_ERROR", "1"),
        ("RAY_DEDUP_LOGS", "0"),
    ),
    # Both CANN layouts: ascend-toolkit (<= 8.2) and cann/ (8.3+, the seeds' image).
    set_env_scripts=(
        "/usr/local/Ascend/ascend-toolkit/set_env.sh",
        "/usr/local/Ascend/cann/ascend-toolkit/set_env.sh",
        "/usr/local/Ascend/cann/set_env.sh",
        "/usr/local/Ascend/nnal/atb/set_env.sh",
        "/usr/local/Ascend/cann/nnal/atb/set_env.sh",
    ),
)

GPU = Platform(
    name="gpu",
    visible_devices_var="CUDA_VISIBLE_DEVICES",
    ray_resource="GPU",
    ifname_vars=("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"),
    env=(
        ("VLLM_USE_V1", "1"),
        ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
        ("HYDRA_FULL_ERROR", "1"),
        ("RAY_DEDUP_LOGS", "0"),
    ),
)

PLATFORMS = {"npu": NPU, "gpu": GPU}
MAX_DEVICES_PER_NODE = {"npu": 16, "gpu": 16}


def rollout_memory_default(device: str, engine: str, split: bool = False) -> tuple[float, str]:
    """(rollout.gpu_memory_utilization, why) for a device kind and rollout engine, when the user gives none.

    Each kind has its own reason: a default chosen for one must not be justified by another's problem (in a split
    mode no actor sleeps beside the rollout).
    """
    if device == "npu" and split:
        return 0.6, ("NPU, rollout on devices of its own (no actor beside it): the NPU default kept; verl's "
                     "one-step-off NPU script sets 0.8 (--gpu-memory-utilization 0.8); lowered further on a "
                     "KV-cache OOM")
    if device == "npu":
        return 0.6, ("NPU: vllm-ascend runs out of KV-cache memory at verl's NPU scripts' 0.9 beside the sleeping "
                     "actor; lowered further on a KV-cache OOM")
    if engine == "sglang":
        return 0.6, "GPU + SGLang: the middle of verl's SGLang example scripts (0.5-0.85)"
    return 0.8, ("GPU + vLLM: what verl's GPU DAPO scripts set (recipe/dapo/test_dapo_7b_math.sh, "
                 "run_dapo_qwen2.5_32b.sh at v0.7.0)")
