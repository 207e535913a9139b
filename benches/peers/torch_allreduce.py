"""torch.distributed's all-reduce over NCCL, one process a GPU (every GPU by default), as
`allreduce-compare` measures Headroom's: f32 tensors from 1 MiB to 256 MiB, each call followed by
a synchronization (Headroom's collectives wait for their completion), the slowest rank's median
of 20 calls after 3 warm-ups. Prints one JSON line per size with the keys `op, dtype, bytes,
ranks, seconds, alg_gbps, bus_gbps` (bus: NCCL's convention, the algorithm bandwidth times
2(n-1)/n).

    python3 benches/peers/torch_allreduce.py [--ranks N] [--smoke] [--device cpu]

`--device cpu` runs gloo between CPU processes (a dry run: its figures mean nothing).
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

RUNS = 20


def rank_main(rank: int, ranks: int, sizes: list[int], device: str, port: int, out) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=ranks)
    on = torch.device(f"cuda:{rank}") if device == "cuda" else torch.device("cpu")
    if device == "cuda":
        torch.cuda.set_device(on)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    medians = []
    for size in sizes:
        tensor = torch.zeros(size // 4, dtype=torch.float32, device=on)
        for _ in range(3):
            dist.all_reduce(tensor)
        sync()
        runs = []
        for _ in range(RUNS):
            began = time.perf_counter()
            dist.all_reduce(tensor)
            sync()
            runs.append(time.perf_counter() - began)
        medians.append(sorted(runs)[RUNS // 2])
    out.put((rank, medians))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    args = parser.parse_args()
    ranks = args.ranks or (torch.cuda.device_count() if args.device == "cuda" else 2)
    sizes = [1 << 12, 1 << 16] if args.smoke else [1 << p for p in range(20, 29, 2)]
    context = mp.get_context("spawn")
    out = context.SimpleQueue()
    port = 29500 + os.getpid() % 1000
    processes = [
        context.Process(target=rank_main, args=(rank, ranks, sizes, args.device, port, out))
        for rank in range(ranks)
    ]
    for process in processes:
        process.start()
    times = dict(out.get() for _ in processes)
    for process in processes:
        process.join()
        if process.exitcode != 0:
            raise SystemExit(f"a rank exited with {process.exitcode}")
    for at, size in enumerate(sizes):
        seconds = max(times[rank][at] for rank in range(ranks))
        alg = size / seconds / 1e9
        bus = alg * 2 * (ranks - 1) / ranks
        record = {"op": "all_reduce", "dtype": "f32", "bytes": size, "ranks": ranks,
                  "seconds": seconds, "alg_gbps": round(alg, 3), "bus_gbps": round(bus, 3)}
        print(json.dumps(record, separators=(",", ":")))


if __name__ == "__main__":
    main()
