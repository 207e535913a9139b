#!/usr/bin/env python3
"""Writes the tiny Llama-family models of nn/tests/data (made by scripts/hf/make_tiny_llama.py)
as GGUF files, laid out as llama.cpp's convert_hf_to_gguf.py lays them out, for the tests of
headroom-nn's GGUF Llama layout (`pip install gguf numpy safetensors torch transformers`).

Writes, under nn/tests/data/gguf/ (or the directory given as the first argument):
- tiny-llama3.gguf: general.architecture `llama`; the query and key rows permuted as the
  converter's `LlamaModel.permute` does; Llama 3's rope scaling as the `rope_freqs.weight`
  factors the converter computes (with its original context taken from the top level of
  config.json, absent here, so 8192, as the converter does, not the 512 of rope_scaling); its
  Llama 3 style tokenizer (`pre` llama-bpe, add_bos_token true).
- tiny-qwen2.gguf: `qwen2`, with the q/k/v biases, tied (no output.weight), rows unpermuted.
- tiny-qwen3.gguf: `qwen3`, with the query/key norms and attention.key_length 16.
- tiny-smollm2.gguf: `llama` shaped as SmolLM2 (tied, rows permuted), with its tokenizer as
  the converter writes a byte-level BPE (`tokenizer.ggml.model` gpt2, `pre` smollm, the token
  list, token types with the special tokens as control tokens, the merges, the bos and eos ids,
  add_bos_token false) and SmolLM2-Instruct's chat template, so that the file alone holds the
  model and its tokenizer.

Each holds the converter's `{arch}.*` keys (block_count, context_length, embedding_length,
feed_forward_length, attention.head_count, attention.head_count_kv, rope.freq_base,
attention.layer_norm_rms_epsilon, attention.key_length and value_length, rope.dimension_count
for llama, vocab_size), the bos and eos ids, and a token list of the vocabulary's size
(placeholder tokens for tiny-qwen2 and tiny-qwen3, whose tiny models have no tokenizer).
Matrices keep the dtype the model was saved in (bf16, f16, f32), so that they read back as the
very values; norms, biases and rope factors are f32, as the converter stores every 1-D tensor.

transformers reads the llama and qwen2 files back (`from_pretrained(..., gguf_file=...)`, which
undoes the permutation with its own `reverse_permute`) into the weights of the original
models, bit for bit; the script checks it. (transformers' GGUF reader takes no head_dim from a
qwen3 file, so the tiny Qwen3, whose head_dim is not width / heads, is not checked there.)
"""

import json
import math
import sys
from pathlib import Path

import gguf
import numpy as np
import torch
from safetensors import safe_open

DATA = Path(__file__).resolve().parents[2] / "nn" / "tests" / "data"

CASES = [
    ("tiny-llama3", gguf.MODEL_ARCH.LLAMA),
    ("tiny-qwen2", gguf.MODEL_ARCH.QWEN2),
    ("tiny-qwen3", gguf.MODEL_ARCH.QWEN3),
    ("tiny-smollm2", gguf.MODEL_ARCH.LLAMA),
]

# The cases whose tokenizer.json the file carries: llama.cpp's name of its pre-tokenizer, whether
# it adds the beginning-of-sequence token, and whether the file holds SmolLM2's chat template.
TOKENIZERS = {
    "tiny-llama3": ("llama-bpe", True, False),
    "tiny-smollm2": ("smollm", False, True),
}

# SmolLM2-Instruct's chat template, as its tokenizer_config.json and its GGUF files hold it.
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% endif %}"
)

RAW_TYPES = {
    torch.bfloat16: gguf.GGMLQuantizationType.BF16,
    torch.float16: gguf.GGMLQuantizationType.F16,
    torch.float32: gguf.GGMLQuantizationType.F32,
}


def permute(weights, n_head, n_head_kv):
    """convert_hf_to_gguf.py's LlamaModel.permute: each head's two rotated halves
    interleaved row by row."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def rope_factors(config):
    """The converter's `rope_freqs.weight` for Llama 3's rope scaling (its
    generate_extra_tensors), computed as it computes them."""
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type", "").lower() != "llama3":
        return None
    base = config.get("rope_theta", 10000.0)
    dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor = scaling.get("factor", 8.0)
    low_freq_factor = scaling.get("low_freq_factor", 1.0)
    high_freq_factor = scaling.get("high_freq_factor", 4.0)
    old_context_len = config.get("original_max_position_embeddings", 8192)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            factors.append(1)
        elif wavelen > low_freq_wavelen:
            factors.append(factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(factors, dtype=torch.float32).numpy()


def hf_tensors(model_dir):
    tensors = {}
    for path in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            for key in f.keys():
                tensors[key] = f.get_tensor(key)
    return tensors


def stored(tensor):
    """The tensor as numpy bytes of its dtype (bf16 as raw 16-bit words), with its type."""
    qtype = RAW_TYPES[tensor.dtype]
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(np.uint16), qtype
    return tensor.numpy(), qtype


def write(name, arch, out):
    model_dir = DATA / name
    config = json.loads((model_dir / "config.json").read_text())
    arch_name = gguf.MODEL_ARCH_NAMES[arch]
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    path = out / f"{name}.gguf"
    writer = gguf.GGUFWriter(str(path), arch=arch_name)
    writer.add_name(name)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(config["rope_theta"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    if "head_dim" in config and config["head_dim"] is not None:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    if arch == gguf.MODEL_ARCH.LLAMA:
        writer.add_vocab_size(config["vocab_size"])
        writer.add_rope_dimension_count(head_dim)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    if name in TOKENIZERS:
        add_tokenizer(writer, model_dir, config["vocab_size"], *TOKENIZERS[name])
    else:
        writer.add_token_list([f"<t{i}>" for i in range(config["vocab_size"])])
    writer.add_bos_token_id(config["bos_token_id"])
    writer.add_eos_token_id(config["eos_token_id"])
    names = gguf.get_tensor_name_map(arch, config["num_hidden_layers"])
    tensors = hf_tensors(model_dir)
    for hf_name, tensor in tensors.items():
        if arch == gguf.MODEL_ARCH.LLAMA:
            if hf_name.endswith(("q_proj.weight", "q_proj.bias")):
                tensor = permute(tensor, heads, heads)
            elif hf_name.endswith(("k_proj.weight", "k_proj.bias")):
                tensor = permute(tensor, heads, kv_heads)
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert gguf_name is not None, hf_name
        if tensor.dim() <= 1:
            writer.add_tensor(gguf_name, tensor.float().numpy())
        else:
            data, qtype = stored(tensor.contiguous())
            raw = np.ascontiguousarray(data).view(np.uint8)
            writer.add_tensor(gguf_name, raw, raw_dtype=qtype)
    factors = rope_factors(config)
    if factors is not None:
        writer.add_tensor(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", factors)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path, tensors


def add_tokenizer(writer, model_dir, vocab_size, pre, add_bos, chat_template):
    """The byte-level BPE of model_dir/tokenizer.json as convert_hf_to_gguf.py's
    `_set_vocab_gpt2` writes it: every id's token (an unused `[PAD{i}]` where the vocabulary has
    none), added tokens as control tokens (special) or user-defined ones, the merges, and the
    tokenizer's settings."""
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    by_id = {index: token for token, index in tokenizer["model"]["vocab"].items()}
    added = {entry["id"]: entry for entry in tokenizer["added_tokens"]}
    for index, entry in added.items():
        by_id[index] = entry["content"]
    tokens, types = [], []
    for index in range(vocab_size):
        if index not in by_id:
            tokens.append(f"[PAD{index}]")
            types.append(gguf.TokenType.UNUSED)
        elif index in added:
            tokens.append(by_id[index])
            special = added[index]["special"]
            types.append(gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(by_id[index])
            types.append(gguf.TokenType.NORMAL)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_add_bos_token(add_bos)
    if chat_template:
        writer.add_chat_template(CHAT_TEMPLATE)


def check_with_transformers(path, tensors):
    """transformers' GGUF reader gives back the original weights, to the bit."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    state = model.state_dict()
    for hf_name, tensor in tensors.items():
        assert torch.equal(state[hf_name], tensor.float()), hf_name


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else DATA / "gguf")
    out.mkdir(parents=True, exist_ok=True)
    for name, arch in CASES:
        path, tensors = write(name, arch, out)
        if arch != gguf.MODEL_ARCH.QWEN3:
            check_with_transformers(path, tensors)
        print(f"{path}: {path.stat().st_size} bytes")


if __name__ == "__main__":
    main()
