"""Bandwidth of the CUDA row kernels of kernels/src/ops/softmax/softmax.cu and norm/norm.cu
(softmax, layer normalization, softmax's backward pass) over row lengths, as a share of the device's copy
bandwidth, on a GPU.

    python3 scripts/norm-sweep.py            # on a machine with a GPU and CuPy

It compiles softmax.cu and norm.cu as the backend does (NVRTC, the prelude first), launches each
kernel as `kernels/src/ops/rows/cuda.rs` does (in the first shape of its list that holds the row: threads
to a row, elements each keeps in registers), and times it with CUDA events: the median of 20 runs over 1 GiB of f32 rows,
after 3 untimed ones. Each output is first filled with NaN and checked against a float64
reference. Prints a table, then one JSON line per result. `cuda-compare` checks the backend's
targets at rows of 1024 and 4096; this shows the lengths between and past them.
"""

import json
import statistics
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CUDA = ROOT / "kernels" / "src" / "cuda"
OPS = ROOT / "kernels" / "src" / "ops"
LENGTHS = (256, 768, 1000, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576)
ELEMENTS = 1 << 28
BLOCK = 256

# The shapes of ops/rows/cuda.rs: (group, cache) in the order preferred, then the one for rows
# longer than all hold.
FORWARD = ([(32, 8), (32, 16), (32, 32), (256, 8), (256, 16), (512, 16), (512, 32)], (512, 8))
BACKWARD = ([(32, 4), (32, 8), (32, 16), (256, 4), (256, 8), (256, 16), (512, 16)], (512, 4))

# kernel: (shapes, arrays moved: read and written)
KERNELS = {
    "softmax": (FORWARD, 2),
    "layer_norm": (FORWARD, 2),
    "softmax_backward": (BACKWARD, 3),
}

# kernel: the family file that holds it
FILES = {
    "softmax": "softmax/softmax.cu",
    "layer_norm": "norm/norm.cu",
    "softmax_backward": "softmax/softmax.cu",
}


def timed(run) -> float:
    for _ in range(3):
        run()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(20):
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(times)


def launch(module, kernel: str, rows: int, length: int, args: tuple):
    (held, streaming), _ = KERNELS[kernel]
    group, cache = next(((g, c) for g, c in held if g * c >= length), streaming)
    function = module.get_function(f"{kernel}_{group}x{cache}_f32")
    multiprocessors = cp.cuda.Device().attributes["MultiProcessorCount"]
    threads = max(group, BLOCK)
    per_block = threads // group
    blocks = min((rows + per_block - 1) // per_block, multiprocessors * 16 * BLOCK // threads)
    return lambda: function((blocks,), (threads,), args)


def relative_error(got, want) -> float:
    if bool(cp.isnan(got).any()):
        return float("nan")
    return float(cp.linalg.norm((got - want).ravel()) / cp.linalg.norm(want.ravel()))


def main() -> None:
    prelude = (CUDA / "prelude.cuh").read_text()
    modules = {
        file: cp.RawModule(code=prelude + "\n" + (OPS / file).read_text(), options=("--std=c++17",))
        for file in set(FILES.values())
    }
    src, dst = cp.empty(ELEMENTS, cp.float32), cp.empty(ELEMENTS, cp.float32)
    copy = 2 * src.nbytes / timed(lambda: dst.data.copy_from_device(src.data, src.nbytes)) / 1e9
    del src, dst
    results = []
    print(f"copy {copy:.0f} GB/s")
    print(f"{'kernel':18} {'len':>6} {'GB/s':>8} {'of_copy':>8} {'rel_err':>9}")
    for length in LENGTHS:
        rows = ELEMENTS // length
        x = cp.random.standard_normal((rows, length), dtype=cp.float32) * 3
        dy = cp.random.standard_normal((rows, length), dtype=cp.float32)
        gamma = cp.random.standard_normal(length, dtype=cp.float32)
        beta = cp.random.standard_normal(length, dtype=cp.float32)
        mean, rstd = cp.empty(rows, cp.float32), cp.empty(rows, cp.float32)
        out = cp.empty_like(x)
        x64 = x.astype(cp.float64)
        y64 = cp.exp(x64 - x64.max(1, keepdims=True))
        y64 /= y64.sum(1, keepdims=True)
        y = y64.astype(cp.float32)
        mu = x64.mean(1, keepdims=True)
        norm64 = (x64 - mu) / cp.sqrt(((x64 - mu) ** 2).mean(1, keepdims=True) + 1e-5) * gamma + beta
        y32 = y.astype(cp.float64)
        back64 = y32 * (dy - (y32 * dy).sum(1, keepdims=True))
        del x64, mu
        u, f, i = np.uint64, np.float64, np.int32
        cases = {
            "softmax": ((i(0), f(1.0), i(0), x, out, u(rows), u(length)), y64),
            "layer_norm": ((f(1e-5), x, gamma, beta, out, mean, rstd, u(rows), u(length)), norm64),
            "softmax_backward": ((i(0), f(1.0), i(0), y, dy, out, u(rows), u(length)), back64),
        }
        for kernel, (args, want) in cases.items():
            run = launch(modules[FILES[kernel]], kernel, rows, length, args)
            out.fill(cp.nan)
            run()
            error = relative_error(out, want)
            gbps = KERNELS[kernel][1] * x.nbytes / timed(run) / 1e9
            results.append({"op": kernel, "len": length, "gbps": round(gbps, 1),
                            "of_copy": round(gbps / copy, 3), "rel_err": error})
            print(f"{kernel:18} {length:6} {gbps:8.0f} {gbps / copy:8.3f} {error:9.2e}", flush=True)
        del x, dy, y, y32, y64, norm64, back64, out
    for result in results:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
