#!/usr/bin/env bash
# The CUDA backend's checks on a GPU, in two halves, so that the machine with the GPU needs no
# Rust toolchain:
#
#   bash scripts/gpu-check.sh build   # here: build the CUDA test and bench binaries into .gpu-check/
#   bash scripts/gpu-check.sh run     # there, with .gpu-check/ copied beside the sources: run them
#
# `build` also packs .gpu-check/ into .gpu-check.tar.xz (about 7 MiB, where the folder holds over
# 80): carry the archive alone, and `run` unpacks it where the folder is missing.
#
# `run tests`, `run benches`, `run fit`, `run limits`, `run llama`, `run lora`, `run long`, `run offload`, `run snapshot` and `run shard` run one part alone, or the parts named
# (for a machine that limits how long one command may take: the parts in calls of their own);
# `tests=loss,gemm` runs those test binaries alone; `--rounds=N` runs each comparison with PyTorch
# N times, alternating the two sides (1 by default).
#
# `run` runs every headroom-kernels test binary (each op suite runs on cpu and cuda against the
# f64 reference; device memory under a limit, OOM reported and recovered), headroom-alloc's CUDA
# memory source's (regions, expandable growth, the driver's refusals, two streams) and its cudarc
# example (`03-cudarc`), headroom-collectives's NCCL suite at world size 1, and the trainer's GPU tests
# (a run on cuda:0: planned peak, OOM recovered mid-step, the CPU's losses), then the GPU bench
# alone (its whole table, kept should PyTorch fail) and beside PyTorch (`benches/peers/compare.py
# cuda`, which checks the backend's targets), and where CuPy is installed the norm kernels' sweep
# over row lengths (`scripts/norm-sweep.py`); then GPT-2 small in bf16 beside PyTorch eager on the
# GPU (`benches/peers/compare.py fit --device cuda:0`, which checks the targets of activation
# bytes per sample and tokens/s), the profile of its step (`fit-profile.txt`: each kernel timed
# alone, `HEADROOM_CUDA_PROFILE`); (`limits`) what fits under 4 and 8 GiB on the GPU beside
# PyTorch's largest (`compare.py limits`); and (`allreduce`) NCCL's all-reduce over every GPU
# beside torch.distributed's (`compare.py allreduce`); and (`llama`) Llama 3.2 1B in bf16 at context
# 2048 beside transformers (`torch_fit.py --model llama-3.2-1b`, sdpa attention; needs
# transformers), at micro-batches of $LLAMA_MICRO (4), checked against the Llama issue's targets:
# activation bytes per sample at most 0.3 of transformers', tokens/s at least 1.2 of its; and
# (`lora`) LoRA of rank 16 on every linear layer of Llama 3.2 1B over its bf16 base, context 2048,
# beside PEFT (`torch_fit.py --lora 16`; needs peft), checked against the LoRA issue's targets:
# the peak at a micro-batch of one at most 0.5 of PEFT's, tokens/s at least 1.0 of its; and the
# same for QLoRA, the base in NF4 on both sides (`--base nf4`: bitsandbytes for PEFT; needs
# bitsandbytes); and (`long`) the longest context of SmolLM2-135M at a micro-batch of one under 8
# and 16 GiB (`fit-compare --longest-context`, the host tier included, confirmed by a real step)
# beside transformers with gradient checkpointing (`torch_fit.py --longest-context`), checked
# against the host-tier issue's target of 10 times its context; and (`offload`) Llama 3.2 1B in
# bf16 at context 2048, blocks recomputed, each parameter updated in the backward pass, with
# its optimizer's state and updates in the host tier (page-locked memory) and then its weights
# streamed too, beside the same step on the device alone (`fit-compare --offload --update
# in-backward`), the weights streamed in turn instead of one block ahead (`--offload
# weights-in-turn`), and the offloaded state updated after the backward pass (`--update after`),
# checked against the host-tier issue's target: the offloaded state's step (in the backward
# pass) at most 1.3 times the on-device step's, and the same two steps planned at this machine's
# rates (`headroom plan --calibrate`, the GPU's and its host CPU's) beside that ratio; and (`snapshot`) GPT-2 small's
# training steps recorded by PyTorch on the GPU (`scripts/pytorch/gpt2_memory_snapshot.py
# --device cuda`: `_record_memory_history`, `_dump_snapshot`) and replayed by `headroom-alloc
# replay --find-limit` beside PyTorch's reserved bytes; and (`shard`, on a machine of two GPUs or
# more with Open MPI) Llama 3.2 1B's bf16 full fine-tune on every GPU, one rank each over NCCL,
# with its parameters whole and then sharded (ZeRO stage 3), checked for the same losses and
# for each rank's first step peaking at its plan, with each run's tokens/s. Results land in
# .gpu-check/results/ (or $OUT when set).
# The exit status is 1 when a test failed or a target was missed.
#
# Off a GPU, `bash scripts/cuda-emulated-check.sh` runs the same tests, and the bench at smoke
# sizes, on the CPU emulation of the driver and cuBLAS. `run --smoke`, with that emulation on
# LD_LIBRARY_PATH, is a dry run of `run` itself: the bench at smoke sizes, PyTorch on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=.gpu-check

build() {
    mkdir -p "$DIR"
    local exclude
    exclude=$(git rev-parse --git-path info/exclude)
    mkdir -p "$(dirname "$exclude")"
    grep -qx "/$DIR/" "$exclude" 2>/dev/null || echo "/$DIR/" >>"$exclude"
    rm -rf "$DIR/tests" "$DIR/cuda-compare" "$DIR/fit-compare" "$DIR/allreduce-compare" "$DIR/03-cudarc" \
        "$DIR/headroom-alloc" "$DIR/headroom" "$DIR/headroom-nccl"
    mkdir -p "$DIR/tests"
    # Every headroom-kernels test binary, headroom-alloc's CUDA memory source, and the trainer's
    # GPU run.
    {
        cargo test -p headroom-kernels --features cuda --release --no-run --message-format=json
        cargo test -p headroom-alloc --features cuda --release --no-run --message-format=json \
            --test cuda
        cargo test -p headroom-trainer --features cuda --release --no-run --message-format=json \
            --test cuda
        cargo test -p headroom-collectives --features nccl --release --no-run --message-format=json \
            --test nccl
    } | python3 -c '
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["profile"]["test"]:
        print(msg["executable"])' \
        | while read -r exe; do cp "$exe" "$DIR/tests/"; done
    cargo build -p headroom-benches --features cuda --release --bin cuda-compare --bin fit-compare
    cargo build -p headroom-benches --features nccl --release --bin allreduce-compare
    cp target/release/cuda-compare target/release/fit-compare target/release/allreduce-compare "$DIR/"
    # headroom-alloc's example of a cudarc program over the allocator.
    cargo build -p headroom-alloc --features cuda --release --example 03-cudarc
    cp target/release/examples/03-cudarc "$DIR/"
    # The replay of PyTorch's memory snapshots.
    cargo build -p headroom-alloc --features cli --release --bin headroom-alloc
    cp target/release/headroom-alloc "$DIR/"
    # The trainer's tool, whose plans the offload part calibrates and compares.
    cargo build -p headroom-trainer --features cuda --release --bin headroom
    cp target/release/headroom "$DIR/"
    # The same over NCCL between the GPUs of one machine, for the shard part (it links Open MPI,
    # which launches and bootstraps the ranks).
    cargo build -p headroom-trainer --features nccl --release --bin headroom
    cp target/release/headroom "$DIR/headroom-nccl"
    strip --strip-all "$DIR"/tests/* "$DIR/cuda-compare" "$DIR/fit-compare" "$DIR/allreduce-compare" \
        "$DIR/03-cudarc" "$DIR/headroom-alloc" "$DIR/headroom" "$DIR/headroom-nccl"
    # The stripped binaries take over 80 MiB; packed, they travel in a few.
    grep -qx "/$DIR.tar.xz" "$exclude" 2>/dev/null || echo "/$DIR.tar.xz" >>"$exclude"
    tar -cJf "$DIR.tar.xz" "$DIR"
    du -sh "$DIR" "$DIR.tar.xz"
}

# Folders holding libcuda, libcublas and libnvrtc: the toolkit's, and those of pip's nvidia-*
# packages (PyTorch's).
library_path() {
    local dirs=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64)
    dirs+=($(python3 -c '
import glob, os, sys
for base in sys.path:
    for lib in glob.glob(os.path.join(base, "nvidia", "**", "lib"), recursive=True):
        print(lib)' 2>/dev/null || true))
    local IFS=:
    echo "${dirs[*]}"
}

run() {
    local results=${OUT:-$DIR/results} smoke=() peer=() rounds=1 tests=0 benches=0 fit=0 limits=0 allreduce=0 llama=0 lora=0 long=0 offload=0 snapshot=0 shard=0 only= name
    for arg in "$@"; do
        case "$arg" in
            --smoke) smoke=(--smoke) peer=(--peer-device cpu) ;;
            --rounds=*) rounds=${arg#--rounds=} ;;
            tests) tests=1 ;;
            tests=*) tests=1 only=",${arg#tests=}," ;;
            benches) benches=1 ;;
            fit) fit=1 ;;
            limits) limits=1 ;;
            allreduce) allreduce=1 ;;
            llama) llama=1 ;;
            lora) lora=1 ;;
            long) long=1 ;;
            offload) offload=1 ;;
            snapshot) snapshot=1 ;;
            shard) shard=1 ;;
            *) usage ;;
        esac
    done
    # No part named: all of them.
    if [ $((tests + benches + fit + limits + allreduce + llama + lora + long + offload + snapshot + shard)) -eq 0 ]; then
        tests=1 benches=1 fit=1 limits=1 allreduce=1 llama=1 lora=1 long=1 offload=1 snapshot=1 shard=1
    fi
    if [ ! -d "$DIR" ] && [ -f "$DIR.tar.xz" ]; then
        tar -xJf "$DIR.tar.xz"
    fi
    mkdir -p "$results"
    # Appended: a dry run's emulated driver stays first.
    export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$(library_path)"
    # cudarc loads NCCL as libnccl.so; the nvidia-nccl Python package installs libnccl.so.2 alone.
    local links=$DIR/nccl-link dir
    for dir in ${LD_LIBRARY_PATH//:/ }; do
        if [ -e "$dir/libnccl.so.2" ] && [ ! -e "$dir/libnccl.so" ]; then
            mkdir -p "$links"
            ln -sf "$(cd "$dir" && pwd)/libnccl.so.2" "$links/libnccl.so"
            export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$PWD/$links"
            break
        fi
    done
    # A test that finds no GPU, no NVRTC or no NCCL fails here instead of passing on the CPU
    # alone.
    export HEADROOM_REQUIRE_CUDA=1 HEADROOM_REQUIRE_NVRTC=1
    [ ${#smoke[@]} -gt 0 ] || export HEADROOM_REQUIRE_NCCL=1
    if [ ${#smoke[@]} -eq 0 ]; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$results/gpu.txt"
    fi
    local failed=0
    if [ "$tests" -eq 1 ]; then
        for exe in "$DIR"/tests/*; do
            [ -x "$exe" ] || continue
            # A binary is named for its test file, then a hash.
            name=$(basename "$exe")
            [ -z "$only" ] || [[ "$only" == *",${name%-*},"* ]] || continue
            echo "== $(basename "$exe")"
            "$exe" --test-threads=1 2>&1 | tee -a "$results/tests.log" | grep -E "^test result|FAILED|panicked|skipped" || failed=1
            [ "${PIPESTATUS[0]}" -eq 0 ] || failed=1
        done
        if [ -z "$only" ] || [[ "$only" == *",03-cudarc,"* ]]; then
            echo "== 03-cudarc"
            "$DIR/03-cudarc" 2>&1 | tee "$results/03-cudarc.txt" || failed=1
        fi
    fi
    if [ "$benches" -eq 1 ]; then
        echo "== benches"
        "$DIR/cuda-compare" "${smoke[@]}" | tee "$results/cuda-compare.txt" || failed=1
        python3 benches/peers/compare.py cuda --binary "$DIR/cuda-compare" --rounds "$rounds" "${smoke[@]}" "${peer[@]}" \
            | tee "$results/compare.txt" || failed=1
        # The norm kernels over row lengths (no targets), where CuPy is there to run them.
        if [ ${#smoke[@]} -eq 0 ] && python3 -c "import cupy" 2>/dev/null; then
            python3 scripts/norm-sweep.py | tee "$results/norm-sweep.txt" || failed=1
        fi
    fi
    # GPT-2 small on the GPU takes minutes; a dry run has no GPU to fit it on.
    if [ "$fit" -eq 1 ] && [ ${#smoke[@]} -eq 0 ]; then
        echo "== fit"
        python3 benches/peers/compare.py fit --device cuda:0 --binary "$DIR/fit-compare" --rounds "$rounds" \
            | tee "$results/fit.txt" || failed=1
        # Where a step's device time goes: each kernel timed alone, its totals on stderr; the
        # table on stdout has the peaks and whether the planner predicted them exactly.
        HEADROOM_CUDA_PROFILE=1 "$DIR/fit-compare" --device cuda:0 --steps 1 \
            >"$results/fit-profiled.txt" 2>"$results/fit-profile.txt" || failed=1
    fi
    # What fits under 4 and 8 GiB on the GPU, beside PyTorch's largest (part 2).
    if [ "$limits" -eq 1 ] && [ ${#smoke[@]} -eq 0 ]; then
        echo "== limits"
        python3 benches/peers/compare.py limits --device cuda:0 --binary "$DIR/fit-compare" --rounds "$rounds" \
            | tee "$results/limits.txt" || failed=1
    fi
    # NCCL's all-reduce over every GPU through headroom-collectives, beside torch.distributed's (one
    # GPU: a world of one, whose bus bandwidth is 0 by NCCL's convention).
    if [ "$allreduce" -eq 1 ] && [ ${#smoke[@]} -eq 0 ]; then
        echo "== allreduce"
        python3 benches/peers/compare.py allreduce --binary "$DIR/allreduce-compare" --rounds "$rounds" \
            | tee "$results/allreduce.txt" || failed=1
    fi
    # Llama 3.2 1B, bf16, context 2048, beside transformers at equal micro-batches.
    if [ "$llama" -eq 1 ] && [ ${#smoke[@]} -eq 0 ]; then
        echo "== llama"
        local micro=${LLAMA_MICRO:-4}
        {
            "$DIR/fit-compare" --device cuda:0 --preset llama-3.2-1b --context 2048 --precision bf16 \
                --micro-batch "$micro" --steps 3 --recompute cheap-up | grep '^{'
            python3 benches/peers/torch_fit.py --device cuda:0 --model llama-3.2-1b --context 2048 \
                --precision bf16 --micro-batch "$micro" --steps 3 --warmup 1 | grep '^{'
        } | tee "$results/llama.txt" || failed=1
        python3 - "$results/llama.txt" <<'CHECK' || failed=1
import json, sys
ours, theirs = (json.loads(line) for line in open(sys.argv[1]))
activations = ours["activation_bytes_per_sample"] / theirs["activation_bytes_per_sample"]
speed = ours["tokens_per_s"] / theirs["tokens_per_s"]
print(f"llama-3.2-1b bf16: activation bytes per sample {activations:.2f} of transformers' (target 0.3), "
      f"tokens/s {speed:.2f} of its (target 1.2), predicted exactly: {ours['predicted_exactly']}")
sys.exit(0 if activations <= 0.3 and speed >= 1.2 and ours["predicted_exactly"] else 1)
CHECK
    fi
    # LoRA and QLoRA on Llama 3.2 1B, a bf16 or NF4 base, context 2048, beside PEFT (and
    # bitsandbytes) at equal micro-batches.
    if [ "$lora" -eq 1 ] && [ ${#smoke[@]} -eq 0 ]; then
        local micro=${LLAMA_MICRO:-4} base
        for base in bf16 nf4; do
            echo "== lora, $base base"
            {
                "$DIR/fit-compare" --device cuda:0 --preset llama-3.2-1b --context 2048 --precision bf16 \
                    --micro-batch "$micro" --steps 3 --lora 16 --base "$base" | grep '^{'
                python3 benches/peers/torch_fit.py --device cuda:0 --model llama-3.2-1b --context 2048 \
                    --precision bf16 --micro-batch "$micro" --steps 3 --warmup 1 --lora 16 --base "$base" | grep '^{'
            } | tee "$results/lora-$base.txt" || failed=1
            python3 - "$results/lora-$base.txt" "$base" <<'CHECK' || failed=1
import json, sys
ours, theirs = (json.loads(line) for line in open(sys.argv[1]))
def one(r):
    return r["peak_bytes"] - (r["micro_batch"] - 1) * r["activation_bytes_per_sample"]
peak = one(ours) / one(theirs)
speed = ours["tokens_per_s"] / theirs["tokens_per_s"]
print(f"llama-3.2-1b LoRA r16, {sys.argv[2]} base: peak at one sample {peak:.2f} of PEFT's (target 0.5), "
      f"tokens/s {speed:.2f} of its (target 1.0), predicted exactly: {ours['predicted_exactly']}")
sys.exit(0 if peak <= 0.5 and speed >= 1.0 and ours["predicted_exactly"] else 1)
CHECK
        done
    fi
    # The longest context of SmolLM2-135M at a micro-batch of one under 8 and 16 GiB, the memory
    # policy choosing (the host tier included), confirmed by a real step, beside transformers
    # with gradient checkpointing (its real steps, doubling then bisecting).
    if [ "$long" -eq 1 ] && [ ${#smoke[@]} -eq 0 ]; then
        local limit
        for limit in 8GiB 16GiB; do
            echo "== longest context under $limit"
            {
                "$DIR/fit-compare" --device cuda:0 --preset smollm2-135m --longest-context "$limit" \
                    --confirm yes | grep '^{'
                python3 benches/peers/torch_fit.py --device cuda:0 --model smollm2-135m \
                    --longest-context "$limit" | grep '^{'
            } | tee "$results/longest-$limit.txt" || failed=1
            python3 - "$results/longest-$limit.txt" "$limit" <<'CHECK' || failed=1
import json, sys
ours, theirs = (json.loads(line) for line in open(sys.argv[1]))
ratio = ours["context"] / max(theirs["context"], 1)
exact = ours["peak_bytes"] == ours["predicted_peak_bytes"]
print(f"smollm2-135m under {sys.argv[2]}: {ours['context']} tokens against transformers' {theirs['context']} "
      f"({ratio:.1f}x, target 10), real step at the prediction: {exact}")
sys.exit(0 if ratio >= 10 and exact else 1)
CHECK
        done
    fi
    # Llama 3.2 1B with its optimizer offloaded, then its weights streamed, beside the step on
    # the device alone (blocks recomputed and each parameter updated in the backward pass on
    # every side, so that the host tier is the only difference: offloaded, the host thread runs
    # each update while the device goes on with the backward pass); then the weights brought
    # back as each block starts, where the fetch one block ahead does not hide their copies;
    # last, the offloaded optimizer updated after the backward pass, where nothing hides the
    # host's updates.
    if [ "$offload" -eq 1 ] && [ ${#smoke[@]} -eq 0 ]; then
        local micro=${LLAMA_MICRO:-4} what
        echo "== offload"
        for what in none optimizer weights weights-in-turn after; do
            local flags=(--update in-backward)
            case "$what" in
                optimizer | weights | weights-in-turn) flags+=(--offload "$what") ;;
                after) flags=(--offload optimizer --update after) ;;
            esac
            "$DIR/fit-compare" --device cuda:0 --preset llama-3.2-1b --context 2048 --precision bf16 \
                --micro-batch "$micro" --steps 5 --recompute blocks "${flags[@]}" | grep '^{'
        done | tee "$results/offload.txt" || failed=1
        python3 - "$results/offload.txt" <<'CHECK' || failed=1
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
device, optimizer, weights, in_turn, after = runs
slower = device["tokens_per_s"] / optimizer["tokens_per_s"]
streamed = device["tokens_per_s"] / weights["tokens_per_s"]
turn = device["tokens_per_s"] / in_turn["tokens_per_s"]
serial = device["tokens_per_s"] / after["tokens_per_s"]
exact = all(r["predicted_exactly"] for r in runs)
peaks = ", ".join(str(r["peak_bytes"]) for r in runs)
print(f"llama-3.2-1b bf16, update in the backward pass: offloaded state's step {slower:.2f}x the "
      f"on-device step's (target 1.3), streamed weights' {streamed:.2f}x fetched ahead and "
      f"{turn:.2f}x in turn; offloaded state updated after the backward pass {serial:.2f}x; "
      f"device peaks {peaks}; predicted exactly: {exact}")
sys.exit(0 if slower <= 1.3 and exact else 1)
CHECK
        # The planner's prediction of the first two steps at this machine's rates, the GPU's and
        # its host CPU's (calibrated first), beside the measured ratio above: whether it
        # prices the host's updates right.
        local plan=(plan --preset llama-3.2-1b --param-dtype bf16 --precision bf16 --device cuda
            --data uniform-tokens --batch-size "$micro" --micro-batch "$micro" --context 2048
            --recompute blocks --optimizer-in-backward --clip 0)
        {
            XDG_CACHE_HOME="$results/rates" "$DIR/headroom" "${plan[@]}" --calibrate
            XDG_CACHE_HOME="$results/rates" "$DIR/headroom" "${plan[@]}" --memory-rates calibrated \
                --offload-optimizer
        } | tee "$results/offload-plans.txt" | grep -E '^calibrated|<- chosen' || failed=1
        python3 - "$results/offload-plans.txt" <<'CHECK' || failed=1
import sys
rows = [line.split() for line in open(sys.argv[1]) if line.rstrip().endswith("<- chosen")]
device, offloaded = (float(row[row.index("<-") - 2]) for row in rows)
print(f"llama-3.2-1b bf16 planned at the calibrated rates: offloaded state's step {offloaded / device:.2f}x "
      f"the on-device step's ({offloaded:.3f} s against {device:.3f} s)")
CHECK
    fi
    # GPT-2 small's training steps recorded by PyTorch on the GPU (_record_memory_history and
    # _dump_snapshot), replayed by headroom-alloc beside what PyTorch's caching allocator
    # reserved.
    if [ "$snapshot" -eq 1 ] && [ ${#smoke[@]} -eq 0 ]; then
        echo "== snapshot"
        python3 scripts/pytorch/gpt2_memory_snapshot.py "$results/gpt2-small-cuda.pickle" \
            --device cuda --batch 8 --context 1024 | tee "$results/snapshot.txt" || failed=1
        "$DIR/headroom-alloc" replay "$results/gpt2-small-cuda.pickle" --find-limit \
            | tee -a "$results/snapshot.txt" || failed=1
    fi
    # Llama 3.2 1B on every GPU, one rank each over NCCL: the parameters whole (each rank
    # holding the whole model, its gradients summed in buckets), then sharded (ZeRO stage 3).
    if [ "$shard" -eq 1 ] && [ ${#smoke[@]} -eq 0 ]; then
        local gpus how
        gpus=$(nvidia-smi -L | wc -l)
        echo "== shard ($gpus GPUs)"
        if [ "$gpus" -lt 2 ] || ! command -v mpirun >/dev/null; then
            echo "shard: needs two GPUs or more and mpirun; not run" | tee "$results/shard.txt"
        else
            printf '[optimizer]\nshard_params = false\n' >"$results/whole.toml"
            printf '[optimizer]\nshard_params = true\n' >"$results/sharded.toml"
            for how in whole sharded; do
                rm -rf "$results/shard-$how"
                mpirun -n "$gpus" --allow-run-as-root -x LD_LIBRARY_PATH "$DIR/headroom-nccl" train \
                    --device cuda --preset llama-3.2-1b --param-dtype bf16 --precision bf16 \
                    --data uniform-tokens --context 2048 --batch-size $((2 * gpus)) --steps 6 \
                    --eval-every 0 --quiet --config "$results/$how.toml" --run-dir "$results/shard-$how" \
                    || failed=1
            done 2>&1 | tee "$results/shard.txt"
            python3 - "$results" <<'CHECK' || failed=1
import json, sys
def run(how):
    d = f"{sys.argv[1]}/shard-{how}"
    losses = [json.loads(l)["loss"] for l in open(f"{d}/metrics.jsonl") if '"loss"' in l]
    return losses, json.load(open(f"{d}/summary.json"))
(whole, w), (sharded, s) = run("whole"), run("sharded")
same = all(abs(a - b) <= 1e-2 * abs(a) for a, b in zip(whole, sharded)) and len(whole) == len(sharded)
exact = all(x["first_step_peak"] == x["plan"]["predicted_peak"] for x in (w, s))
tokens = lambda x: x["samples"] * 2048 / x["train_s"]
print(f"llama-3.2-1b bf16 on {len(s['ranks'])} GPUs: peak a rank whole {w['first_step_peak']} B, "
      f"sharded {s['first_step_peak']} B ({s['first_step_peak'] / w['first_step_peak']:.2f}x); "
      f"tokens/s whole {tokens(w):.0f}, sharded {tokens(s):.0f}; the same losses: {same}; "
      f"each first step at its plan: {exact}")
sys.exit(0 if same and exact else 1)
CHECK
        fi
    fi
    exit "$failed"
}

usage() {
    echo "usage: $0 build | run [--smoke] [--rounds=N] [tests | tests=NAME,...] [benches] [fit] [limits] [allreduce] [llama] [lora] [long] [offload] [snapshot] [shard]" >&2
    exit 2
}

case "${1:-}" in
    build) build ;;
    run) run "${@:2}" ;;
    *) usage ;;
esac
