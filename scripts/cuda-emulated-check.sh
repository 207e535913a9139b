#!/usr/bin/env bash
# The CUDA backend's test suite on a machine without a GPU, against the CPU emulation of the
# CUDA driver and cuBLAS in tools/cuda-emulator (NVRTC stays the real one, from the
# nvidia-cuda-nvrtc Python package):
#
#   bash scripts/cuda-emulated-check.sh [--asan] [cargo test arguments...]
#
# Then it runs the trainer's GPU tests and the GPU bench (`cuda-compare --smoke`) on the
# emulation.
#
# What it checks: the backend's Rust side (contexts, streams, memory and its OOM handling,
# module loading, argument checks, error paths), every launch (its shape and its arguments,
# read with the kernels' exact C parameter types), the kernels' logic (the same .cu sources,
# compiled for the host, one block after another, the threads of a block as fibers with real
# barriers and warp shuffles), and the cuBLAS mapping (cublasGemmStridedBatchedEx as the cuBLAS
# documentation specifies it). Every op suite runs on cpu and cuda against its f64 reference.
#
# What it cannot: timing and performance, the GPU memory model (blocks run one at a time and
# the threads of a block in order, so a race between them goes unseen; CUDA_EMULATOR_ORDER=reverse
# runs them backwards to shake out some), register and shared-memory limits, and the exact
# rounding of the GPU's math functions and fused multiply-adds.
#
# --asan builds the emulator with AddressSanitizer and preloads its runtime, so that a kernel
# reading or writing outside an allocation of the driver faults with a report (accesses between
# buffers of one allocator region stay unseen).
set -euo pipefail
cd "$(dirname "$0")/.."

out=target/cuda-emulator
sanitize=
if [ "${1:-}" = "--asan" ]; then
    shift
    out=target/cuda-emulator-asan
    sanitize=address
fi

# The emulator first checks itself (its threads and its GEMM), in a few seconds.
make -s -C tools/cuda-emulator -j"$(nproc)" OUT="$PWD/$out" SANITIZE="$sanitize" all check

nvrtc_lib=$(python3 -c "import importlib.metadata as m; print(m.distribution('nvidia-cuda-nvrtc').locate_file('nvidia/cu13/lib'))")

# The emulator's folder comes first: NVRTC's folder may hold a real libcublas too.
export LD_LIBRARY_PATH="$PWD/$out:$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export HEADROOM_REQUIRE_CUDA=1 HEADROOM_REQUIRE_NVRTC=1
if [ -n "$sanitize" ]; then
    # Leak checks would report the test harness's own allocations.
    export LD_PRELOAD="$(g++ -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0
fi
cargo test -p headroom-kernels --features cuda "$@"

# Training on the emulated GPU: the planner's peak, an OOM recovered mid-step, the CPU's losses.
cargo test -p headroom-trainer --features cuda --test cuda

# The GPU bench at sizes the emulation runs in seconds: its figures mean nothing here, but every
# case it measures on a GPU runs, so a bench that would fail there fails here first.
cargo run -q -p headroom-benches --features cuda --bin cuda-compare -- --smoke
