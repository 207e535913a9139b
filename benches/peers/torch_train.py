"""Training-step throughput and peak memory of PyTorch on the CPU, for the models and settings of
`cargo run --release -p headroom-benches --bin train-compare`: an MLP 784-1024-1024-10 on a batch
of 256 and a GPT (4 layers, width 256, 4 heads, context 64, vocabulary 64) on a batch of 32, one
forward, backward and AdamW step each, in f32 and under bf16 autocast; and the GPT with each
block recomputed in the backward pass (`gpt-recompute`, torch.utils.checkpoint); and `gpt-text`, a
GPT of the real-text job's size (4 layers of width 256, context 256, vocabulary 4096, batch 16, the
head tied to the token embedding as nanoGPT ties it), in f32 only; and `llama-text`, a model of
the Llama family of the same size (SmolLM2's design: 2 key/value heads for 4 query heads, a
SwiGLU MLP of 768, tied) as transformers' `LlamaForCausalLM` with `attn_implementation="sdpa"`,
in f32 only. The GPT's attention is `scaled_dot_product_attention`, as nanoGPT's.

Prints one JSON line per result with the keys model, precision, samples_per_s, tokens_per_s,
peak_bytes. The peak comes from PyTorch's memory profiler (`export_memory_timeline`) over two
steps, run apart from the timed ones: every tensor byte alive at once, parameters and optimizer
state included, as Headroom's allocator counts them.
"""

import contextlib
import json
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.utils.checkpoint import checkpoint

STEPS = 10
WARMUP = 3
MODELS = ["mlp", "gpt", "gpt-recompute", "gpt-text", "llama-text"]


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.fc_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, 2)
        heads = lambda m: m.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        q, k, v = heads(q), heads(k), heads(v)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab=64, context=64, width=256, heads=4, layers=4, recompute=False, tie=False):
        super().__init__()
        self.recompute = recompute
        self.tok_emb = nn.Embedding(vocab, width)
        self.pos_emb = nn.Embedding(context, width)
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        if tie:
            self.head.weight = self.tok_emb.weight

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok_emb(ids) + self.pos_emb.weight[:t]
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.recompute else block(x)
        return self.head(self.ln_f(x))


class HfLogits(nn.Module):
    """A transformers causal language model that returns its logits."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(ids).logits


def llama_text():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=4096,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rope_theta=10000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
    )
    return HfLogits(LlamaForCausalLM._from_config(config, attn_implementation="sdpa"))


def cases():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    yield "mlp", mlp, torch.randn(256, 784), torch.randint(0, 10, (256,)), 256, 256
    gpt = Gpt()
    ids = torch.randint(0, 64, (32, 64))
    yield "gpt", gpt, ids, torch.randint(0, 64, (32, 64)), 32, 32 * 64
    # Each block recomputed in the backward pass (torch.utils.checkpoint).
    gpt = Gpt(recompute=True)
    yield "gpt-recompute", gpt, ids, torch.randint(0, 64, (32, 64)), 32, 32 * 64
    gpt = Gpt(vocab=4096, context=256, tie=True)
    ids = torch.randint(0, 4096, (16, 256))
    yield "gpt-text", gpt, ids, torch.randint(0, 4096, (16, 256)), 16, 16 * 256
    if picked("llama-text", MODELS):
        try:
            llama = llama_text()
        except ImportError:
            print("llama-text needs transformers (pip install transformers); skipped", file=sys.stderr)
            return
        yield "llama-text", llama, ids, torch.randint(0, 4096, (16, 256)), 16, 16 * 256


def step(model, optimizer, inputs, targets, precision):
    optimizer.zero_grad(set_to_none=True)
    policy = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    with policy:
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
    loss.backward()
    optimizer.step()


def peak_bytes(model, inputs, targets, precision):
    optimizer = torch.optim.AdamW(model.parameters())
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        for _ in range(2):
            step(model, optimizer, inputs, targets, precision)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "timeline.json")
        prof.export_memory_timeline(path, device="cpu")
        with open(path) as f:
            _, sizes = json.load(f)
    return max(sum(row) for row in sizes)


def picked(name, among):
    """Whether the command line keeps `name`: it names nothing among `among`, or names it
    (`torch_train.py gpt-text f32`, as `train-compare gpt-text f32`)."""
    asked = [a for a in sys.argv[1:] if a in among]
    return not asked or name in asked


def main():
    torch.set_num_threads(os.cpu_count() or 1)
    for name, model, inputs, targets, samples, tokens in cases():
        for precision in ["f32"] if name.endswith("-text") else ["f32", "bf16"]:
            if not picked(name, MODELS) or not picked(precision, ["f32", "bf16"]):
                continue
            optimizer = torch.optim.AdamW(model.parameters())
            times = []
            for i in range(WARMUP + STEPS):
                start = time.perf_counter()
                step(model, optimizer, inputs, targets, precision)
                if i >= WARMUP:
                    times.append(time.perf_counter() - start)
            seconds = statistics.median(times)
            line = {
                "model": name,
                "precision": precision,
                "samples_per_s": round(samples / seconds, 2),
                "tokens_per_s": round(tokens / seconds, 2),
                "peak_bytes": peak_bytes(model, inputs, targets, precision),
            }
            print(json.dumps(line, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
