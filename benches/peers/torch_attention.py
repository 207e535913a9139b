"""Causal `torch.nn.functional.scaled_dot_product_attention` forward and backward on the CPU,
for the cases of `cargo run --release -p headroom-benches --bin attention-compare`: GPT-2 small's
12 heads of 64 features over 1024 positions, batches of 1 and 4, f32 and bf16.

Prints one JSON line per case with the keys op, dtype, shape, ms, gflops, as the Rust side does
(the causal products only: 2 B H T^2 D forward, twice that backward).
"""

import json
import os

import torch
import torch.nn.functional as F
from timing import median_seconds

HEADS, LEN, HEAD = 12, 1024, 64
RUNS = 5


def main() -> None:
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(0)
    for name, dtype in [("f32", torch.float32), ("bf16", torch.bfloat16)]:
        for batch in [1, 4]:
            shape = (batch, HEADS, LEN, HEAD)
            q, k, v, g = (torch.randn(shape, dtype=dtype) for _ in range(4))
            q.requires_grad_(True)
            k.requires_grad_(True)
            v.requires_grad_(True)

            def forward():
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, is_causal=True)

            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def backward():
                torch.autograd.grad(out, (q, k, v), g, retain_graph=True)

            seconds_forward = median_seconds(forward, RUNS)
            seconds_backward = median_seconds(backward, RUNS)
            flops = 2 * batch * HEADS * LEN * LEN * HEAD
            for op, seconds, work in [
                ("attention", seconds_forward, flops),
                ("attention_backward", seconds_backward, 2 * flops),
                ("attention_fwd_bwd", seconds_forward + seconds_backward, 3 * flops),
            ]:
                line = {
                    "op": op,
                    "dtype": name,
                    "shape": f"{batch}x{HEADS}x{LEN}x{HEAD}",
                    "ms": round(seconds * 1e3, 3),
                    "gflops": round(work / seconds / 1e9, 2),
                }
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
