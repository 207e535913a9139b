"""PyTorch on the GPU, for the cases of `cuda-compare`: GEMM throughput by dtype, copy bandwidth,
elementwise, softmax and layer-norm bandwidth, and the gradient of an embedding. Prints one JSON line per case with the keys
op, dtype, shape, value, unit, as `cuda-compare` does. See README.md beside this file.

    python3 benches/peers/torch_cuda.py                          # the sizes the figures use
    python3 benches/peers/torch_cuda.py --smoke --device cpu     # every case, small, no GPU

`--smoke` uses the sizes of `cuda-compare --smoke`, so that the two sides' lines match;
`--device cpu` lets the comparison run through without a GPU (its figures mean nothing).
"""

import argparse
import json
import statistics
import time

import torch
from torch_embedding import cases as embedding_cases, draw

RUNS = 10

# (square GEMM sizes, f32 elements of the bandwidth cases, the embedding gradient's positions, row
# length and large vocabulary), as in cuda-compare.
FULL = ((4096, 8192), 1 << 28, (8 * 2048, 768, 50257))
SMOKE = ((96,), 1 << 14, (256, 8, 1000))


def timed(device: torch.device, work) -> float:
    def wait() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(3):
        work()
    wait()
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        work()
        wait()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def emit(op: str, dtype: str, shape: str, value: float, unit: str) -> None:
    line = {"op": op, "dtype": dtype, "shape": shape, "value": round(value, 3), "unit": unit}
    print(json.dumps(line, separators=(",", ":")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="every case at a small size")
    parser.add_argument("--device", default="cuda", help="cuda (the default), cuda:N or cpu")
    args = parser.parse_args()
    sizes, n, (positions, dim, large) = SMOKE if args.smoke else FULL
    device = torch.device(args.device)
    torch.manual_seed(8192)
    for size in sizes:
        for name, dtype, tf32 in (
            ("bf16", torch.bfloat16, False),
            ("f16", torch.float16, False),
            ("tf32", torch.float32, True),
            ("f32", torch.float32, False),
        ):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            # Uniform in [-1, 1), as cuda-compare's operands are.
            a = (torch.rand(size, size, device=device) * 2 - 1).to(dtype)
            b = (torch.rand(size, size, device=device) * 2 - 1).to(dtype)
            seconds = timed(device, lambda: torch.matmul(a, b))
            emit("gemm", name, f"{size}x{size}x{size}", 2 * size**3 / seconds / 1e12, "TFLOP/s")
            del a, b
    x = torch.zeros(n, device=device)
    y = torch.zeros(n, device=device)
    nbytes = 4 * n
    emit("copy", "f32", str(n), 2 * nbytes / timed(device, lambda: x.clone()) / 1e9, "GB/s")
    emit("exp", "f32", str(n), 2 * nbytes / timed(device, lambda: torch.exp(x)) / 1e9, "GB/s")
    gelu = lambda: torch.nn.functional.gelu(x, approximate="tanh")  # noqa: E731
    emit("gelu", "f32", str(n), 2 * nbytes / timed(device, gelu) / 1e9, "GB/s")
    emit("add", "f32", str(n), 3 * nbytes / timed(device, lambda: x + y) / 1e9, "GB/s")
    for length in (1024, 4096):
        rows = n // length
        shape = f"{rows}x{length}"
        xs, dys = x.view(rows, length), y.view(rows, length)
        gamma, beta = torch.ones(length, device=device), torch.zeros(length, device=device)
        softmax = lambda: torch.softmax(xs, dim=-1)  # noqa: E731
        emit("softmax", "f32", shape, 2 * nbytes / timed(device, softmax) / 1e9, "GB/s")
        # What autograd runs for softmax's gradient, from the output and the upstream gradient.
        backward = lambda: torch.ops.aten._softmax_backward_data(dys, xs, -1, torch.float32)  # noqa: E731
        emit("softmax_backward", "f32", shape, 3 * nbytes / timed(device, backward) / 1e9, "GB/s")
        norm = lambda: torch.nn.functional.layer_norm(xs, (length,), gamma, beta, 1e-5)  # noqa: E731
        emit("layer_norm", "f32", shape, 2 * nbytes / timed(device, norm) / 1e9, "GB/s")
    # The embedding's gradient, as autograd runs it for torch.nn.functional.embedding.
    dy = torch.arange(positions * dim, dtype=torch.float32).remainder(1000).div(1000).sub(0.5)
    dy = dy.view(positions, dim).to(device)
    for spread, vocab in embedding_cases(large):
        ids = draw(spread, positions, vocab).to(device)
        backward = lambda: torch.ops.aten.embedding_dense_backward(dy, ids, vocab, -1, False)  # noqa: E731
        gbps = (positions + vocab) * dim * 4 / timed(device, backward) / 1e9
        emit("embedding_backward", "f32", f"{positions}x{dim} into {vocab} {spread}", gbps, "GB/s")


if __name__ == "__main__":
    main()
