"""Training with every parameter sharded over the ranks, per rank, by PyTorch FSDP2
(`fully_shard`) over gloo on the CPU, for the model and batch of
`mpirun -n 2 target/release/shard-compare`: transformers' `LlamaForCausalLM` with
`attn_implementation="sdpa"` (8 layers of width 512, 8 heads and 4 key/value heads, a SwiGLU MLP of
1376, a vocabulary of 8192, the head tied to the embedding: 27.4 M parameters), each decoder layer
and the root `fully_shard`ed as FSDP2's documentation does; each rank steps on 2 windows of 128
tokens: forward, backward and an AdamW update, in f32, each layer recomputed in the backward pass
(`blocks`: transformers' gradient checkpointing, non-reentrant) or not (`none`). Run under
`torchrun --nproc_per_node 2` (one thread per rank, torchrun's default).

Rank 0 prints one JSON line per result with the keys model, recompute, ranks, step_s,
samples_per_s, peak_bytes: the median step over the ranks' slowest, and the largest peak of any
rank, from PyTorch's `MemTracker` (torch.distributed._tools, made to size FSDP runs; the memory
profiler's timeline fails on FSDP2's in-place all-gathers) over two steps run apart from the timed
ones, after one that makes AdamW's state: every tensor byte alive at once, parameters, gradients
and optimizer state included, as Headroom's allocator counts them.
"""

import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed._tools.mem_tracker import MemTracker
from transformers import LlamaConfig, LlamaForCausalLM

STEPS = 10
WARMUP = 3
BATCH = 2
CONTEXT = 128


def model(mesh, recompute):
    config = LlamaConfig(
        vocab_size=8192,
        hidden_size=512,
        intermediate_size=1376,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=CONTEXT,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    torch.manual_seed(1)
    llama = LlamaForCausalLM(config)
    if recompute == "blocks":
        llama.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for layer in llama.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(llama, mesh=mesh)
    llama.train()
    return llama


def step(llama, optimizer, inputs, targets):
    optimizer.zero_grad(set_to_none=True)
    logits = llama(input_ids=inputs).logits
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
    loss.backward()
    optimizer.step()


def most(value):
    """The largest of the ranks' `value`s."""
    tensor = torch.tensor([float(value)], dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.item()


def peak_bytes(llama, inputs, targets):
    optimizer = torch.optim.AdamW(llama.parameters())
    step(llama, optimizer, inputs, targets)
    tracker = MemTracker()
    tracker.track_external(llama, optimizer, inputs, targets)
    highest = 0
    with tracker:
        for _ in range(2):
            # The tracker follows one pass over the modules at a time.
            tracker.reset_mod_stats()
            step(llama, optimizer, inputs, targets)
            peak = tracker.get_tracker_snapshot("peak")
            highest = max(highest, *(snapshot["Total"] for snapshot in peak.values()))
    return highest


def main():
    dist.init_process_group("gloo")
    rank, ranks = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (ranks,))
    generator = torch.Generator().manual_seed(4 + 10 * rank)
    inputs = torch.randint(0, 8192, (BATCH, CONTEXT), generator=generator)
    targets = torch.randint(0, 8192, (BATCH, CONTEXT), generator=generator)
    asked = [a for a in sys.argv[1:] if a in ("blocks", "none")]
    for recompute in ["blocks", "none"]:
        if asked and recompute not in asked:
            continue
        llama = model(mesh, recompute)
        optimizer = torch.optim.AdamW(llama.parameters())
        times = []
        for i in range(WARMUP + STEPS):
            start = time.perf_counter()
            step(llama, optimizer, inputs, targets)
            if i >= WARMUP:
                times.append(most(time.perf_counter() - start))
        seconds = statistics.median(times)
        del optimizer
        peak = most(peak_bytes(llama, inputs, targets))
        line = {
            "model": "llama-shard",
            "recompute": recompute,
            "ranks": ranks,
            "step_s": round(seconds, 4),
            "samples_per_s": round(BATCH * ranks / seconds, 3),
            "peak_bytes": int(peak),
        }
        if rank == 0:
            print(json.dumps(line, separators=(",", ":")), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
