#!/usr/bin/env python3
"""Checks `headroom export --gguf` of a run against the `gguf` package, transformers and,
optionally, llama.cpp itself (`pip install gguf numpy torch transformers tokenizers`).

Usage: check_export.py RUN_DIR [--quant f16 q8_0 ...] [--prompt TEXT] [--max-tokens N]
                       [--out DIR] [--headroom BIN] [--llama-greedy BIN]

For each quantization (by default f16 and q8_0), the script:
1. exports RUN_DIR with `headroom export RUN_DIR --gguf OUT/{quant}.gguf --quant {quant}`;
2. reads the file with `gguf.GGUFReader`: every key's value, every tensor dequantized by
   `gguf.quants.dequantize` (finite, of its shape), and the keys llama.cpp needs;
3. loads it with transformers (`AutoModelForCausalLM.from_pretrained(OUT, gguf_file=...)`,
   which dequantizes it to float32) and compares its logits over the prompt with those of the
   run's Hugging Face export (`headroom export --hf`, f32, the reference, whose greedy text
   must be `headroom generate --temperature 0`'s), and its greedy continuation of the prompt
   (tokenized by the run's own tokenizer.json). transformers' GGUF loader ignores
   `rope_freqs.weight`, so a model with Llama 3's rope scaling is run with the weights it read
   in the reference's configuration;
4. with --llama-greedy (scripts/gguf/llama_greedy.cpp built against llama.cpp: see its
   header), runs the file with llama.cpp itself: its tokenizer's ids for the prompt against the
   run's tokenizer's, its logits after the prompt against the f32 export's, and its greedy
   continuation of the prompt's ids against the reference's.

Headroom's greedy text must equal that of transformers on the f32 export. It prints the figures
and exits 1 when a check fails: a key or tensor that does not read, a tokenization that
differs, or a greedy continuation that parts from the reference's where the reference's top
two logits are further apart than twice the file's largest logit error (parting where they
are closer is the quantization's nature, and is reported).
"""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM

ROOT = Path(__file__).resolve().parents[2]
NEEDED = [
    "general.architecture", "general.name", "general.file_type", "tokenizer.ggml.model",
    "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges", "tokenizer.ggml.eos_token_id",
]
ARCH_KEYS = [
    "block_count", "context_length", "embedding_length", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "rope.freq_base",
    "attention.layer_norm_rms_epsilon",
]


def headroom_bin(given):
    if given:
        return given
    if os.environ.get("HEADROOM_BIN"):
        return os.environ["HEADROOM_BIN"]
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    for profile in ("release", "debug"):
        if (target / profile / "headroom").is_file():
            return str(target / profile / "headroom")
    sys.exit("no headroom binary: build it (cargo build --release -p headroom-trainer) or give --headroom")


def run(cmd):
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed:\n{done.stderr}")
    return done.stdout


def read_with_gguf(path):
    """Every key and tensor through the gguf package; returns the reader."""
    reader = gguf.GGUFReader(str(path))
    keys = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    arch = keys["general.architecture"].contents()
    missing = [k for k in NEEDED + [f"{arch}.{k}" for k in ARCH_KEYS] if k not in keys]
    assert not missing, f"{path}: keys missing: {missing}"
    for key, field in keys.items():
        field.contents()  # every value decodes
    types = {}
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        assert values.size == int(np.prod(t.shape)), t.name
        assert np.isfinite(values).all(), t.name
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    tokens = keys["tokenizer.ggml.tokens"].contents()
    template = "tokenizer.chat_template" in keys
    print(f"  gguf: {len(keys)} keys, {len(reader.tensors)} tensors {types}, architecture {arch}, "
          f"pre {keys['tokenizer.ggml.pre'].contents()}, {len(tokens)} tokens, "
          f"chat template {'yes' if template else 'no'}")
    return reader


def greedy(model, ids, steps):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=steps, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
    return out[0, len(ids):].tolist()


def logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def until_stop(ids, stops):
    for i, t in enumerate(ids):
        if t in stops:
            return ids[:i]
    return ids


def compare_paths(ids, ref_ids, ref_logits, prompt_len, diff):
    """Whether two greedy paths agree; where they part, how close the reference's top two logits
    were, and whether that excuses it."""
    if ids == ref_ids:
        return True, "", True
    k = next((i for i, (a, b) in enumerate(zip(ids, ref_ids)) if a != b), min(len(ids), len(ref_ids)))
    top = torch.topk(ref_logits[prompt_len + k - 1], 2).values
    margin = (top[0] - top[1]).item()
    note = f"; they part at token {k}, where the reference's top two logits differ by {margin:.3e}"
    return False, note, margin < 2 * diff


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--quant", nargs="+", default=["f16", "q8_0"])
    parser.add_argument("--prompt", default="The ")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--headroom", default=None)
    parser.add_argument("--llama-greedy", default=None)
    args = parser.parse_args()
    headroom = headroom_bin(args.headroom)
    out = args.out or args.run_dir / "gguf-check"
    out.mkdir(parents=True, exist_ok=True)
    ok = True

    tok = Tokenizer.from_file(str(args.run_dir / "tokenizer.json"))
    prompt_ids = tok.encode(args.prompt).ids
    stops = [i for t, i in tok.get_vocab().items() if t in ("<|endoftext|>", "<|im_end|>", "<|end_of_text|>", "<|eot_id|>")]

    # Headroom's own greedy continuation, and its f32 Hugging Face export as the reference.
    text = run([headroom, "generate", "--checkpoint", args.run_dir, "--prompt", args.prompt,
                "--max-tokens", str(args.max_tokens), "--temperature", "0"])
    ours = text[:-1] if text.endswith("\n") else text
    ours = ours[len(args.prompt):]
    print(f"headroom generate: {ours!r}")
    hf_dir = out / "hf"
    run([headroom, "export", "--hf", "--dtype", "f32", "--overwrite", args.run_dir, hf_dir])
    reference = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    ref_ids = until_stop(greedy(reference, prompt_ids, args.max_tokens), stops)
    ref_text = tok.decode(ref_ids, skip_special_tokens=False)
    print(f"transformers on the f32 --hf export (the reference): {ref_text!r} "
          f"({'same as' if ref_text == ours else 'DIFFERENT FROM'} Headroom's)")
    ok &= ref_text == ours
    ref_logits = logits(reference, prompt_ids + ref_ids)

    for quant in args.quant:
        path = out / f"{quant}.gguf"
        print(f"{quant}: {path} ({run([headroom, 'export', args.run_dir, '--gguf', path, '--quant', quant, '--overwrite']).strip()})")
        reader = read_with_gguf(path)
        model = AutoModelForCausalLM.from_pretrained(out, gguf_file=path.name, dtype=torch.float32)
        if any(t.name == "rope_freqs.weight" for t in reader.tensors):
            # transformers' GGUF loader reads no rope_freqs.weight: it builds the model without
            # Llama 3's rope scaling. Its weights are run in the reference's configuration.
            print("  transformers' GGUF loader ignores rope_freqs.weight (Llama 3's rope scaling): "
                  "the weights it read are run in the f32 export's configuration")
            weights = model.state_dict()
            model = AutoModelForCausalLM.from_config(reference.config, dtype=torch.float32)
            model.load_state_dict(weights)
            model.eval()
        got = logits(model, prompt_ids + ref_ids)
        diff = (got - ref_logits).abs().max().item()
        scale = ref_logits.abs().max().item()
        ids = until_stop(greedy(model, prompt_ids, args.max_tokens), stops)
        same, note, fine = compare_paths(ids, ref_ids, ref_logits, len(prompt_ids), diff)
        ok &= fine
        text = tok.decode(ids, skip_special_tokens=False)
        print(f"  transformers: logits within {diff:.3e} of the f32 export's (largest {scale:.3f}); "
              f"greedy {text!r} ({'same as' if same else 'DIFFERENT FROM'} the reference's{note})")
        if args.llama_greedy:
            said = run([args.llama_greedy, path, str(args.max_tokens), args.prompt]
                       + [str(i) for i in prompt_ids]).splitlines()
            fields = {line.split(":")[0]: line.split(":", 1)[1].split() for line in said}
            llama_tokens = [int(t) for t in fields["tokens"]]
            hf_tokens = tok.encode(args.prompt, add_special_tokens=True).ids
            print(f"  llama.cpp tokenizer: {llama_tokens} for {args.prompt!r} "
                  f"({'same as' if llama_tokens == hf_tokens else 'DIFFERENT FROM'} tokenizer.json's {hf_tokens})")
            ok &= llama_tokens == hf_tokens
            first = torch.tensor([float(v) for v in fields["logits"]])
            llama_diff = (first - ref_logits[len(prompt_ids) - 1]).abs().max().item()
            llama_ids = until_stop([int(t) for t in fields["greedy"]], stops)
            same, note, fine = compare_paths(llama_ids, ref_ids, ref_logits, len(prompt_ids), llama_diff)
            ok &= fine
            print(f"  llama.cpp: logits after the prompt within {llama_diff:.3e} of the f32 export's; "
                  f"greedy {tok.decode(llama_ids, skip_special_tokens=False)!r} "
                  f"({'same as' if same else 'DIFFERENT FROM'} the reference's{note}; "
                  f"{'same as' if llama_ids == ids else 'DIFFERENT FROM'} transformers' on this file)")
    print("all checks passed" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
