"""How much of GPT-2 small fits, in PyTorch as people write it (nanoGPT): causal
`F.scaled_dot_product_attention`, GELU (tanh), a head tied to the token embedding, AdamW, f32 and
bf16 autocast, on the CPU or (`--device cuda`) a GPU. The peer of `cargo run --release -p
headroom-benches --bin fit-compare`.

For each precision it measures whole training steps (forward, backward, AdamW; on a GPU the fused
AdamW that nanoGPT picks there):
- the peak bytes of a step at one and at two samples and at the micro-batch, over the second
  step (the first creates AdamW's state): on the CPU from PyTorch's memory profiler timeline (`export_memory_timeline`: every category
  summed, parameters, gradients and optimizer state included, as Headroom's allocator counts
  them), on a GPU from `torch.cuda.max_memory_allocated` (the same, as the caching allocator
  counts them);
- the activation bytes per sample: the peak's growth from one sample to two;
- samples and tokens per second at a micro-batch of `--micro-batch` (4 on the CPU, 8 on a GPU),
  the median of timed steps.

With `--model NAME` (a Llama-family preset: smollm2-135m, qwen2.5-0.5b, llama-3.2-1b, ...), the
model is Hugging Face transformers' instead, as people fine-tune it: `AutoModelForCausalLM`
built from the published `config.json` (nn/tests/data/published/NAME.json) with
`attn_implementation="sdpa"`, its loss from `labels`, AdamW; checkpointed with
`gradient_checkpointing_enable()`.

With `--lora RANK` (a Llama-family `--model`), LoRA as PEFT users run it: the base model in
`--base` (bf16 by default) and frozen, `peft.get_peft_model` with `LoraConfig(r=RANK,
lora_alpha=2 RANK, lora_dropout=0, target_modules="all-linear")` (every linear layer but the
head; PEFT keeps the adapters in f32), AdamW over the adapters. `--base nf4` is QLoRA as PEFT
users run it: the bf16 model loaded through `BitsAndBytesConfig(load_in_4bit=True,
bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=bfloat16)`
(every linear layer but the head in bitsandbytes' `Linear4bit`), the rest kept in bf16.

With `--longest-context SIZE` (a Llama-family `--model`), the longest context whose step of one
sample fits under SIZE with gradient checkpointing, as transformers users stretch a context: on a
GPU the longest multiple of 1024 tokens whose real step peaks within the limit (doubling, then
bisecting; an out-of-memory is a step that does not fit); on the CPU, whose profiled steps at such
lengths would take hours, the peaks at 1024 and 2048 tokens extrapolated in a line (memory-efficient
attention and the logits both grow linearly with the context), cut to a multiple of 256. One JSON
line per precision with the keys bench (`longest-context`), model, device, precision, limit_bytes,
context, method (`measured` or `extrapolated`) and the peaks it read.

Prints one JSON line per result with the keys model, device, precision, micro_batch, peak_bytes,
activation_bytes_per_sample, samples_per_s, tokens_per_s (and lora, base with `--lora`);
`--speed-only` leaves the peaks out (null), for models whose profiled steps need more host
memory than the machine has.

With `--limit SIZE` (repeatable, e.g. 4GiB), what fits under each limit instead, as
`fit-compare --limit` asks it of Headroom: PyTorch's largest micro-batch, from the peaks at one
and two samples (a step's peak grows by the same bytes with each sample), nanoGPT style and with
`torch.utils.checkpoint` on every block; and samples/s of a step at the plain model's largest.
One JSON line per limit and precision with the keys bench (`largest-micro-batch`), model,
precision, limit_bytes, micro_batch, checkpointed_micro_batch, peak_one_bytes, peak_two_bytes,
checkpointed_peak_one_bytes, checkpointed_peak_two_bytes, samples_per_s.
"""

import argparse
import contextlib
import json
import math
import os
import statistics
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.utils.checkpoint import checkpoint

VOCAB = 50257

PUBLISHED = os.path.join(os.path.dirname(__file__), "..", "..", "nn", "tests", "data", "published")


def quantized_nf4(config, device):
    """A model of `config` with its linear layers (not the head) in bitsandbytes' NF4 with double
    quantization, computing in bf16, as QLoRA loads a pretrained model: drawn in bf16, saved, and
    loaded back quantized onto `device`."""
    import tempfile

    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    dense = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", torch_dtype=torch.bfloat16)
    quantization = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )
    with tempfile.TemporaryDirectory() as saved:
        dense.save_pretrained(saved)
        del dense
        return AutoModelForCausalLM.from_pretrained(
            saved,
            quantization_config=quantization,
            attn_implementation="sdpa",
            torch_dtype=torch.bfloat16,
            device_map={"": device},
        )


class HfCausalLm(nn.Module):
    """A transformers causal LM of a published configuration, trained as its users train it:
    the loss from `labels` (transformers shifts them), sdpa attention."""

    def __init__(self, name, checkpointed=False, lora=None, base=torch.float32, device=None):
        super().__init__()
        from transformers import AutoConfig, AutoModelForCausalLM

        with open(os.path.join(PUBLISHED, f"{name}.json")) as f:
            fields = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
        fields.pop("architectures", None)
        fields.pop("torch_dtype", None)
        config = AutoConfig.for_model(fields.pop("model_type"), **fields)
        if base == "nf4":
            self.model = quantized_nf4(config, device)
        else:
            self.model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", torch_dtype=base)
        self.vocab = config.vocab_size
        if checkpointed:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if lora:
            from peft import LoraConfig, get_peft_model

            adapters = LoraConfig(
                r=lora, lora_alpha=2 * lora, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
            )
            self.model = get_peft_model(self.model, adapters)

    def forward(self, ids, targets):
        return self.model(input_ids=ids, labels=ids).loss


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(width)
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.ln_2 = nn.LayerNorm(width)
        self.c_fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        heads = lambda m: m.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    """nanoGPT's model: learned positions, pre-norm blocks, the head tied to the embedding."""

    def __init__(self, layers=12, width=768, heads=12, context=1024, vocab=VOCAB, checkpointed=False):
        super().__init__()
        self.checkpointed = checkpointed
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if name.endswith("mlp_proj.weight") or name.endswith("c_proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))
            elif p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids, targets):
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe.weight[:t]
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.view(-1))


def batch(samples, context, seed, vocab=VOCAB):
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (samples, context + 1), generator=generator)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def step(model, optimizer, ids, targets, precision):
    optimizer.zero_grad(set_to_none=True)
    kind = ids.device.type
    policy = torch.autocast(kind, dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
    with policy:
        loss = model(ids, targets)
    loss.backward()
    optimizer.step()


MODEL = "gpt2"
LORA = None
BASE = torch.float32


def model_and_optimizer(context, device, checkpointed=False):
    torch.manual_seed(0)
    if MODEL == "gpt2":
        model = Gpt(context=context, checkpointed=checkpointed).to(device)
    else:
        model = HfCausalLm(MODEL, checkpointed, LORA, BASE, device)
        # A bitsandbytes model is loaded onto its device (and refuses to move).
        model = model if BASE == "nf4" else model.to(device)
    # nanoGPT's choice: the fused AdamW where the device has it.
    fused = {"fused": True} if device.type == "cuda" else {}
    trained = [p for p in model.parameters() if p.requires_grad]
    return model, torch.optim.AdamW(trained, lr=3e-4, **fused)


def peak_bytes(precision, samples, context, device, checkpointed=False):
    model, optimizer = model_and_optimizer(context, device, checkpointed)
    ids, targets = (t.to(device) for t in batch(samples, context, 1, vocab_of(model)))
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        for _ in range(2):
            step(model, optimizer, ids, targets, precision)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        del model, optimizer, ids, targets
        torch.cuda.empty_cache()
        return peak
    # The first step creates AdamW's state; the second, profiled, is every later step (one
    # profiled step, not two, keeps the profiler's own memory within reach of large models).
    step(model, optimizer, ids, targets, precision)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        step(model, optimizer, ids, targets, precision)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "timeline.json")
        prof.export_memory_timeline(path, device="cpu")
        with open(path) as f:
            _, sizes = json.load(f)
    return max(sum(row) for row in sizes)


def samples_per_s(precision, micro_batch, context, steps, warmup, device):
    model, optimizer = model_and_optimizer(context, device)
    ids, targets = (t.to(device) for t in batch(micro_batch, context, 2, vocab_of(model)))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = []
    for i in range(warmup + steps):
        sync()
        start = time.perf_counter()
        step(model, optimizer, ids, targets, precision)
        sync()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return micro_batch / statistics.median(times)


def vocab_of(model):
    return getattr(model, "vocab", VOCAB)


def parse_size(text):
    """`4GiB`, `512MiB` or a number of bytes."""
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "B": 1}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


def largest_under(limit, one, two):
    """The most samples whose step peaks within `limit`, from the peaks at one and two."""
    if one > limit:
        return 0
    return 1 + (limit - one) // max(two - one, 1)


def under_limits(args, device):
    for precision in args.precision or ["f32"]:
        one, two = (peak_bytes(precision, n, args.context, device) for n in (1, 2))
        c_one, c_two = (peak_bytes(precision, n, args.context, device, True) for n in (1, 2))
        for text in args.limit:
            limit = parse_size(text)
            micro = largest_under(limit, one, two)
            rate = samples_per_s(precision, micro, args.context, args.steps, args.warmup, device) if micro else 0.0
            line = {
                "bench": "largest-micro-batch",
                "model": MODEL,
                "precision": precision,
                "limit_bytes": limit,
                "micro_batch": micro,
                "checkpointed_micro_batch": largest_under(limit, c_one, c_two),
                "peak_one_bytes": one,
                "peak_two_bytes": two,
                "checkpointed_peak_one_bytes": c_one,
                "checkpointed_peak_two_bytes": c_two,
                "samples_per_s": rate,
            }
            print(json.dumps(line), flush=True)


def fits(precision, context, device, limit):
    """Whether a real checkpointed step of one sample of `context` tokens peaks within `limit`
    on a GPU (an out-of-memory does not)."""
    try:
        return peak_bytes(precision, 1, context, device, True) <= limit
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return False


def longest_context(args, device):
    limit = parse_size(args.longest_context)
    for precision in args.precision or ["bf16"]:
        if device.type == "cuda":
            step, good, bad = 1024, 0, None
            while bad is None:
                trying = max(2 * good, step)
                if fits(precision, trying, device, limit):
                    good = trying
                else:
                    bad = trying
            while bad - good > step:
                mid = (good + bad) // 2 // step * step
                good, bad = (mid, bad) if fits(precision, mid, device, limit) else (good, mid)
            context, method, peaks = good, "measured", {}
        else:
            short, long = 1024, 2048
            peaks = {n: peak_bytes(precision, 1, n, device, True) for n in (short, long)}
            per_token = (peaks[long] - peaks[short]) / (long - short)
            context = short + int((limit - peaks[short]) / per_token)
            context, method = max(context // 256 * 256, 0), "extrapolated"
        line = {
            "bench": "longest-context",
            "model": MODEL,
            "device": args.device,
            "precision": precision,
            "limit_bytes": limit,
            "micro_batch": 1,
            "context": context,
            "method": method,
            "peaks": {str(n): p for n, p in peaks.items()},
        }
        print(json.dumps(line), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", choices=["f32", "bf16"], action="append")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (cuda:N)")
    parser.add_argument("--micro-batch", type=int, help="4 on the CPU, 8 on a GPU")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--limit", action="append", help="what fits under this limit (4GiB, ...)")
    parser.add_argument("--model", default="gpt2", help="gpt2 (nanoGPT), or a Llama-family preset (transformers)")
    parser.add_argument("--lora", type=int, help="LoRA of this rank on every linear layer (PEFT)")
    parser.add_argument(
        "--base", choices=["f32", "bf16", "nf4"], default="bf16", help="the frozen base's dtype with --lora (nf4: QLoRA)"
    )
    parser.add_argument("--longest-context", help="the longest context under this limit, checkpointed (8GiB, ...)")
    parser.add_argument("--speed-only", action="store_true", help="samples/s alone (the profiler's peaks need much host memory)")
    args = parser.parse_args()
    global MODEL, LORA, BASE
    MODEL = args.model
    if args.lora:
        if args.model == "gpt2":
            parser.error("--lora needs a Llama-family --model")
        LORA = args.lora
        BASE = {"bf16": torch.bfloat16, "f32": torch.float32, "nf4": "nf4"}[args.base]
    device = torch.device(args.device)
    if args.longest_context:
        if args.model == "gpt2":
            parser.error("--longest-context needs a Llama-family --model")
        torch.set_num_threads(os.cpu_count() or 1)
        return longest_context(args, device)
    if args.limit:
        torch.set_num_threads(os.cpu_count() or 1)
        return under_limits(args, device)
    gpu = device.type == "cuda"
    micro = args.micro_batch or (8 if gpu else 4)
    torch.set_num_threads(os.cpu_count() or 1)
    for precision in args.precision or (["bf16"] if gpu else ["f32", "bf16"]):
        sizes = set() if args.speed_only else {1, 2, micro}
        peaks = {n: peak_bytes(precision, n, args.context, device) for n in sorted(sizes)}
        peaks.setdefault(micro, None)
        one, two = peaks.get(1), peaks.get(2)
        rate = samples_per_s(precision, micro, args.context, args.steps, args.warmup, device)
        line = {
            "model": MODEL,
            "device": args.device,
            "precision": precision,
            "micro_batch": micro,
            "peak_bytes": peaks[micro],
            "activation_bytes_per_sample": None if one is None else two - one,
            "samples_per_s": rate,
            "tokens_per_s": rate * args.context,
        }
        if LORA:
            line.update(lora=LORA, base=args.base)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
