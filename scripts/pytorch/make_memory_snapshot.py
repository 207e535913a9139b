#!/usr/bin/env python3
"""Makes the PyTorch memory snapshot that headroom-alloc's snapshot tests replay.

Without a GPU, PyTorch's profiler records a CPU training step's memory timeline
(`profile_memory=True`, `record_shapes=True`, `with_stack=True`) and
`torch.cuda._memory_viz._profile_to_snapshot` turns it into the snapshot format that
`torch.cuda.memory._dump_snapshot` writes on a GPU (`segments` and `device_traces` of `alloc`,
`free_requested` and `free_completed` events with addresses, sizes, streams, frames and a
`category`). The step: a two-layer GPT-style decoder (width 64, 4 heads, vocabulary 256,
context 32, batch 4), AdamW, two steps (the first creates the optimizer's state).

Writes, under alloc/tests/data/ (or the directory given as the first argument):
- torch-cpu-step.pickle: the snapshot, pickled as `_dump_snapshot` pickles it;
- torch-cpu-step.json: what the snapshot itself implies, computed here from its events alone,
  for the tests to compare a replay with: per device index that holds events, `events` (the
  trace's length), `allocs` (its `alloc` events), `peak_requested` (the most bytes live at once,
  counting blocks allocated before the trace began from their frees), `live_at_end`
  (allocations never freed in the trace) and `largest` (the largest allocation).

Run it with PyTorch installed: `python3 scripts/pytorch/make_memory_snapshot.py`.
"""

import json
import os
import pickle
import sys

import torch
from torch import nn
from torch.cuda._memory_viz import _profile_to_snapshot


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Decoder(nn.Module):
    def __init__(self, vocab=256, width=64, heads=4, layers=2, context=32):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids):
        t = ids.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        x = self.tok(ids) + self.pos(torch.arange(t))
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.ln_f(x))


def implied(trace):
    """The figures a device's trace implies, from its events alone."""
    live, before, allocs, largest = {}, 0, 0, 0
    for event in trace:
        action, addr, size = event["action"], event["addr"], event["size"]
        if action == "alloc":
            live[addr] = size
            allocs += 1
            largest = max(largest, size)
        elif action == "free_completed" and live.pop(addr, None) is None:
            # Freed without being allocated in the trace: live from its start.
            before += size
    running = peak = before
    for event in trace:
        if event["action"] == "alloc":
            running += event["size"]
        elif event["action"] == "free_completed":
            running -= event["size"]
        peak = max(peak, running)
    return {
        "events": len(trace),
        "allocs": allocs,
        "peak_requested": peak,
        "live_at_end": len(live),
        "largest": largest,
    }


def implied_figures(snapshot):
    """`implied` of each device whose trace holds events, by its index as text."""
    return {
        str(device): implied(trace)
        for device, trace in enumerate(snapshot["device_traces"])
        if trace
    }


def profiled_snapshot(run):
    """The snapshot of the tensors `run()` allocates, recorded by PyTorch's profiler."""
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        profile_memory=True,
        record_shapes=True,
        with_stack=True,
    ) as profile:
        run()
    return _profile_to_snapshot(profile)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join("alloc", "tests", "data")
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = Decoder()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 256, (4, 32))
    targets = torch.randint(0, 256, (4, 32))

    def steps():
        for _ in range(2):
            logits = model(ids)
            loss = nn.functional.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            del logits, loss

    snapshot = profiled_snapshot(steps)
    with open(os.path.join(out, "torch-cpu-step.pickle"), "wb") as f:
        pickle.dump(snapshot, f)
    figures = implied_figures(snapshot)
    with open(os.path.join(out, "torch-cpu-step.json"), "w") as f:
        json.dump({"torch": torch.__version__, "devices": figures}, f, indent=1)
        f.write("\n")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
