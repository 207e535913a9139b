#!/usr/bin/env python3
"""Checks that transformers loads a GPT-2 directory that Headroom exported and computes the
logits transformers computed for the model it came from.

Usage: check_export.py EXPORTED_DIR [EXPECTED_JSON]

Loads EXPORTED_DIR with `transformers.GPT2LMHeadModel.from_pretrained` (in float32, with no
missing or unexpected weights), runs the ids of EXPECTED_JSON (by default
nn/tests/data/tiny-gpt2/expected.json, made by make_tiny_gpt2.py) and compares the logits with
the expected ones. Exits 0 when they agree within 1e-4 everywhere, 1 otherwise.

To make an export of the tiny model, from the repository root:
    HEADROOM_KEEP_HF_EXPORT=/tmp/tiny-export cargo test -p headroom-nn --test hf_gpt2 \
        an_export_imports_again_bit_for_bit_tied
    scripts/hf/check_export.py /tmp/tiny-export
"""

import json
import sys
from pathlib import Path

import torch
from transformers import GPT2LMHeadModel

TOLERANCE = 1e-4


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    exported = Path(sys.argv[1])
    root = Path(__file__).resolve().parents[2]
    default = root / "nn" / "tests" / "data" / "tiny-gpt2" / "expected.json"
    expected = json.loads(Path(sys.argv[2] if len(sys.argv) == 3 else default).read_text())

    model, info = GPT2LMHeadModel.from_pretrained(
        exported, dtype=torch.float32, output_loading_info=True
    )
    model.eval()
    problems = {k: v for k, v in info.items() if v}
    if problems:
        print(f"FAIL: loading {exported}: {problems}")
        return 1

    ids = torch.tensor([expected["ids"]])
    with torch.no_grad():
        out = model(ids, labels=ids)
    logits = out.logits.flatten()
    want = torch.tensor(expected["logits"], dtype=torch.float32)
    if logits.shape != want.shape:
        print(f"FAIL: logits of shape {tuple(out.logits.shape)}, expected "
              f"{expected['logits_shape']}")
        return 1
    diff = (logits - want).abs().max().item()
    loss_diff = abs(out.loss.item() - expected["loss"])
    print(f"{exported}: max abs logit difference {diff:.3e}, loss {out.loss.item():.7f} "
          f"(expected {expected['loss']:.7f}, difference {loss_diff:.3e})")
    if not diff < TOLERANCE:
        print(f"FAIL: logits differ by {diff:.3e} (tolerance {TOLERANCE})")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
