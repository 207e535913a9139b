"""f32 GEMM throughput of PyTorch on the CPU, for the shapes of `gemm-compare`.

Prints one JSON line per shape with the keys op, dtype, shape, gflops, like
`cargo run --release -p headroom-benches --bin gemm-compare`. See README.md beside this file.
"""

import json
import os
import statistics
import time

import torch

RUNS = 5
SHAPES = [
    (256, 256, 256),
    (512, 512, 512),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (1024, 768, 2304),
    (1024, 768, 768),
    (1024, 768, 3072),
    (1024, 3072, 768),
]


def main() -> None:
    torch.set_num_threads(os.cpu_count() or 1)
    for m, k, n in SHAPES:
        a = torch.randn(m, k, dtype=torch.float32)
        b = torch.randn(k, n, dtype=torch.float32)
        torch.matmul(a, b)
        times = []
        for _ in range(RUNS):
            start = time.perf_counter()
            torch.matmul(a, b)
            times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        gflops = 2 * m * k * n / seconds / 1e9
        line = {"op": "gemm", "dtype": "f32", "shape": f"{m}x{k}x{n}", "gflops": round(gflops, 2)}
        print(json.dumps(line, separators=(",", ":")))


if __name__ == "__main__":
    main()
