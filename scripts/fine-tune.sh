#!/usr/bin/env bash
# The third main job: a model of SmolLM2-135M's shape fine-tuned under a memory limit, through
# the commands a user with downloaded weights types. Nothing can be downloaded, so the job
# first makes the "downloaded" model itself: a short pre-training on the Python standard
# library's source (all but asyncio), exported with `headroom export --hf` as a Hugging Face
# directory (config.json, bf16 weights, tokenizer.json). Then, as a user would: `train
# --init-from` that directory on asyncio's source, `eval`, `generate`, and `export --hf` of the
# fine-tuned model; then the same with `--lora` under half the limit, exported as PEFT adapters.
# Under 10 minutes on 2 CPU cores.
#
# Usage: bash scripts/fine-tune.sh [OUT_DIR]     (default runs/fine-tune)
# PRETRAIN_STEPS (12) and STEPS (12) set the steps, CONTEXT (256) and BATCH (8) the windows and
# the batch, EVAL_SIZE (32) the held-out windows an evaluation reads; HEADROOM_BIN a headroom
# binary already built (CI's short run uses the test build's), instead of building a release
# one.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/fine-tune}
pretrain_steps=${PRETRAIN_STEPS:-12}
steps=${STEPS:-12}
context=${CONTEXT:-256}
batch=${BATCH:-8}
eval_size=${EVAL_SIZE:-32}
started=$SECONDS

source scripts/stdlib-setup.sh
mkdir -p "$out"
built=$SECONDS

# The "published" model: a tokenizer and a short pre-training on the library but asyncio.
$headroom tokenizer train "$stdlib" "${files[@]}" --vocab 8192 --out "$out/tokenizer.json"
$headroom prepare "$stdlib" "${files[@]}" --skip-dir asyncio --tokenizer "$out/tokenizer.json" \
    --out "$out/pretrain-shards" --quiet
$headroom train --preset smollm2-135m --data token-shards --data-path "$out/pretrain-shards" \
    --context "$context" --batch-size "$batch" --steps "$pretrain_steps" --lr 1e-3 \
    --eval-size "$eval_size" --memory-limit 3GiB --run-dir "$out/pretrain" --overwrite --quiet
$headroom export --hf --dtype bf16 "$out/pretrain" "$out/smollm2-135m-stdlib" --overwrite
pretrained=$SECONDS

# What a user with that directory types: fine-tune it on asyncio under a tighter limit.
$headroom prepare "$stdlib/asyncio" --ext py --tokenizer "$out/smollm2-135m-stdlib" \
    --out "$out/asyncio-shards" --held-out 0.1 --quiet
$headroom train --init-from "$out/smollm2-135m-stdlib" --data token-shards \
    --data-path "$out/asyncio-shards" --context "$context" --batch-size "$batch" \
    --steps "$steps" --lr 3e-4 --eval-size "$eval_size" --memory-limit 2GiB --run-dir "$out/run" \
    --overwrite --quiet
$headroom eval --checkpoint "$out/run" --eval-size "$eval_size"
$headroom generate --checkpoint "$out/run" --prompt "async def " --max-tokens 60 \
    --temperature 0.8 --top-k 40 --seed 0
$headroom export --hf "$out/run" "$out/smollm2-135m-asyncio" --overwrite
tuned=$SECONDS

# The same with LoRA under half the limit: the model frozen, adapters of rank 8 on every linear
# layer trained, and handed back as a PEFT adapter directory.
$headroom train --init-from "$out/smollm2-135m-stdlib" --lora --data token-shards \
    --data-path "$out/asyncio-shards" --context "$context" --batch-size "$batch" \
    --steps "$steps" --lr 1e-3 --eval-size "$eval_size" --memory-limit 1GiB --run-dir "$out/lora" \
    --overwrite --quiet
$headroom eval --checkpoint "$out/lora" --eval-size "$eval_size"
$headroom export --hf "$out/lora" "$out/smollm2-135m-asyncio-lora"

echo "fine-tune job: $((pretrained - built)) s to make the pretrained model," \
     "$((tuned - pretrained)) s to fine-tune, evaluate, generate and export," \
     "$((SECONDS - tuned)) s for LoRA" \
     "($((built - started)) s to build); everything is in $out"
