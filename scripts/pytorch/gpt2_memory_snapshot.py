#!/usr/bin/env python3
"""Records the memory snapshot of GPT-2 small's training steps with PyTorch, for
`headroom-alloc replay SNAPSHOT --find-limit`.

On a GPU (`--device cuda`) it is what a PyTorch user records:
`torch.cuda.memory._record_memory_history()` before the steps and
`torch.cuda.memory._dump_snapshot(path)` after, with the caching allocator's segments; bf16
autocast and sdpa attention, as GPT-2 is trained. On the CPU (the default) PyTorch's profiler
records the same steps' memory timeline and `torch.cuda._memory_viz._profile_to_snapshot` turns
it into the snapshot format: every tensor's allocation and free, without the caching
allocator's segments (PyTorch's reserved bytes are then not in it).

The model: transformers' GPT2LMHeadModel with GPT-2 small's shape (12 layers, width 768,
vocabulary 50257, random weights), AdamW, two steps (the first creates the optimizer's state)
of `--batch` sequences of `--context` tokens.

Writes OUT (a pickle, as `_dump_snapshot` writes it) and OUT with `.json` for `.pickle`: the
figures the snapshot's events imply (see make_memory_snapshot.py's `implied`).

Run it with PyTorch and transformers installed:
`python3 scripts/pytorch/gpt2_memory_snapshot.py OUT.pickle [--device cuda] [--batch 4] [--context 512]`.
"""

import argparse
import contextlib
import json
import os
import pickle
import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_memory_snapshot import implied_figures, profiled_snapshot  # noqa: E402


def steps(model, optimizer, ids, device):
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16)
        if device == "cuda"
        else contextlib.nullcontext()
    )
    for _ in range(2):
        with autocast:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        del loss


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--context", type=int, default=512)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = GPT2Config(attn_implementation="sdpa")
    model = GPT2LMHeadModel(config).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, config.vocab_size, (args.batch, args.context), device=args.device)
    start = time.perf_counter()
    if args.device == "cuda":
        torch.cuda.memory._record_memory_history(max_entries=10_000_000)
        steps(model, optimizer, ids, args.device)
        torch.cuda.synchronize()
        torch.cuda.memory._dump_snapshot(args.out)
        torch.cuda.memory._record_memory_history(enabled=None)
        with open(args.out, "rb") as f:
            snapshot = pickle.load(f)
    else:
        snapshot = profiled_snapshot(lambda: steps(model, optimizer, ids, args.device))
        with open(args.out, "wb") as f:
            pickle.dump(snapshot, f)
    figures = implied_figures(snapshot)
    summary = {
        "torch": torch.__version__,
        "device": args.device,
        "batch": args.batch,
        "context": args.context,
        "seconds": round(time.perf_counter() - start, 1),
        "devices": figures,
    }
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
