#!/usr/bin/env python3
"""Makes the tiny Hugging Face Gemma 3 text decoder that headroom-nn's tests load.

Writes, under nn/tests/data/ (or the directory given as the first argument):
- tiny-gemma3/: Gemma3ForCausalLM (model_type `gemma3_text`), made by `save_pretrained`
  (config.json, generation_config.json, model.safetensors) plus an expected.json. Its config.json
  stays as transformers 5 writes it: `layer_types`, the rope bases inside `rope_parameters` keyed by
  layer type (`full_attention`, `sliding_attention`), `dtype`.
- tiny-gemma3-published-layout/: the same weights and expected.json, with config.json rewritten
  to the keys of the published gemma-3-1b file (nn/tests/data/published/gemma-3-1b.json):
  `rope_theta` (full attention) and `rope_local_base_freq` (sliding layers) at the top as
  integers, `rope_scaling: null`, `sliding_window_pattern` 3 in place of `layer_types`
  (transformers derives the same layer types from it: every third layer full), no
  `tie_word_embeddings` (tied by default), no `use_bidirectional_attention` nor
  `_sliding_window_pattern`, `torch_dtype`. The script checks that transformers reads it to the
  same logits.

The model: vocabulary 320, width 32, 3 layers, MLP width 48 (gelu_pytorch_tanh, gated), 4 query
and 2 key/value heads of head_dim 16 (not 32 / 4), query_pre_attn_scalar 24 (attention scale
24**-0.5, not 16**-0.5), layer types sliding, sliding, full with a sliding window of 4, rope base
1e6 on the full layer and 1e4 on the sliding ones, no rope scaling, RMSNorm eps 1e-6 (Gemma's:
x / rms * (1 + weight)), tied head, no softcapping, 64 positions, float32, BOS 2, EOS 1, PAD 0.
Its weights are drawn again after `torch.manual_seed(0)` so that none is trivial: matrices
N(0, 0.25), norm weights U(-0.5, 0.5) (the norm multiplies by 1 + weight, so around 0); there are
no biases.

expected.json, as make_tiny_llama.py writes it: `text` (null: no tokenizer), `ids` (12 fixed ids,
so that the window of 4 masks), `vocab_size`, `logits_shape` ([1, 12, 320]), `logits` (flattened,
computed in float32 from the stored weights after loading them back, eager attention, rounded to
7 significant digits; sdpa agrees within 1e-6 of the largest logit), `loss` (labels = ids,
transformers' shifted mean), and `batch`: the same for two rows of 5 ids (`ids` a list of rows).

Stored tensors (name: shape; `L` = model.layers.{0,1,2}); the tied head has no tensor of its own:
  model.embed_tokens.weight [320, 32]; model.norm.weight [32]
  L.input_layernorm.weight [32]; L.post_attention_layernorm.weight [32]
  L.pre_feedforward_layernorm.weight [32]; L.post_feedforward_layernorm.weight [32]
  L.self_attn.q_proj.weight [64, 32]; L.self_attn.k_proj.weight [32, 32]
  L.self_attn.v_proj.weight [32, 32]; L.self_attn.o_proj.weight [32, 64]
  L.self_attn.q_norm.weight [16]; L.self_attn.k_norm.weight [16]
  L.mlp.gate_proj.weight [48, 32]; L.mlp.up_proj.weight [48, 32]; L.mlp.down_proj.weight [32, 48]

The transformers 5 config.json also holds `_sliding_window_pattern: 6`, which transformers writes
whatever the layer types are and does not read back when `layer_types` is given; here the layer
types follow a pattern of 3, so a reader must take `layer_types` first. transformers builds the
embedding with `padding_idx = pad_token_id` (0): the logits are unaffected, but in training the
lookup gives row 0 no gradient (the tied head still does).

The script checks that each Gemma-specific setting changes the logits: the sliding window (the
same weights with a window of 64), query_pre_attn_scalar (set to head_dim) and the local rope base
(set to the global one).

Needs torch, transformers and safetensors. Deterministic: fixed ids, weights drawn after a fixed
seed.
"""

import json
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, Gemma3TextConfig
from transformers.utils import logging

from make_tiny_llama import BATCH_LEN, VOCAB_SIZE, expectation, fixed_ids, load, print_tensors, run

logging.disable_progress_bar()

NAME = "tiny-gemma3"
PUBLISHED = "tiny-gemma3-published-layout"
LAYER_TYPES = ["sliding_attention", "sliding_attention", "full_attention"]
PATTERN = 3  # every third layer full: the layer types above
ROPE_THETA = 1000000.0
ROPE_LOCAL_BASE_FREQ = 10000.0
IDS_LEN = 12


def config() -> Gemma3TextConfig:
    return Gemma3TextConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        query_pre_attn_scalar=24,
        sliding_window=4,
        layer_types=LAYER_TYPES,
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": ROPE_THETA},
            "sliding_attention": {"rope_type": "default", "rope_theta": ROPE_LOCAL_BASE_FREQ},
        },
        rms_norm_eps=1e-6,
        hidden_activation="gelu_pytorch_tanh",
        tie_word_embeddings=True,
        attention_bias=False,
        attn_logit_softcapping=None,
        final_logit_softcapping=None,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=1,
    )


def redraw(model: torch.nn.Module) -> None:
    """Draws every weight again, so that norm weights are not zeros (Gemma's norm uses 1 + w)."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            assert not name.endswith(".bias"), f"{name}: the model should have no biases"
            if "norm" in name:
                p.uniform_(-0.5, 0.5)
            else:
                p.normal_(0.0, 0.25)


def to_published_layout(directory: Path) -> None:
    """Rewrites config.json with the keys of gemma-3-1b's published file (no others).

    The rope bases are at the top as integers (`rope_theta` for the full layers,
    `rope_local_base_freq` for the sliding ones), `rope_scaling` is null, the layer types are given
    by `sliding_window_pattern` alone, and the file names no `tie_word_embeddings` (tied by
    default), no `use_bidirectional_attention`, no `_sliding_window_pattern`; `torch_dtype` for
    `dtype`.
    """
    path = directory / "config.json"
    config = json.loads(path.read_text())
    rope = config.pop("rope_parameters")
    assert rope["full_attention"] == {"rope_type": "default", "rope_theta": ROPE_THETA}, rope
    assert rope["sliding_attention"] == {
        "rope_type": "default", "rope_theta": ROPE_LOCAL_BASE_FREQ
    }, rope
    config["rope_theta"] = int(rope["full_attention"]["rope_theta"])
    config["rope_local_base_freq"] = int(rope["sliding_attention"]["rope_theta"])
    config["rope_scaling"] = None
    layer_types = config.pop("layer_types")
    derived = ["full_attention" if (i + 1) % PATTERN == 0 else "sliding_attention"
               for i in range(len(layer_types))]
    assert layer_types == derived, "the layer types do not follow the pattern"
    config["sliding_window_pattern"] = PATTERN
    assert config.pop("tie_word_embeddings") is True
    assert config.pop("use_bidirectional_attention") is False
    config.pop("_sliding_window_pattern")
    config["torch_dtype"] = config.pop("dtype")
    path.write_text(json.dumps(dict(sorted(config.items())), indent=2) + "\n")


def logits_with(directory: Path, rows: list[list[int]], change) -> torch.Tensor:
    """The logits of the stored weights with config.json changed by `change` (then restored)."""
    path = directory / "config.json"
    saved = path.read_text()
    config = json.loads(saved)
    change(config)
    path.write_text(json.dumps(config))
    try:
        return run(load(directory, "eager"), rows)[0]
    finally:
        path.write_text(saved)


def check_settings(model: torch.nn.Module, directory: Path, rows: list[list[int]]) -> None:
    """The window, the attention scale and the local rope base each change the logits."""
    attention = [layer.self_attn for layer in model.model.layers]
    assert [a.sliding_window for a in attention] == [4, 4, None], "sliding layers differ"
    assert all(abs(a.scaling - 24 ** -0.5) < 1e-12 for a in attention), "attention scale"
    rotary = model.model.rotary_emb
    for layer_type, base in [("full_attention", ROPE_THETA),
                             ("sliding_attention", ROPE_LOCAL_BASE_FREQ)]:
        plain = 1.0 / base ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16)
        assert torch.equal(getattr(rotary, f"{layer_type}_inv_freq"), plain), layer_type
    scale = model.model.embed_tokens.embed_scale
    assert scale.dtype == torch.float32 and float(scale) == float(torch.tensor(32 ** 0.5)), scale

    logits = run(model, rows)[0]

    def window(config):
        config["sliding_window"] = 64

    def scalar(config):
        config["query_pre_attn_scalar"] = config["head_dim"]

    def local_base(config):
        config["rope_parameters"]["sliding_attention"]["rope_theta"] = ROPE_THETA

    changed = {}
    for what, change in [("sliding window 64", window),
                         ("query_pre_attn_scalar = head_dim", scalar),
                         ("local rope base = global", local_base)]:
        changed[what] = logits_with(directory, rows, change)
        difference = (changed[what] - logits).abs().max()
        print(f"  logits with {what} differ by {difference:.3e}")
        assert difference > 1e-3, f"{what} does not change the logits"
    # The window masks only from the fifth position on: the first four agree with a window of 64.
    wide = changed["sliding window 64"]
    assert torch.equal(wide[:, :4], logits[:, :4]), "the window masks within its first 4 positions"


def published_layout(root: Path, out: Path, original: torch.nn.Module, inputs) -> None:
    """Copies `out` with config.json in the published layout; it must read to the same logits."""
    published = root / PUBLISHED
    if published.exists():
        shutil.rmtree(published)
    shutil.copytree(out, published)
    to_published_layout(published)
    model = load(published, "eager")
    assert model.config.layer_types == LAYER_TYPES, model.config.layer_types
    assert model.config.tie_word_embeddings, "the published layout is not tied"
    assert model.config.rope_parameters == json.loads((out / "config.json").read_text())[
        "rope_parameters"
    ], model.config.rope_parameters
    for rows in inputs:
        same = torch.equal(run(model, rows)[0], run(original, rows)[0])
        assert same, "the published layout reads differently"
    print(f"{published}: config.json in the published layout, the same logits")


def main() -> None:
    root = Path(__file__).resolve().parents[2] / "nn" / "tests" / "data"
    if len(sys.argv) > 1:
        root = Path(sys.argv[1])
    out = root / NAME
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*.safetensors*"):
        stale.unlink()
    model = AutoModelForCausalLM.from_config(config(), attn_implementation="eager")
    redraw(model)
    model.to(torch.float32).save_pretrained(out)

    ids = fixed_ids(IDS_LEN, 5)
    rows = [ids[:BATCH_LEN], fixed_ids(BATCH_LEN, 11)]

    # The logits of the stored weights, read back, in float32.
    model = load(out, "eager")
    sdpa_model = load(out, "sdpa")
    for inputs in ([ids], rows):
        eager = run(model, inputs)[0]
        sdpa = (run(sdpa_model, inputs)[0] - eager).abs().max() / eager.abs().max().clamp(min=1)
        print(f"{out}: eager and sdpa logits differ by {sdpa:.3e} of the largest logit")
        assert sdpa < 1e-6, "sdpa and eager attention disagree"
    check_settings(model, out, [ids])

    single = expectation(model, [ids])
    expected = {"text": None, "ids": ids, "vocab_size": VOCAB_SIZE}
    expected |= {k: v for k, v in single.items() if k != "ids"}
    expected["batch"] = expectation(model, rows)
    (out / "expected.json").write_text(json.dumps(expected, separators=(",", ":")) + "\n")
    size = sum(p.stat().st_size for p in out.iterdir())
    print(f"  {len(ids)} ids {ids}, loss {expected['loss']:.6f}, {size} bytes")
    print(f"  config.json keys: {sorted(json.loads((out / 'config.json').read_text()))}")
    print_tensors(out)

    published_layout(root, out, model, [[ids], rows])


if __name__ == "__main__":
    main()
