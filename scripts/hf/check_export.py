#!/usr/bin/env python3
"""Checks that transformers loads a Hugging Face directory that Headroom exported and computes the
logits and loss transformers computed for the model it came from.

Usage: check_export.py EXPORTED_DIR [EXPECTED_JSON]

Loads EXPORTED_DIR with `transformers.AutoModelForCausalLM.from_pretrained` (any architecture its
config.json names: GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
MistralForCausalLM, Gemma3ForCausalLM; in float32, eager attention, with no missing or
unexpected weights), runs the
ids of EXPECTED_JSON (by default nn/tests/data/tiny-gpt2/expected.json; the files are made by
make_tiny_gpt2.py and make_tiny_llama.py) and compares the logits and the loss with the expected
ones, and those of its `batch` case where it has one. Prints the largest differences and exits 0
when they are all within 1e-4, 1 otherwise.

To make an export of the tiny GPT-2, from the repository root:
    HEADROOM_KEEP_HF_EXPORT=/tmp/tiny-export cargo test -p headroom-nn --test hf_gpt2 \
        an_export_imports_again_bit_for_bit_tied
    scripts/hf/check_export.py /tmp/tiny-export
An export of a tiny Llama-family model is checked against the expected.json of the directory it
was imported from, e.g. nn/tests/data/tiny-qwen3/expected.json.
"""

import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

TOLERANCE = 1e-4


def compare(model, name: str, rows: list[list[int]], expected: dict) -> bool:
    """Runs the rows and compares logits and loss with `expected`; prints what it finds."""
    ids = torch.tensor(rows)
    with torch.no_grad():
        out = model(ids, labels=ids)
    logits = out.logits.flatten()
    want = torch.tensor(expected["logits"], dtype=torch.float32)
    if logits.shape != want.shape:
        print(f"FAIL: {name}: logits of shape {tuple(out.logits.shape)}, expected "
              f"{expected['logits_shape']}")
        return False
    diff = (logits - want).abs().max().item()
    loss_diff = abs(out.loss.item() - expected["loss"])
    print(f"{name}: max abs logit difference {diff:.3e}, loss {out.loss.item():.7f} "
          f"(expected {expected['loss']:.7f}, difference {loss_diff:.3e})")
    ok = True
    if not diff < TOLERANCE:
        print(f"FAIL: {name}: logits differ by {diff:.3e} (tolerance {TOLERANCE})")
        ok = False
    if not loss_diff < TOLERANCE:
        print(f"FAIL: {name}: loss differs by {loss_diff:.3e} (tolerance {TOLERANCE})")
        ok = False
    return ok


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[3], file=sys.stderr)
        return 2
    exported = Path(sys.argv[1])
    root = Path(__file__).resolve().parents[2]
    default = root / "nn" / "tests" / "data" / "tiny-gpt2" / "expected.json"
    expected = json.loads(Path(sys.argv[2] if len(sys.argv) == 3 else default).read_text())

    model, info = AutoModelForCausalLM.from_pretrained(
        exported, dtype=torch.float32, attn_implementation="eager", output_loading_info=True
    )
    model.eval()
    problems = {k: v for k, v in info.items() if v}
    if problems:
        print(f"FAIL: loading {exported}: {problems}")
        return 1
    print(f"{exported}: {type(model).__name__}")

    ok = compare(model, "single", [expected["ids"]], expected)
    if "batch" in expected:
        ok = compare(model, "batch", expected["batch"]["ids"], expected["batch"]) and ok
    if not ok:
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
