#!/usr/bin/env python3
"""Makes the tiny Hugging Face decoders of the Llama family that headroom-nn's tests load.

Writes, under nn/tests/data/ (or the directory given as the first argument), one directory per
case, each made by `save_pretrained` plus an expected.json:
- tiny-llama3/: LlamaForCausalLM, 4 query and 2 key/value heads, Llama 3 rope scaling, untied
  head, bfloat16, sharded into several files with model.safetensors.index.json, and a Llama 3
  style tokenizer.json (byte-level BPE, `<|begin_of_text|>` prepended by its post-processor).
- tiny-smollm2/: LlamaForCausalLM shaped as SmolLM2: tied head, 4/2 heads, rope_theta 100000,
  float32, a GPT-2 style tokenizer.json that adds no BOS (`<|endoftext|>` is id 0, BOS and EOS).
- tiny-qwen2/: Qwen2ForCausalLM: q/k/v biases, tied head, 4/2 heads, rope_theta 1000000, float16.
- tiny-qwen3/: Qwen3ForCausalLM: RMSNorm on queries and keys per head, head_dim 16 (not width 32
  / 4 heads), untied, float32.
- tiny-mistral/: MistralForCausalLM: 4/2 heads, no sliding window, untied, float32. Its
  config.json stays as transformers 5 writes it (rope_theta inside `rope_parameters`, `dtype`);
  the others are rewritten to the published layout (`rope_theta` and `rope_scaling` at the top,
  `torch_dtype`), which transformers reads as well, so both layouts are covered.

Every model: width 32, 2 layers, MLP width 48, vocabulary 320, RMSNorm eps 1e-5 (1e-6 for the
Qwen ones). Its weights are drawn again after `torch.manual_seed(0)` so that none is trivial:
matrices N(0, 0.25), norm weights U(0.5, 1.5), biases N(0, 0.2).

expected.json: `text` (null where the case has no tokenizer), `ids` (the text encoded with its
special tokens, or fixed ids), `vocab_size`, `logits_shape` ([1, len(ids), vocab]), `logits`
(flattened, computed in float32 from the stored weights after loading them back, eager attention,
rounded to 7 significant digits; sdpa agrees within 1e-6 of the largest logit), `loss` (labels
= ids, transformers' shifted mean), and `batch`: the same for two rows of 5 ids (`ids` a list of
rows).

Stored tensors (name: shape; `L` = model.layers.{0,1}):
  all:    model.embed_tokens.weight [320, 32]; model.norm.weight [32]
          L.input_layernorm.weight [32]; L.post_attention_layernorm.weight [32]
          L.mlp.gate_proj.weight [48, 32]; L.mlp.up_proj.weight [48, 32]
          L.mlp.down_proj.weight [32, 48]
  llama3, smollm2, qwen2, mistral (head_dim 8):
          L.self_attn.q_proj.weight [32, 32]; L.self_attn.k_proj.weight [16, 32]
          L.self_attn.v_proj.weight [16, 32]; L.self_attn.o_proj.weight [32, 32]
  qwen2:  L.self_attn.q_proj.bias [32]; L.self_attn.k_proj.bias [16]; L.self_attn.v_proj.bias [16]
  qwen3 (head_dim 16):
          L.self_attn.q_proj.weight [64, 32]; L.self_attn.k_proj.weight [32, 32]
          L.self_attn.v_proj.weight [32, 32]; L.self_attn.o_proj.weight [32, 64]
          L.self_attn.q_norm.weight [16]; L.self_attn.k_norm.weight [16]
  untied (llama3, qwen3, mistral): lm_head.weight [320, 32]

The Llama 3 rope scaling (factor 8, low/high frequency factors 1 and 4, original context 512,
max_position_embeddings 4096) leaves the head's fastest frequency alone (wavelength 6.3 < 128),
smooths the second (wavelength 167) and divides the two slowest by 8; the script checks this
and that the scaling changes the logits.

Needs torch, transformers, tokenizers and safetensors. Deterministic: the tokenizers are trained
on a fixed text and the weights are drawn after a fixed seed.
"""

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    MistralConfig,
    PretrainedConfig,
    Qwen2Config,
    Qwen3Config,
)
from transformers.utils import logging

from make_tiny_gpt2 import CORPUS as GPT2_CORPUS

logging.disable_progress_bar()

# make_tiny_gpt2.py's corpus, and a line of numbers for the digit-splitting pre-tokenizer.
CORPUS = GPT2_CORPUS + "In 2024 the fox ran 123 steps, then 45 more, and 6789 in all.\n"

TEXT = "The fox runs 123 steps."
VOCAB_SIZE = 320
BATCH_LEN = 5

# Llama 3's pre-tokenizer pattern, as its tokenizer.json has it.
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_BOS, LLAMA3_EOS = "<|begin_of_text|>", "<|end_of_text|>"
SMOLLM2_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def train_bpe(pre_tokenizer, vocab_size: int, special: list[str]) -> Tokenizer:
    """A byte-level BPE trained on CORPUS."""
    tokenizer = Tokenizer(models.BPE(ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    assert tokenizer.get_vocab_size() == vocab_size, "the corpus is too small for the vocabulary"
    return tokenizer


def llama3_tokenizer() -> Tokenizer:
    """Llama 3's layout: BOS and EOS after the BPE pieces, BOS prepended by a template."""
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tokenizer = train_bpe(pre, VOCAB_SIZE - 2, [])
    tokenizer.add_special_tokens([LLAMA3_BOS, LLAMA3_EOS])
    bos = tokenizer.token_to_id(LLAMA3_BOS)
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(
            single=f"{LLAMA3_BOS}:0 $A:0",
            pair=f"{LLAMA3_BOS}:0 $A:0 {LLAMA3_BOS}:1 $B:1",
            special_tokens=[(LLAMA3_BOS, bos)],
        ),
    ])
    return tokenizer


def smollm2_tokenizer() -> Tokenizer:
    """SmolLM2's layout: GPT-2 style pieces, digits split, special tokens first, no BOS added."""
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    tokenizer = train_bpe(pre, VOCAB_SIZE, SMOLLM2_SPECIAL)
    tokenizer.post_processor = processors.ByteLevel(
        add_prefix_space=True, trim_offsets=False, use_regex=True
    )
    return tokenizer


def shared(**overrides) -> dict:
    """The sizes every case shares."""
    base = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return base | overrides


@dataclass
class Case:
    name: str
    config: PretrainedConfig
    dtype: torch.dtype
    tokenizer: Tokenizer | None = None
    max_shard_size: str = "50GB"
    published_layout: bool = True


def cases() -> list[Case]:
    llama3 = llama3_tokenizer()
    smollm2 = smollm2_tokenizer()
    llama3_ids = dict(
        bos_token_id=llama3.token_to_id(LLAMA3_BOS), eos_token_id=llama3.token_to_id(LLAMA3_EOS)
    )
    llama3_scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 512,
    }
    return [
        Case("tiny-llama3", LlamaConfig(**shared(
            max_position_embeddings=4096, rope_theta=500000.0, rope_scaling=llama3_scaling,
            rms_norm_eps=1e-5, tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
            **llama3_ids,
        )), torch.bfloat16, llama3, max_shard_size="40KB"),
        Case("tiny-smollm2", LlamaConfig(**shared(
            rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=0,
            eos_token_id=0,
        )), torch.float32, smollm2),
        Case("tiny-qwen2", Qwen2Config(**shared(
            rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
            use_sliding_window=False, sliding_window=64, max_window_layers=2,
            bos_token_id=VOCAB_SIZE - 1, eos_token_id=VOCAB_SIZE - 1,
        )), torch.float16),
        Case("tiny-qwen3", Qwen3Config(**shared(
            head_dim=16, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
            attention_bias=False, use_sliding_window=False, sliding_window=None,
            max_window_layers=2, bos_token_id=VOCAB_SIZE - 1, eos_token_id=VOCAB_SIZE - 1,
        )), torch.float32),
        Case("tiny-mistral", MistralConfig(**shared(
            rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=None,
            bos_token_id=1, eos_token_id=2,
        )), torch.float32, published_layout=False),
    ]


def redraw(model: torch.nn.Module) -> None:
    """Draws every weight again, so that norm weights are not ones nor biases zeros."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            elif name.endswith(".bias"):
                p.normal_(0.0, 0.2)
            else:
                p.normal_(0.0, 0.25)


def fixed_ids(count: int, start: int) -> list[int]:
    """Ids spread over the vocabulary, the first and last id included."""
    ids = [(start + 97 * i) % VOCAB_SIZE for i in range(count)]
    ids[0], ids[-1] = 0, VOCAB_SIZE - 1
    return ids


def to_published_layout(directory: Path) -> None:
    """Rewrites config.json with rope_theta and rope_scaling at the top, as the Hub has them."""
    path = directory / "config.json"
    config = json.loads(path.read_text())
    rope = dict(config.pop("rope_parameters"))
    config["rope_theta"] = rope.pop("rope_theta")
    config["rope_scaling"] = None if rope["rope_type"] == "default" else rope
    config["torch_dtype"] = config.pop("dtype")
    path.write_text(json.dumps(dict(sorted(config.items())), indent=2) + "\n")


def load(directory: Path, attention: str) -> torch.nn.Module:
    model, info = AutoModelForCausalLM.from_pretrained(
        directory, dtype=torch.float32, attn_implementation=attention, output_loading_info=True
    )
    problems = {k: v for k, v in info.items() if v}
    assert not problems, f"{directory}: loading reports {problems}"
    return model.eval()


def run(model: torch.nn.Module, rows: list[list[int]]) -> tuple[torch.Tensor, float]:
    ids = torch.tensor(rows)
    with torch.no_grad():
        out = model(ids, labels=ids)
    return out.logits, float(out.loss)


def expectation(model: torch.nn.Module, rows: list[list[int]]) -> dict:
    logits, loss = run(model, rows)
    return {
        "ids": rows,
        "logits_shape": list(logits.shape),
        "logits": [float(f"{v:.7g}") for v in logits.flatten().tolist()],
        "loss": loss,
    }


def check_rope_scaling(model: torch.nn.Module, directory: Path, rows: list[list[int]]) -> None:
    """The Llama 3 scaling keeps, smooths and divides frequencies, and changes the logits."""
    config = model.config
    head_dim = config.hidden_size // config.num_attention_heads
    theta = config.rope_parameters["rope_theta"]
    plain = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    scaled = model.model.rotary_emb.inv_freq
    ratio = (scaled / plain).tolist()
    wavelengths = [round(2 * math.pi / f, 1) for f in plain.tolist()]
    print(f"  rope wavelengths {wavelengths}, scaled/plain {[round(r, 4) for r in ratio]}")
    kept = [r for r in ratio if abs(r - 1) < 1e-6]
    divided = [r for r in ratio if abs(r - 1 / 8) < 1e-6]
    smoothed = [r for r in ratio if 1 / 8 + 1e-3 < r < 1 - 1e-3]
    assert kept and divided and smoothed, "the rope scaling does not reach all three regimes"

    config_path = directory / "config.json"
    saved = config_path.read_text()
    unscaled = json.loads(saved) | {"rope_scaling": None}
    config_path.write_text(json.dumps(unscaled))
    try:
        difference = (run(load(directory, "eager"), rows)[0] - run(model, rows)[0]).abs().max()
    finally:
        config_path.write_text(saved)
    print(f"  logits without the rope scaling differ by {difference:.3e}")
    assert difference > 1e-3, "the rope scaling does not change the logits"


def print_tensors(directory: Path) -> None:
    for file in sorted(directory.glob("*.safetensors")):
        with safe_open(file, "pt") as f:
            for name in sorted(f.keys()):
                tensor = f.get_slice(name)
                print(f"  {file.name}: {name} {tensor.get_shape()} {tensor.get_dtype()}")


def make(root: Path, case: Case) -> None:
    out = root / case.name
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.safetensors*"):
        stale.unlink()
    model = AutoModelForCausalLM.from_config(case.config, attn_implementation="eager")
    redraw(model)
    model.to(case.dtype).save_pretrained(out, max_shard_size=case.max_shard_size)
    if case.published_layout:
        to_published_layout(out)

    if case.tokenizer is None:
        text, ids = None, fixed_ids(10, 5)
    else:
        case.tokenizer.save(str(out / "tokenizer.json"))
        text, ids = TEXT, case.tokenizer.encode(TEXT).ids
        assert case.tokenizer.decode(ids) == TEXT, "the tokenizer does not round-trip the text"
    rows = [ids[:BATCH_LEN], fixed_ids(BATCH_LEN, 11)]

    # The logits of the stored weights, read back, in float32.
    model = load(out, "eager")
    eager = run(model, rows)[0]
    sdpa = (run(load(out, "sdpa"), rows)[0] - eager).abs().max() / eager.abs().max().clamp(min=1)
    print(f"{out}: eager and sdpa logits differ by {sdpa:.3e} of the largest logit")
    assert sdpa < 1e-6, "sdpa and eager attention disagree"
    if case.name == "tiny-llama3":
        check_rope_scaling(model, out, rows)

    single = expectation(model, [ids])
    expected = {"text": text, "ids": ids, "vocab_size": VOCAB_SIZE}
    expected |= {k: v for k, v in single.items() if k != "ids"}
    expected["batch"] = expectation(model, rows)
    (out / "expected.json").write_text(json.dumps(expected, separators=(",", ":")) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"  {len(ids)} ids {ids}, loss {expected['loss']:.6f}, {size} bytes")
    print_tensors(out)


def main() -> None:
    root = Path(__file__).resolve().parents[2] / "nn" / "tests" / "data"
    if len(sys.argv) > 1:
        root = Path(sys.argv[1])
    for case in cases():
        make(root, case)


if __name__ == "__main__":
    main()
