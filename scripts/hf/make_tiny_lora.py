#!/usr/bin/env python3
"""Makes the PEFT LoRA adapters that headroom-nn's tests load over the tiny models of
make_tiny_llama.py and make_tiny_gpt2.py.

Writes, under nn/tests/data/ (or the directory given as the first argument), one directory per
case, each written by PEFT's `save_pretrained` (adapter_config.json, adapter_model.safetensors)
plus an expected.json:
- lora-llama3/: over tiny-llama3 (bf16 weights, loaded in float32), r 4, lora_alpha 8,
  target_modules "all-linear" (q/k/v/o, gate/up/down in both layers).
- lora-llama3-rslora/: over tiny-llama3, r 2, lora_alpha 3, rsLoRA, dropout 0.1 (off in
  evaluation), target_modules ["k_proj", "v_proj", "down_proj"]: a fused layer adapted in
  part.
- lora-gpt2/: over tiny-gpt2, r 4, lora_alpha 16, target_modules "all-linear" (c_attn, both
  c_proj, c_fc; GPT-2's Conv1D layers).

Each adapter's base_model_name_or_path is the base's directory relative to the adapter's. PEFT
starts B at zero; the script draws every A and B again after `torch.manual_seed(1)` (N(0, 0.5))
so that the adapters change the logits, and checks that they do.

expected.json: `ids` (two rows of 5), `logits_shape`, `logits` (flattened, float32, eager
attention, rounded to 7 significant digits) and `loss` (labels = ids), of the base with the
adapter loaded by `PeftModel.from_pretrained`.

Needs torch, transformers, peft and safetensors. Deterministic.
"""

import json
import sys
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

CASES = [
    ("lora-llama3", "tiny-llama3", dict(r=4, lora_alpha=8, target_modules="all-linear")),
    (
        "lora-llama3-rslora",
        "tiny-llama3",
        dict(r=2, lora_alpha=3, use_rslora=True, lora_dropout=0.1, target_modules=["k_proj", "v_proj", "down_proj"]),
    ),
    ("lora-gpt2", "tiny-gpt2", dict(r=4, lora_alpha=16, target_modules="all-linear")),
]


def load(directory: Path) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager").eval()


def run(model: torch.nn.Module, rows: list[list[int]]) -> tuple[torch.Tensor, float]:
    ids = torch.tensor(rows)
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids)
    return out.logits, float(out.loss)


def make(root: Path, name: str, base_name: str, settings: dict) -> None:
    base_dir = root / base_name
    out = root / name
    model = get_peft_model(load(base_dir), LoraConfig(task_type="CAUSAL_LM", **settings))
    torch.manual_seed(1)
    with torch.no_grad():
        for key, p in model.named_parameters():
            if "lora_" in key:
                p.normal_(0.0, 0.5)
    model.peft_config["default"].base_model_name_or_path = f"../{base_name}"
    model.save_pretrained(out)
    vocab = model.config.vocab_size
    rows = [[(3 + 97 * i + 41 * r) % vocab for i in range(5)] for r in range(2)]
    loaded = PeftModel.from_pretrained(load(base_dir), out).eval()
    logits, loss = run(loaded, rows)
    base_logits, _ = run(load(base_dir), rows)
    change = (logits - base_logits).abs().max()
    assert change > 1e-2, f"{name}: the adapters leave the logits as they were"
    expected = {
        "ids": rows,
        "logits_shape": list(logits.shape),
        "logits": [float(f"{v:.7g}") for v in logits.flatten().tolist()],
        "loss": loss,
    }
    (out / "expected.json").write_text(json.dumps(expected, separators=(",", ":")) + "\n")
    (out / "README.md").unlink(missing_ok=True)
    keys = json.loads((out / "adapter_config.json").read_text())["target_modules"]
    print(f"{out}: targets {keys}, logits moved by up to {change:.3f}, loss {loss:.6f}")


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "nn/tests/data"
    for name, base, settings in CASES:
        make(root, name, base, settings)


if __name__ == "__main__":
    main()
