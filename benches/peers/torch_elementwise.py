"""Elementwise throughput of PyTorch on the CPU, for the ops of `elementwise-bandwidth`.

Prints one JSON line per op with the keys op, dtype, elements, gbps, fraction_of_copy, like
`cargo run --release -p headroom-benches --bin elementwise-bandwidth`. Outputs are written into
preallocated tensors (`out=`), as Headroom's allocator hands cached memory back: a fresh 64 MiB
tensor per call would time the kernel's page faults instead. See README.md beside this file.
"""

import json
import os

import torch
from timing import median_seconds

ELEMENTS = 16 << 20
RUNS = 7


def main() -> None:
    torch.set_num_threads(os.cpu_count() or 1)
    a = 0.5 + torch.arange(ELEMENTS, dtype=torch.float32).remainder(1000) / 1000
    b = a.clone()
    out = torch.empty_like(a)
    nbytes = ELEMENTS * 4
    copy_gbps = 2 * nbytes / median_seconds(lambda: out.copy_(a), RUNS) / 1e9
    aten = torch.ops.aten
    ops = [
        ("copy", 1, lambda: out.copy_(a)),
        ("add", 2, lambda: torch.add(a, b, out=out)),
        ("mul", 2, lambda: torch.mul(a, b, out=out)),
        ("scale", 1, lambda: torch.mul(a, 0.5, out=out)),
        ("relu", 1, lambda: torch.clamp_min(a, 0.0, out=out)),
        ("exp", 1, lambda: torch.exp(a, out=out)),
        ("gelu", 1, lambda: aten.gelu.out(a, approximate="tanh", out=out)),
        (
            "gelu_backward",
            2,
            lambda: aten.gelu_backward.grad_input(b, a, approximate="tanh", grad_input=out),
        ),
    ]
    for name, reads, f in ops:
        gbps = (reads + 1) * nbytes / median_seconds(f, RUNS) / 1e9
        line = {
            "op": name,
            "dtype": "f32",
            "elements": ELEMENTS,
            "gbps": round(gbps, 2),
            "fraction_of_copy": round(gbps / copy_gbps, 3),
        }
        print(json.dumps(line, separators=(",", ":")))


if __name__ == "__main__":
    main()
