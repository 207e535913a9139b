#!/usr/bin/env bash
# The CUDA backend's test suite on a machine without a GPU, against the CPU emulation of the
# CUDA driver and cuBLAS in tools/cuda-emulator (NVRTC stays the real one, from the
# nvidia-cuda-nvrtc Python package):
#
#   bash scripts/cuda-emulated-check.sh [--asan] [cargo test arguments...]
#
# It runs the test suites of headroom-alloc, headroom-kernels, headroom-trainer and
# headroom-benches with the `cuda` feature: the CUDA memory source, every op on cpu and cuda,
# training on cuda, the GPU bench at smoke sizes.
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
# runs them backwards to shake out some), register limits and static shared memory (dynamic
# shared memory above 48 KiB is refused unless the kernel opted in, as on a GPU), and the exact
# rounding of the GPU's math functions and fused multiply-adds.
#
# CUDA_EMULATOR_DEFER=1 runs the suites with deferred streams: queued work runs only when
# something synchronizes (tools/cuda-emulator/README.md, Settings), so a host read that does not
# wait for its stream reads memory the queued work has not written yet.
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
# The CUDA test suites of headroom-alloc (its CUDA memory source: regions, expandable growth,
# refusals and faults), headroom-kernels, the trainer (training on cuda:0: the planner's peak, an
# OOM recovered mid-step, the CPU's losses), headroom-collectives (NCCL's argument checks; its
# collectives need a GPU and NCCL) and the benches (`cuda-compare --smoke`: every GPU
# bench case runs). One invocation, so that the crates build once; .ci/run's NVRTC step names the
# same packages and features for the same reason.
# CUDA_CHECK_FEATURES adds features to the build (.ci/run adds MPI's, so that its MPI tests run
# in this build instead of one of their own).
suites=(-p headroom-alloc -p headroom-kernels -p headroom-trainer -p headroom-collectives -p headroom-benches
    --features "headroom-alloc/cuda,headroom-trainer/cuda,headroom-collectives/nccl,headroom-benches/cuda${CUDA_CHECK_FEATURES:+,$CUDA_CHECK_FEATURES}")
if [ -n "$sanitize" ]; then
    # Built before the sanitizer's runtime is preloaded: rustc crashes under it.
    build_args=()
    for arg in "$@"; do
        [ "$arg" = "--" ] && break
        build_args+=("$arg")
    done
    cargo test "${suites[@]}" ${build_args[@]+"${build_args[@]}"} --no-run
    # Leak checks would report the test harness's own allocations.
    export LD_PRELOAD="$(g++ -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0
fi
exec cargo test "${suites[@]}" "$@"
