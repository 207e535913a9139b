"""Fine-tuning and generation speed of PyTorch on the CPU for SmolLM2-135M, the peer of `cargo run
--release -p headroom-benches --bin finetune-compare`. The model is transformers'
`LlamaForCausalLM` with `attn_implementation="sdpa"`: with `--gguf FILE` the real weights (loaded
by `from_pretrained(..., gguf_file=...)`, which dequantizes them to f32), else random ones
(`torch.manual_seed(0)`) under the published config (vocabulary 49152, width 576, MLP 1536, 30
layers, 9 heads, 3 key/value heads, rope theta 100000, head tied to the token embedding).

Each precision runs on its own freshly loaded model: `f32` in float32, `bf16` the whole model
cast to torch.bfloat16 (pure bf16, as TRL users run it, no autocast). Per precision, in order:
- `peak`: the product `a @ b.t()` of two 2048x2048 matrices (uniform in [-1, 1), seeded) in
  that dtype, as a linear layer multiplies, one warm-up, the median of 5, 2*n^3 flops.
- `generate`: greedy generation of 60 new tokens after a 32-token prompt (batch 1, the key/value
  cache on), one warm-up, the median of `--gen-rounds` (3). The generated ids go to stderr once,
  for checking both sides agree in f32. It runs before `step`, so on the loaded weights.
- `step`: one fine-tuning step (zero_grad, the loss of `model(input_ids=ids, labels=ids)`,
  backward, `AdamW(lr=1e-5).step()`), on a batch of 4x256 tokens, and of 2x2048 when named on the
  command line; `--warmup` (2) untimed steps, then the median of `--steps` (5).

The step's flops come from the config alone, as the Rust side counts them, with h the width, d =
h/heads the head dimension, kv the key/value heads, i the MLP width:
    linear_params = layers * (h*h + 2*h*kv*d + h*h + 3*h*i) + h*vocab
    forward = 2*B*T*linear_params + layers * 2*B*heads*T*T*d
    step_flops = 3*forward
(q, k, v and o, then gate, up and down, then the head; the attention's two products with the
causal half counted). gflops = step_flops / step_s / 1e9.

Prints one JSON line per result: bench, precision, shape, then samples_per_s, tokens_per_s,
step_s and gflops for `step`; tokens_per_s and ms_per_token for `generate`; gflops for `peak`.
Positional arguments pick among the benches, precisions and shapes (`torch_finetune.py step bf16`).
"""

import argparse
import json
import os
import sys
import time

import torch
from timing import median_seconds

BENCHES = ["peak", "generate", "step"]
PRECISIONS = ["f32", "bf16"]
SHAPES = ["4x256", "2x2048"]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
PROMPT = [1] + [(i * 7919) % 49152 for i in range(1, 32)]
NEW_TOKENS = 60


def picked(name, among):
    """Whether the command line keeps `name`: it names nothing among `among`, or names it
    (`torch_finetune.py step f32`, as `finetune-compare step f32`)."""
    asked = [a for a in sys.argv[1:] if a in among]
    return not asked or name in asked


def load(gguf, precision):
    """SmolLM2-135M in `precision`, from `gguf` or with random weights, and the seconds it took."""
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    start = time.perf_counter()
    if gguf:
        directory, name = os.path.split(os.path.abspath(gguf))
        model = AutoModelForCausalLM.from_pretrained(
            directory, gguf_file=name, attn_implementation="sdpa", dtype=torch.float32
        )
    else:
        config = LlamaConfig(
            vocab_size=49152,
            hidden_size=576,
            intermediate_size=1536,
            num_hidden_layers=30,
            num_attention_heads=9,
            num_key_value_heads=3,
            max_position_embeddings=8192,
            rope_theta=100000.0,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            hidden_act="silu",
            bos_token_id=1,
            eos_token_id=2,
        )
        torch.manual_seed(0)
        model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa")
    model = model.to(DTYPES[precision])
    return model, time.perf_counter() - start


def step_flops(config, batch, tokens):
    """The flops of one training step of `batch` sequences of `tokens`: three forward passes."""
    h, i, vocab = config.hidden_size, config.intermediate_size, config.vocab_size
    layers, heads, kv = config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads
    d = h // heads
    linear_params = layers * (h * h + h * kv * d + h * kv * d + h * h + 3 * h * i) + h * vocab
    forward = 2 * batch * tokens * linear_params + layers * 2 * batch * heads * tokens * tokens * d
    return 3 * forward


def peak(precision):
    n = 2048
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.rand(n, n, generator=generator).mul_(2).sub_(1).to(DTYPES[precision]) for _ in range(2))
    # The second operand transposed, as F.linear passes weights (and the layout PyTorch's bf16
    # runs fast in on a CPU without bf16 instructions).
    seconds = median_seconds(lambda: a @ b.t(), 5)
    return {"shape": f"{n}x{n}x{n}", "gflops": round(2 * n**3 / seconds / 1e9, 3)}


def generate(model, precision, rounds):
    model.eval()
    ids = torch.tensor([PROMPT])
    mask = torch.ones_like(ids)
    out = []

    def run():
        with torch.inference_mode():
            out[:] = model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
                use_cache=True,
                pad_token_id=2,
            )

    seconds = median_seconds(run, rounds)
    print(f"generated ({precision}): {out[0][len(PROMPT):].tolist()}", file=sys.stderr, flush=True)
    return {
        "shape": f"{len(PROMPT)}+{NEW_TOKENS}",
        "tokens_per_s": round(NEW_TOKENS / seconds, 2),
        "ms_per_token": round(1000 * seconds / NEW_TOKENS, 3),
    }


def step(model, shape, warmup, steps):
    batch, tokens = map(int, shape.split("x"))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(0, 49152, (batch, tokens), generator=torch.Generator().manual_seed(4))

    def run():
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()

    seconds = median_seconds(run, steps, warmup)
    return {
        "shape": shape,
        "samples_per_s": round(batch / seconds, 3),
        "tokens_per_s": round(batch * tokens / seconds, 2),
        "step_s": round(seconds, 4),
        "gflops": round(step_flops(model.config, batch, tokens) / seconds / 1e9, 3),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", choices=BENCHES + PRECISIONS + SHAPES, help="benches, precisions, shapes")
    parser.add_argument("--gguf", help="the model's GGUF file (random weights without it)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--gen-rounds", type=int, default=3)
    args = parser.parse_intermixed_args()
    torch.set_num_threads(os.cpu_count() or 1)
    # 2x2048 runs only when named.
    shapes = [s for s in SHAPES if picked(s, SHAPES) and (s != "2x2048" or s in args.names)]
    for precision in PRECISIONS:
        if not picked(precision, PRECISIONS):
            continue
        results = []
        if picked("peak", BENCHES):
            results.append(("peak", lambda: peak(precision)))
        if picked("generate", BENCHES) or (picked("step", BENCHES) and shapes):
            model, seconds = load(args.gguf, precision)
            print(f"loaded ({precision}) in {seconds:.2f} s", file=sys.stderr, flush=True)
            if picked("generate", BENCHES):
                results.append(("generate", lambda: generate(model, precision, args.gen_rounds)))
            if picked("step", BENCHES):
                for shape in shapes:
                    results.append(("step", lambda shape=shape: step(model, shape, args.warmup, args.steps)))
        for bench, run in results:
            line = {"bench": bench, "precision": precision, **run()}
            print(json.dumps(line, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
