#!/usr/bin/env python3
"""Checks that PEFT loads a LoRA adapter directory that Headroom exported and computes the
logits PEFT computed for the adapters it came from.

Usage: check_peft_export.py ADAPTER_DIR BASE_DIR EXPECTED_JSON

Loads BASE_DIR with `transformers.AutoModelForCausalLM.from_pretrained` (float32, eager
attention), the adapters of ADAPTER_DIR over it with `peft.PeftModel.from_pretrained` (no
missing or unexpected adapter weights), runs the ids of EXPECTED_JSON (an expected.json of
make_tiny_lora.py) in evaluation and compares the logits and the loss with the expected ones.
Prints the largest difference and exits 0 when it is within 1e-4, 1 otherwise.

To make an export of the adapters PEFT made over the tiny Llama 3, from the repository root:
    HEADROOM_KEEP_PEFT_EXPORT=/tmp/peft-export cargo test -p headroom-nn --test hf_lora \\
        an_export_holds_peft_names_and_values_and_reads_back
    scripts/hf/check_peft_export.py /tmp/peft-export/lora-llama3 nn/tests/data/tiny-llama3 \\
        nn/tests/data/lora-llama3/expected.json
"""

import json
import sys

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

TOLERANCE = 1e-4


def main() -> int:
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    adapter, base, expected_path = sys.argv[1:]
    with open(expected_path) as f:
        expected = json.load(f)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, attn_implementation="eager")
    model = PeftModel.from_pretrained(model, adapter).eval()
    ids = torch.tensor(expected["ids"])
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids)
    want = torch.tensor(expected["logits"], dtype=torch.float32)
    logits = out.logits.flatten()
    if logits.shape != want.shape:
        print(f"{adapter}: logits of shape {tuple(out.logits.shape)}, expected {expected['logits_shape']}")
        return 1
    scale = max(1.0, float(want.abs().max()))
    difference = float((logits - want).abs().max()) / scale
    loss = abs(float(out.loss) - expected["loss"])
    print(f"{adapter}: largest logit difference {difference:.2e} of the largest logit, loss off by {loss:.2e}")
    return 0 if difference <= TOLERANCE and loss <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
