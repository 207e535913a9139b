#!/usr/bin/env python3
"""Makes the tiny Hugging Face GPT-2 directories that headroom-nn's `hf_gpt2` tests load.

Writes, under nn/tests/data/ (or the directory given as the first argument):
- tiny-gpt2/: a 2-layer GPT-2 (width 16, 4 heads, 64 positions, 320 tokens) with a tied head,
  saved by `save_pretrained` in float16 (config.json, generation_config.json,
  model.safetensors), the byte-level BPE tokenizer it uses (tokenizer.json) and expected.json:
  a fixed text, its token ids, the model's logits for them (flattened, computed in float32 from
  the float16 weights, rounded to 6 decimals) and the loss with labels = ids (transformers'
  shifted loss).
- tiny-gpt2-untied/: the same with `tie_word_embeddings=False` (its own lm_head.weight), saved
  in bfloat16, with its own expected.json (and the tokenizer of tiny-gpt2).

The weights are stored in half precision to keep the files small (about 70 KB a directory) and
so that the tests read both half-precision formats real checkpoints come in; the round trip
through Headroom's export covers float32.

Needs torch, transformers and tokenizers. Deterministic: the tokenizer is trained on a fixed
text and the weights are drawn after `torch.manual_seed(0)`.
"""

import json
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel

CORPUS = """\
The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox
runs into the woods. Memory is a resource: a training run that runs out of it should
recover, not crash. A small model learns the shape of the text before it learns its
meaning. Tokens are bytes merged into pieces; pieces are merged into words. The river
flows to the sea, the sea rises to the clouds, and the clouds rain on the hills again.
Every step of training reads a batch, runs the model forward and backward, and updates
the weights. Numbers in a computer are rounded; the rounding is small but it adds up.
"""

TEXT = "The fox runs to the sea."

VOCAB_SIZE = 320
SPECIAL = "<|endoftext|>"


def train_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[SPECIAL],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    return tokenizer


def make(out: Path, tokenizer: Tokenizer, tied: bool, dtype: torch.dtype) -> None:
    out.mkdir(parents=True, exist_ok=True)
    eos = tokenizer.token_to_id(SPECIAL)
    config = GPT2Config(
        vocab_size=tokenizer.get_vocab_size(),
        n_positions=64,
        n_embd=16,
        n_layer=2,
        n_head=4,
        bos_token_id=eos,
        eos_token_id=eos,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).eval().to(dtype)
    model.save_pretrained(out, safe_serialization=True)
    if tied:
        tokenizer.save(str(out / "tokenizer.json"))
    # The logits of the stored (rounded) weights, computed in float32.
    model = model.float()

    ids = tokenizer.encode(TEXT).ids
    assert tokenizer.decode(ids) == TEXT, "the tokenizer does not round-trip the text"
    input_ids = torch.tensor([ids])
    with torch.no_grad():
        result = model(input_ids, labels=input_ids)
    expected = {
        "text": TEXT,
        "ids": ids,
        "vocab_size": config.vocab_size,
        "logits_shape": list(result.logits.shape),
        "logits": [round(v, 6) for v in result.logits.flatten().tolist()],
        "loss": float(result.loss),
    }
    (out / "expected.json").write_text(json.dumps(expected, separators=(",", ":")) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"{out}: {len(ids)} ids, vocab {config.vocab_size}, {size} bytes")


def main() -> None:
    root = Path(__file__).resolve().parents[2] / "nn" / "tests" / "data"
    if len(sys.argv) > 1:
        root = Path(sys.argv[1])
    tokenizer = train_tokenizer()
    make(root / "tiny-gpt2", tokenizer, tied=True, dtype=torch.float16)
    make(root / "tiny-gpt2-untied", tokenizer, tied=False, dtype=torch.bfloat16)


if __name__ == "__main__":
    main()
