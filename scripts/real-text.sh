#!/usr/bin/env bash
# The second main job: a GPT trained on real text that every machine with Python has, the
# Python standard library's own source, end to end: a tokenizer trained on it, the text
# prepared into shards, gpt-mini trained under a memory limit, its held-out perplexity, and a
# sample. Under 10 minutes on 2 CPU cores.
#
# Usage: bash scripts/real-text.sh [OUT_DIR]     (default runs/real-text)
# STEPS sets the training steps (300); HEADROOM_BIN a headroom binary already built (CI's short
# run uses the test build's), instead of building a release one.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/real-text}
steps=${STEPS:-300}
started=$SECONDS

source scripts/stdlib-setup.sh
mkdir -p "$out"
built=$SECONDS

$headroom tokenizer train "$stdlib" "${files[@]}" --vocab 8192 --out "$out/tokenizer.json"
$headroom prepare "$stdlib" "${files[@]}" --tokenizer "$out/tokenizer.json" --out "$out/shards"
$headroom train --preset gpt-mini --data token-shards --data-path "$out/shards" \
    --memory-limit 256MiB --batch-size 16 --steps "$steps" --run-dir "$out/run" --overwrite --quiet
$headroom eval --checkpoint "$out/run"
$headroom generate --checkpoint "$out/run" --prompt "import os" --max-tokens 120 \
    --temperature 0.8 --top-k 40 --seed 0

echo "real-text run: $((SECONDS - built)) s from the tokenizer to the sample" \
     "($((built - started)) s to build); everything is in $out"
