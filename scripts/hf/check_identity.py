#!/usr/bin/env python3
"""Checks that a Headroom export keeps the identity of the model it was fine-tuned from, as
transformers sees it: the same special tokens and chat template, the same generation defaults.

Usage: check_identity.py BASE_DIR EXPORTED_DIR

BASE_DIR is the Hugging Face model the run started from (`train --init-from BASE_DIR`);
EXPORTED_DIR is `headroom export --hf` of the run (a model directory, merged or not, or a PEFT
adapter directory). Checks with transformers' own loaders that the exported tokenizer has the
base's bos, eos and pad tokens, that `apply_chat_template` renders a conversation as the base's
does, that `generation_config.json` holds the base's defaults and, for a model directory, that
`config.json` names the base's bos, eos and pad ids. Prints each check and exits 0 when all hold,
1 otherwise.
"""

import json
import sys
from pathlib import Path

from transformers import AutoTokenizer, GenerationConfig

CONVERSATION = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
]


def main() -> int:
    base, exported = Path(sys.argv[1]), Path(sys.argv[2])
    failures = 0

    def check(what: str, ours, theirs) -> None:
        nonlocal failures
        ok = ours == theirs
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}: {ours!r}" + ("" if ok else f" (base: {theirs!r})"))

    base_tokenizer = AutoTokenizer.from_pretrained(base)
    tokenizer = AutoTokenizer.from_pretrained(exported)
    for token in ["bos_token", "eos_token", "pad_token"]:
        check(token, getattr(tokenizer, token), getattr(base_tokenizer, token))
    if base_tokenizer.chat_template:
        check(
            "apply_chat_template",
            tokenizer.apply_chat_template(CONVERSATION, tokenize=False),
            base_tokenizer.apply_chat_template(CONVERSATION, tokenize=False),
        )
    base_generation = GenerationConfig.from_pretrained(base).to_diff_dict()
    generation = GenerationConfig.from_pretrained(exported).to_diff_dict()
    for key in sorted(set(base_generation) - {"transformers_version"}):
        check(f"generation_config {key}", generation.get(key), base_generation[key])
    config_path = exported / "config.json"
    if config_path.exists():
        config = json.loads(config_path.read_text())
        base_config = json.loads((base / "config.json").read_text())
        for key in ["bos_token_id", "eos_token_id", "pad_token_id"]:
            check(f"config.json {key}", config.get(key), base_config.get(key))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
