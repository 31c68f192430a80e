"""A stand-in for verl's DAPO / one-step-off trainers, for launch tests (no accelerator, no verl).

Installed by the tests as `recipe/dapo/main_dapo.py` (and the one-step-off entry) in a temporary
verl directory, so the generated run_training.sh runs it exactly as it would run verl. It reads
the Hydra overrides it is given, prints verl's real log formats (Total training steps, the tqdm
bar, `step:N - key:value` metrics, the SwanLab link, checkpoint folders), saves
`global_step_N` checkpoints with `latest_checkpointed_iteration.txt`, resumes from them, and
fails with the real log lines from shared/reference/failures.md.

STANDIN_FAIL (environment): `device_oom` (OOM at step STANDIN_FAIL_STEP unless offload is on,
again two steps later unless recompute is on), `host_oom`, `kv_cache` (at engine start unless
gpu_memory_utilization <= 0.5), `hccl_timeout`, `hang` (stops making steps), `torn_checkpoint`
(at STANDIN_FAIL_STEP's save: writes half the folder, moves the tracker to it, then a device
OOM), `rollout_oom` (a device OOM in the rollout's vLLM server -- the standalone rollout pool of
separate-async / fully-async -- at step STANDIN_FAIL_STEP unless gpu_memory_utilization <= 0.5), `resume_noop` (a resumed run exits 0 at once, no step), `quit_early` (exits 0 at
STANDIN_FAIL_STEP without verl's final line). STANDIN_RESPONSE_START / STANDIN_RESPONSE_GROWTH: the logged
response_length/mean at step 0 and its growth per step (default 1000, 40). STANDIN_LINES_FILE: its bytes are written into the log
as they are, once, before step STANDIN_LINES_STEP (default 1): hostile lines for the watcher. Checkpoints hold the files verl's FSDP or Megatron
checkpoint manager writes (see src/verl_deploy/runs/checkpoints.py). STANDIN_STEP_SECONDS sets
the time per step. STANDIN_SERVER_FILE: a detached
"rollout server" (its own session, like a vLLM server) holds that file open as a device. STANDIN_RAY=1 first connects to the Ray cluster as verl's driver does (`ray.init()`
with RAY_ADDRESS set), which needs the cluster's token when it uses token authentication.
"""

import os
import sys
import time

# Imported (start_verl.sh checks that the entry module imports before it starts Ray) it does nothing,
# like verl's own main_dapo.py; run with `python3 -m` it trains.
if __name__ == "__main__":
    args = {}
    for arg in sys.argv[1:]:
        if "=" in arg and not arg.startswith("--"):
            key, _, value = arg.lstrip("+").partition("=")
            args[key] = value.strip("'\"")  # Hydra quoting of strings


    def arg(suffix, default=None):
        for key, value in args.items():
            if key == suffix or key.endswith("." + suffix):
                return value
        return default


    def wait_for_stuck_allreduce():
        """`hang`: sleeps here forever, like a rank waiting on a collective (the stall evidence test looks for this name)."""
        while True:
            time.sleep(1)


    def say(line):
        print(f"(TaskRunner pid={os.getpid()}) {line}", flush=True)


    def peak_metrics():
        """verl's device peak metrics on the step line (engine_workers.py:218), when STANDIN_PEAK_GB asks for them."""
        peak = os.environ.get("STANDIN_PEAK_GB")
        if not peak:
            return ""
        return f" - perf/max_memory_allocated_gb:{float(peak) - 1:.2f} - perf/max_memory_reserved_gb:{float(peak):.2f}"


    total = int(arg("trainer.total_training_steps", arg("total_training_steps", "6")))
    save_freq = int(arg("trainer.save_freq", "2"))
    test_freq = int(arg("trainer.test_freq", "-1"))
    ckpt_dir = arg("trainer.default_local_dir", "checkpoints")
    offload = arg("param_offload") == "True"
    recompute = any(k.endswith("recompute_granularity") for k in args) or arg("enable_gradient_checkpointing") == "True"
    utilization = float(arg("rollout.gpu_memory_utilization", "0.6"))
    swanlab = "swanlab" in arg("trainer.logger", "")
    step_seconds = float(os.environ.get("STANDIN_STEP_SECONDS", "0.2"))
    fail = os.environ.get("STANDIN_FAIL", "")
    fail_step = int(os.environ.get("STANDIN_FAIL_STEP", "3"))
    # which verl trainer this is: the V1 trainer's mode, or fully-async's own config (their metric names differ)
    v1_mode = arg("trainer.v1.trainer_mode") if arg("trainer.use_v1") == "True" else None
    fully_async = arg("async_training.staleness_threshold") is not None

    say(f"{{'trainer': {{'total_training_steps': {total}, 'save_freq': {save_freq}}}}}")
    if os.environ.get("STANDIN_RAY") == "1":  # connect as verl's driver does: ray.init() with RAY_ADDRESS set
        import ray

        ray.init(log_to_driver=False)
        say(f"connected to the Ray cluster: {int(ray.cluster_resources().get('CPU', 0))} CPU")
        ray.shutdown()
    if os.environ.get("STANDIN_SERVER_FILE"):  # a rollout server that left the process group (setsid), holding a device
        import subprocess

        server = subprocess.Popen([sys.executable, "-c", "import sys, time; held = open(sys.argv[1], 'a'); time.sleep(3600)",
                                   os.environ["STANDIN_SERVER_FILE"]], start_new_session=True, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        say(f"rollout server started (pid {server.pid})")
    if fail == "kv_cache" and utilization > 0.5:
        print("(WorkerDict pid=77) INFO 11-29 10:01:12 [kv_cache_utils.py:716] profiling", flush=True)
        print("(EngineCore_DP0 pid=1102)   File \"/vllm-workspace/vllm/vllm/v1/core/kv_cache_utils.py\", line 699, "
              "in check_enough_kv_cache_memory", flush=True)
        print("(EngineCore_DP0 pid=1102) ValueError: No available memory for the cache blocks. Try increasing "
              "`gpu_memory_utilization` when initializing the engine.", flush=True)
        sys.exit(1)

    megatron = any("megatron" in a for a in sys.argv[1:] if a.startswith("--config-name"))
    latest = os.path.join(ckpt_dir, "latest_checkpointed_iteration.txt")
    start = 0
    resume_mode = arg("trainer.resume_mode", "auto")
    folder = None
    if resume_mode == "auto" and os.path.exists(latest):
        folder = os.path.join(ckpt_dir, f"global_step_{int(open(latest).read().strip())}")
    elif resume_mode == "resume_path":
        folder = arg("trainer.resume_from_path")
    if folder:
        start = int(folder.split("global_step_")[-1])
        say(f"Load from checkpoint folder: {folder}")
        say(f"Setting global step to {start}")
        if not os.path.exists(os.path.join(folder, "data.pt")):  # verl crashes loading a torn checkpoint
            print(f"FileNotFoundError: [Errno 2] No such file or directory: '{folder}/actor/dist_ckpt/metadata.json'",
                  flush=True)
            sys.exit(1)
        if fail == "resume_noop":
            sys.exit(0)
    else:
        say("Training from scratch")


    def save_checkpoint(step, torn=False):
        """The files verl's checkpoint managers and trainer write; torn: killed half-way through."""
        folder = os.path.join(ckpt_dir, f"global_step_{step}")
        actor = os.path.join(folder, "actor")
        if megatron:
            files = ["dist_ckpt/common.pt", "dist_ckpt/__0_0.distcp", "dist_ckpt/.metadata", "dist_ckpt/metadata.json",
                     "huggingface/config.json", "transformer_config.json"]
        else:
            files = [f"{kind}_world_size_2_rank_{rank}.pt" for kind in ("model", "optim", "extra_state") for rank in (0, 1)]
            files.append("huggingface/config.json")
        if torn:
            files = files[:2]
        for name in files:
            os.makedirs(os.path.dirname(os.path.join(actor, name)), exist_ok=True)
            open(os.path.join(actor, name), "w").write("weights")
        if not torn:
            open(os.path.join(folder, "data.pt"), "w").write("dataloader")
        open(latest, "w").write(str(step))
        say(f"local_global_step_folder: {folder}")

    def mode_metrics(step):
        """The metric names each async trainer logs (verl 0.9.1: trainer/ppo/v1/, experimental/fully_async_policy/)."""
        if fully_async:
            return (f" - fully_async/count/current_param_version:{step} - fully_async/count/stale_samples_processed:"
                    f"{2 * step} - fully_async/count/dropped_stale_samples:0 - fully_async/trainer/idle_ratio:0.12 - "
                    f"fully_async/partial/partial_ratio:0.25 - timing_s/update_weights:{step_seconds * 0.1:.3f}")
        if v1_mode in ("colocate_async", "separate_async"):
            extra = " - separate_async/switch/idle:0" if v1_mode == "separate_async" else ""
            return (f" - training/off_policy/trajectory_staleness/mean:0.5 - training/off_policy/evicted_samples:0"
                    f" - timing_s/update_weights:{step_seconds * 0.1:.3f}{extra}")
        return ""

    max_response = int(arg("data.max_response_length", "8192"))
    response_start = float(os.environ.get("STANDIN_RESPONSE_START", "1000"))
    response_growth = float(os.environ.get("STANDIN_RESPONSE_GROWTH", "40"))

    def response_lengths(step):
        """verl's response_length/mean, /max and /clip_ratio (metric_utils.compute_data_metrics): the mean grows by
        STANDIN_RESPONSE_GROWTH a step from STANDIN_RESPONSE_START, the longest is 1.5 x the mean up to the maximum,
        and clip_ratio (the share at the maximum) is non-zero only once the longest reaches it."""
        mean = min(max_response, response_start + response_growth * step)
        longest = min(max_response, int(mean * 1.5))
        clipped = min(0.5, 0.01 * step) if longest >= max_response else 0.0
        return (f"response_length/mean:{mean:.1f} - response_length/max:{longest} - response_length/min:{int(mean // 4)}"
                f" - response_length/clip_ratio:{clipped:.2f}")

    say(f"Total training steps: {total}")
    if swanlab:
        say("swanlab: 🚀 View run at https://swanlab.cn/@team/verl/runs/standin42")

    lines_step = int(os.environ.get("STANDIN_LINES_STEP", "1"))
    for step in range(start + 1, total + 1):
        time.sleep(step_seconds)
        if os.environ.get("STANDIN_LINES_FILE") and step == lines_step and start < lines_step:
            sys.stdout.flush()
            sys.stdout.buffer.write(open(os.environ["STANDIN_LINES_FILE"], "rb").read())
            sys.stdout.buffer.flush()
        if fail == "device_oom" and ((not offload and step >= fail_step) or (offload and not recompute and step >= fail_step + 2)):
            print("(WorkerDict pid=5107) Traceback (most recent call last):", flush=True)
            print("(WorkerDict pid=5107)   File \"/verl/verl/workers/megatron_workers.py\", line 711, in update_actor", flush=True)
            print("(WorkerDict pid=5107) RuntimeError: NPU out of memory. Tried to allocate 5.03 GiB (NPU 3; 60.96 GiB "
                  "total capacity; 49.47 GiB already allocated; 49.47 GiB current active; 1.32 GiB free; 57.55 GiB "
                  "reserved in total by PyTorch)", flush=True)
            print("ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_update_actor()", flush=True)
            if os.environ.get("STANDIN_MARK_FILE"):  # for benchmarks/recovery.py: when the OOM line was written
                open(os.environ["STANDIN_MARK_FILE"], "a").write(f"{time.time()}\n")
            time.sleep(float(os.environ.get("STANDIN_EXIT_DELAY", "0")))
            sys.exit(1)
        if fail == "rollout_oom" and step >= fail_step and utilization > 0.5:
            server = "FullyAsyncRollouter" if fully_async else "vLLMHttpServer"
            print(f"({server} pid=6120) Traceback (most recent call last):", flush=True)
            print(f"({server} pid=6120)   File \"/verl/verl/workers/rollout/vllm_rollout/vllm_async_server.py\", "
                  "line 812, in generate", flush=True)
            print(f"({server} pid=6120) torch.OutOfMemoryError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 5; "
                  "60.96 GiB total capacity; 58.10 GiB already allocated; 0.51 GiB free; 59.00 GiB reserved in total "
                  "by PyTorch)", flush=True)
            sys.exit(1)
        if fail == "host_oom" and step >= fail_step:
            print("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", flush=True)
            print("Memory on the node (IP: 10.0.0.2) where the task was running was 246.41GB / 251.54GB (0.979583), "
                  "which exceeds the memory usage threshold of 0.95.", flush=True)
            sys.exit(1)
        if fail == "hccl_timeout" and step >= fail_step:
            print("[rank1]:[E324 13:00:25.428029551 compiler_depend.ts:574] [Rank 1] Watchdog caught collective operation "
                  "timeout: WorkHCCL(SeqNum=196, OpType=ALLREDUCE, Timeout(ms)=3600000) ran for 3600185 milliseconds "
                  "before timing out.", flush=True)
            sys.exit(1)
        if fail == "quit_early" and step >= fail_step:
            sys.exit(0)
        if fail == "torn_checkpoint" and step == fail_step and not offload:
            save_checkpoint(step, torn=True)
            print("RuntimeError: NPU out of memory. Tried to allocate 5.03 GiB (NPU 3; 60.96 GiB total capacity; "
                  "49.47 GiB already allocated; 1.32 GiB free; 57.55 GiB reserved in total by PyTorch)", flush=True)
            sys.exit(1)
        if fail == "hang" and step >= fail_step:
            wait_for_stuck_allreduce()
        say(f"step:{step} - actor/pg_loss:-0.01 - actor/grad_norm:0.2 - critic/score/mean:{0.1 + step / 100:.3f} - "
            f"{response_lengths(step)} - "
            f"actor/entropy:{max(0.1, 0.6 - 0.01 * step):.2f} - actor/pg_clipfrac:0.002 - perf/throughput:900.0 - "
            f"timing_s/gen:{step_seconds * 0.6:.3f} - timing_s/update_actor:{step_seconds * 0.3:.3f} - "
            f"timing_s/step:{step_seconds:.3f}" + peak_metrics() + mode_metrics(step) + (
                f" - val-core/math_dapo/acc/mean@1:{0.2 + step / 100:.3f} - val-aux/math_dapo/score/mean@1:"
                f"{-0.6 + step / 50:.3f}" if test_freq > 0 and (step % test_freq == 0 or step == total) else ""))
        say(f"Training Progress: {100 * step // total:3d}%|#| {step}/{total} [00:0{step}<00:01, {step_seconds:.2f}s/it]")
        if save_freq > 0 and (step % save_freq == 0 or step == total):
            save_checkpoint(step)
    # verl: pprint(f"Final validation metrics: {last_val_metrics}"); pprint wraps a long string over lines
    final = {"val-aux/math_dapo/score/mean@1": round(-0.6 + total / 50, 3),
             "val-core/math_dapo/acc/mean@1": round(0.2 + total / 100, 3) if test_freq > 0 else 0.3,
             "val-aux/num_turns/min": 1}
    import pprint

    for line in pprint.pformat(f"Final validation metrics: {final}").splitlines():
        say(line)
