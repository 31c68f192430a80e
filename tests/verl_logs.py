"""Synthetic verl logs in the real shapes (shared/reference/verl-keys.md §5), for tests and benchmarks.

A healthy run's log is mostly noise that must not be taken for a failure: the config dump
(which names verl's default model path for the unused critic), vLLM INFO lines, Ray and
torch_npu warnings, the benign vLLM commit-hash warning, and metric keys such as
`timing_s/update_actor` that name phases without being a failure.
"""

from __future__ import annotations

import os

HEADER = [
    "(TaskRunner pid=2231) TaskRunner hostname: node-0, PID: 2231",
    "(TaskRunner pid=2231) {'actor_rollout_ref': {'actor': {'checkpoint': {'save_contents': ['model', 'optimizer', 'extra']}, "
    "'ppo_mini_batch_size': 32, 'ppo_micro_batch_size_per_gpu': 1}, 'model': {'path': '/mnt/public/Qwen3-8B'}}, "
    "'critic': {'model': {'path': '~/models/deepseek-llm-7b-chat', 'tokenizer_path': '~/models/deepseek-llm-7b-chat'}}, "
    "'trainer': {'logger': ['console', 'swanlab'], 'total_epochs': 1}}",
    "(TaskRunner pid=2231) Using dataset class: RLHFDataset",
    "(TaskRunner pid=2231) dataset len: 17917",
    "(pid=3101) /usr/local/lib/python3.11/site-packages/vllm/connections.py:8: RuntimeWarning: Failed to read commit hash:",
    "(pid=3101) No module named 'vllm._version' [repeated 8x across cluster]",
    "(WorkerDict pid=3101) INFO 11-29 10:00:01 [__init__.py:239] Automatically detected platform npu.",
    "(WorkerDict pid=3101) [W compiler_depend.ts:133] Warning: Warning: Device do not support double dtype now, dtype cast repalce with float. (function operator())",
    "(WorkerDict pid=3101) Model config after override: Qwen3Config { \"num_hidden_layers\": 36 }",
    "(WorkerDict pid=3101) INFO 11-29 10:01:12 [kv_cache_utils.py:716] GPU KV cache size: 312,480 tokens",
    "(WorkerDict pid=3101) INFO 11-29 10:01:12 [kv_cache_utils.py:720] Maximum concurrency for 21,504 tokens per request: 14.53x",
    "(TaskRunner pid=2231) Size of train dataloader: 560, Size of val dataloader: 1",
    "(TaskRunner pid=2231) Total training steps: {total}",
    "(TaskRunner pid=2231) swanlab: Tracking run with swanlab version 0.6.4",
    "(TaskRunner pid=2231) swanlab: 🚀 View run at https://swanlab.cn/@rl-team/verl-dapo/runs/x1y2z3",
    "(TaskRunner pid=2231) Training from scratch",
]

NOISE = [
    "(WorkerDict pid=3101) INFO 11-29 10:02:{s:02d} [block_pool.py:321] Successfully reset prefix cache",
    "(WorkerDict pid=3102) WARNING 11-29 10:02:{s:02d} [utils.py:112] Sleep mode freed 48.21 GiB memory, 3.10 GiB memory is still in use.",
    "(WorkerDict pid=3103) /usr/local/lib/python3.11/site-packages/torch_npu/utils/storage.py:38: UserWarning: TypedStorage is deprecated.",
    "(raylet) [2025-11-29 10:02:{s:02d},114 I 1002 1002] (raylet) metrics_agent_client.cc:42: Exporting metrics.",
    "(WorkerDict pid=3104) kwargs: {{'n': 16, 'logprobs': 0, 'max_tokens': 20480, 'detokenize': False, 'temperature': 1.0}}",
    "(TaskRunner pid=2231) num_prompt_in_batch=27 < prompt_bsz=32",
    "(TaskRunner pid=2231) num_gen_batches=1. Keep generating...",
    "(WorkerDict pid=3105) [rank5]:[W1129 10:02:{s:02d}.123 ProcessGroupHCCL.cpp:4011] Warning: TORCH_HCCL_AVOID_RECORD_STREAMS is deprecated",
    "(WorkerDict pid=3101) INFO 11-29 10:02:{s:02d} [gpu_model_runner.py:1890] Graph capturing finished in 12 secs, took 0.41 GiB",
    "(WorkerDict pid=3106) validation generation end",
]


def metric_line(step: int, *, numpy_repr: bool = False, pg_loss: str | None = None) -> str:
    def num(value: float) -> str:
        return f"np.float64({value})" if numpy_repr else f"{value}"

    values = {
        "training/global_step": str(step), "training/epoch": "0",
        "actor/entropy": num(0.41), "actor/pg_loss": pg_loss or num(-0.0123), "actor/pg_clipfrac": num(0.0021),
        "actor/ppo_kl": num(0.0001), "actor/grad_norm": num(0.231), "actor/lr": num(1e-06),
        "critic/score/mean": num(round(0.1 + step * 0.001, 4)), "critic/score/max": num(1.0), "critic/score/min": num(-1.0),
        "critic/rewards/mean": num(0.11), "critic/advantages/mean": num(0.0), "critic/advantages/max": num(2.1),
        "critic/returns/mean": num(0.0), "response_length/mean": num(4211.5), "response_length/max": num(20480.0),
        "response_length/clip_ratio": num(0.031), "prompt_length/mean": num(183.2), "prompt_length/max": num(811.0),
        "timing_s/gen": num(61.2), "timing_s/reward": num(3.1), "timing_s/old_log_prob": num(12.4),
        "timing_s/ref": num(11.9), "timing_s/adv": num(0.2), "timing_s/update_actor": num(40.3),
        "timing_s/save_checkpoint": num(0.0), "timing_s/step": num(130.2),
        "timing_per_token_ms/gen": num(0.021), "timing_per_token_ms/update_actor": num(0.012),
        "perf/total_num_tokens": num(2265482.0), "perf/time_per_step": num(130.2), "perf/throughput": num(2175.1),
        "perf/max_memory_allocated_gb": num(41.2), "perf/max_memory_reserved_gb": num(52.8),
        "perf/cpu_memory_used_gb": num(188.4), "train/num_gen_batches": "1",
    }
    return "(TaskRunner pid=2231) step:" + str(step) + " - " + " - ".join(f"{k}:{v}" for k, v in values.items())


def progress_line(step: int, total: int) -> str:
    percent = step * 100 // total
    return (f"(TaskRunner pid=2231) Training Progress: {percent:3d}%|█▏        | {step}/{total} "
            f"[{step * 2:02d}:10<{(total - step) * 2:02d}:10, 130.20s/it]")


def step_block(step: int, total: int, noise_lines: int = 30) -> list[str]:
    lines = [NOISE[i % len(NOISE)].format(s=i % 60) for i in range(noise_lines)]
    lines.append(metric_line(step))
    lines.append(progress_line(step, total))
    if step % 50 == 0:
        lines.append(f"(TaskRunner pid=2231) local_global_step_folder: /ckpt/verl-dapo/qwen3-8b/global_step_{step}")
    return lines


def healthy_lines(steps: int, total: int | None = None) -> list[str]:
    total = total or steps
    lines = [line.replace("{total}", str(total)) for line in HEADER]
    for step in range(1, steps + 1):
        lines += step_block(step, total)
    return lines


def write_big_log(path: str | os.PathLike, size: int, tail: list[str] | None = None) -> int:
    """Write about `size` bytes of healthy steps, then `tail`; returns the number of steps written."""
    total = 10_000_000
    noise = ("\n".join(NOISE[i % len(NOISE)].format(s=i % 60) for i in range(30)) + "\n").encode()
    with open(path, "wb") as handle:
        written = handle.write(("\n".join(line.replace("{total}", str(total)) for line in HEADER) + "\n").encode())
        step = 0
        while written < size:
            step += 1
            block = noise + (metric_line(step) + "\n" + progress_line(step, total) + "\n").encode()
            written += handle.write(block)
        if tail:
            handle.write(("\n".join(tail) + "\n").encode())
    return step
