"""The all-reduce `check --fabric` runs where the training runs (host, container, other nodes): stdlib and torch only.

Run as `python3 -c SOURCE ARGS_JSON` on each node: it forks one rank per device, each joins one
torch.distributed group over every device of every node (HCCL on NPUs, NCCL on GPUs, gloo on CPU
where there is neither), checks the sum, times `iters` all-reduces of `mb` MB and prints one JSON line:
{"rank", "node", "device", "backend", "ok", "seconds", "busbw_gbps"} or {"rank", ..., "ok": false, "error"}.
Bus bandwidth as nccl-tests defines it: bytes / time x 2(n-1)/n.
"""

import importlib.util
import json
import multiprocessing
import os
import sys
import time


def say(record):
    """One JSON line in one write(2): the ranks print at once, and a pipe keeps a write under 4 KiB whole (print's
    separate writes of the text and the newline let two ranks' lines run together)."""
    os.write(1, (json.dumps(record) + "\n").encode())


def pick_backend(kind):
    if kind == "npu" and importlib.util.find_spec("torch_npu") is not None:
        return "hccl", "torch_npu importable"
    if kind == "gpu" and os.path.exists("/dev/nvidia0"):
        return "nccl", "NVIDIA devices present"
    why = "torch_npu is not importable" if kind == "npu" else "no /dev/nvidia0" if kind == "gpu" else "no accelerator"
    return "gloo", why


def rank_main(args, rank, local, device, backend):
    result = {"rank": rank, "node": args["node"], "device": device, "backend": backend, "ok": False}
    try:
        os.environ.update(args["env"])
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = args["master_addr"], str(args["master_port"])
        import datetime

        import torch
        import torch.distributed as dist

        where = "cpu"
        if backend == "hccl":
            import torch_npu  # noqa: F401

            torch.npu.set_device(device)
            where = f"npu:{device}"
        elif backend == "nccl":
            torch.cuda.set_device(device)
            where = f"cuda:{device}"
        world = args["world"]
        dist.init_process_group(backend, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=args["timeout"]))
        numel = max(1, int(args["mb"] * (1 << 20)) // 4)
        tensor = torch.ones(numel, dtype=torch.float32, device=where)
        dist.all_reduce(tensor)
        if float(tensor[0].item()) != float(world):
            raise RuntimeError(f"the all-reduce summed to {tensor[0].item()}, not {world}")
        dist.barrier()
        started = time.perf_counter()
        for _ in range(args["iters"]):
            dist.all_reduce(tensor)
        float(tensor[0].item())  # waits for the device
        seconds = (time.perf_counter() - started) / args["iters"]
        result.update(ok=True, seconds=seconds,
                      busbw_gbps=numel * 4 / seconds / 1e9 * (2 * (world - 1) / world if world > 1 else 1))
        dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - reported, never a traceback
        text = " ".join(str(exc).split())[:400]
        result["error"] = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    say(result)
    os._exit(0)


def main():
    args = json.loads(sys.argv[1])
    backend, why = pick_backend(args["kind"]) if args["backend"] == "auto" else (args["backend"], "asked for")
    say({"node": args["node"], "backend": backend, "why": why, "python": sys.executable})  # which python3 ran it
    context = multiprocessing.get_context("fork")
    ranks = []
    per_node = len(args["devices"])
    for local, device in enumerate(args["devices"]):
        rank = args["node_rank"] * per_node + local
        process = context.Process(target=rank_main, args=(args, rank, local, device, backend))
        process.start()
        ranks.append((rank, device, process))
    deadline = time.monotonic() + args["timeout"] + args.get("startup", 120)  # importing torch on a loaded host
    for rank, device, process in ranks:
        process.join(max(0.1, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            say({"rank": rank, "node": args["node"], "device": device, "backend": backend, "ok": False,
                 "error": f"no answer within {args['timeout']} s (hung at the first collective)"})


if __name__ == "__main__":
    main()
