// cublasGemmStridedBatchedEx, and cublasGemmEx (its single product), as the cuBLAS documentation
// specifies them: column-major operands,
// op N, T or C (C is T for real types), leading dimensions at least the stored rows, batch
// strides in elements (0 shares one matrix), alpha and beta of the scale type through host or
// device pointers, the documented combinations of data and compute types, and C not read when
// beta is 0. Beyond the documented checks, it refuses what a GPU would get wrong silently:
// operands outside device memory, batches of C that overlap, C overlapping an input.
//
// The product is work of the handle's stream (the driver's queue.h): checked when called, run
// when the stream reaches it in the deferred mode. Scalars read through host pointers are read
// when called, as cuBLAS does; through device pointers, when the product runs.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "gemm.h"

// libcuda's range check (driver/memory.cpp) and stream queue (driver/stream.cpp); libcublas
// links against the emulated driver.
extern "C" int cuEmulatorCheckRange(unsigned long long address, size_t bytes);
extern "C" int cuEmulatorEnqueue(void* stream, void (*run)(void* item), void* item);

namespace {

using emu_blas::complain;
using emu_blas::Matrix;
using emu_blas::Product;
using emu_blas::Rounding;

// The least workspace with which, as documented, no routine fails with ALLOC_FAILED.
constexpr size_t kMinWorkspace = 16 << 10;

bool is_op(int op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

bool is_algo(int algo) { return algo == -1 || (algo >= 0 && algo <= 23) || (algo >= 99 && algo <= 115); }

// The type combinations of cublasGemmEx's table this emulator runs, and how: false when the
// combination is not one cuBLAS supports (or is one it does not emulate, said on stderr).
bool choose_precision(const char* routine, int compute, int a, int b, int c, int math_mode, Product& p) {
    if (a != b) return false;
    const bool all_f32 = a == CUDA_R_32F && c == CUDA_R_32F;
    p.in_f64 = false;
    p.rounding = Rounding::None;
    switch (compute) {
        case CUBLAS_COMPUTE_32F:
        case CUBLAS_COMPUTE_32F_PEDANTIC: {
            const bool half_in = a == CUDA_R_16F || a == CUDA_R_16BF;
            if (!all_f32 && !(half_in && (c == a || c == CUDA_R_32F))) return false;
            // The TF32 math mode lets single-precision products round their inputs to TF32.
            const bool tf32 = (math_mode & 0xf) == CUBLAS_TF32_TENSOR_OP_MATH;
            if (all_f32 && tf32 && compute == CUBLAS_COMPUTE_32F) p.rounding = Rounding::Tf32;
            return true;
        }
        case CUBLAS_COMPUTE_32F_FAST_TF32: p.rounding = Rounding::Tf32; return all_f32;
        case CUBLAS_COMPUTE_32F_FAST_16F: p.rounding = Rounding::F16; return all_f32;
        case CUBLAS_COMPUTE_32F_FAST_16BF: p.rounding = Rounding::Bf16; return all_f32;
        case CUBLAS_COMPUTE_64F:
        case CUBLAS_COMPUTE_64F_PEDANTIC:
            p.in_f64 = true;
            return a == CUDA_R_64F && c == CUDA_R_64F;
        case CUBLAS_COMPUTE_16F:
        case CUBLAS_COMPUTE_16F_PEDANTIC:
            complain(CUBLAS_STATUS_NOT_SUPPORTED, "%s: CUBLAS_COMPUTE_16F is not emulated", routine);
            return false;
        default: return false;
    }
}

// The bytes a batched operand spans: [first, last).
struct Span {
    uintptr_t first, last;
};

Span span(const Matrix& m, int batches) {
    const long long reach = (long long)(batches - 1) * m.stride;
    const long long lowest = std::min(0ll, reach);
    const long long highest = std::max(0ll, reach) + (long long)(m.cols - 1) * m.ld + m.rows;
    const auto base = reinterpret_cast<uintptr_t>(m.base);
    return {base + uintptr_t(lowest * (long long)m.element_bytes()),
            base + uintptr_t(highest * (long long)m.element_bytes())};
}

bool overlap(Span x, Span y) { return x.first < y.last && y.first < x.last; }

cublasStatus_t check_memory(const Product& p) {
    const Span c = span(p.c, p.batches);
    if (cuEmulatorCheckRange(c.first, c.last - c.first) != 0)
        return complain(CUBLAS_STATUS_EXECUTION_FAILED,
                        "%s: C (%d x %d, ldc %d, stride %lld, %d batches) "
                        "reaches outside device memory", p.routine, p.c.rows, p.c.cols, p.c.ld, p.c.stride, p.batches);
    const long long c_elements = (long long)(p.n - 1) * p.c.ld + p.m;
    if (p.batches > 1 && std::llabs(p.c.stride) < c_elements)
        return complain(CUBLAS_STATUS_EXECUTION_FAILED,
                        "%s: strideC %lld makes the %d batches of C (%lld "
                        "elements each) overlap: their writes would race", p.routine, p.c.stride, p.batches, c_elements);
    if (p.k == 0) return CUBLAS_STATUS_SUCCESS;  // A and B are not read
    const Matrix* inputs[] = {&p.a, &p.b};
    for (const Matrix* input : inputs) {
        const char name = input == &p.a ? 'A' : 'B';
        const Span s = span(*input, p.batches);
        if (cuEmulatorCheckRange(s.first, s.last - s.first) != 0)
            return complain(CUBLAS_STATUS_EXECUTION_FAILED,
                            "%s: %c (%d x %d stored, ld %d, stride %lld, %d "
                            "batches) reaches outside device memory",
                            p.routine, name, input->rows, input->cols, input->ld, input->stride, p.batches);
        if (overlap(s, c))
            return complain(CUBLAS_STATUS_EXECUTION_FAILED,
                            "%s: C overlaps %c, which it would overwrite "
                            "while it is read", p.routine, name);
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t check_workspace(const char* routine, const EmuBlasHandle& handle) {
    if (!handle.workspace_set) return CUBLAS_STATUS_SUCCESS;
    if (handle.workspace_bytes < kMinWorkspace)
        return complain(CUBLAS_STATUS_ALLOC_FAILED,
                        "%s: a workspace of %zu bytes is below the %zu "
                        "that cuBLAS documents as enough for every routine",
                        routine, handle.workspace_bytes, kMinWorkspace);
    if (cuEmulatorCheckRange(reinterpret_cast<uintptr_t>(handle.workspace), handle.workspace_bytes) != 0)
        return complain(CUBLAS_STATUS_EXECUTION_FAILED,
                        "%s: the workspace set on the handle is not live "
                        "device memory", routine);
    return CUBLAS_STATUS_SUCCESS;
}

double read_scale(const void* scale, bool in_f64) {
    if (in_f64) {
        double v;
        std::memcpy(&v, scale, sizeof v);
        return v;
    }
    float v;
    std::memcpy(&v, scale, sizeof v);
    return v;
}

// A product waiting on its stream, with where to read its scalars if they are on the device.
struct Queued {
    Product product;
    const void* alpha;
    const void* beta;
    bool device_scalars;
};

void run_queued(void* item) {
    const std::unique_ptr<Queued> queued(static_cast<Queued*>(item));
    Product& p = queued->product;
    if (queued->device_scalars) {
        p.alpha = read_scale(queued->alpha, p.in_f64);
        p.beta = read_scale(queued->beta, p.in_f64);
    }
    emu_blas::multiply(p);
}

// Both routines' checks and product; `routine` names the caller in refusals.
cublasStatus_t gemm(const char* routine, cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                    const void* alpha, const void* A, int Atype, int lda, long long strideA, const void* B,
                    int Btype, int ldb, long long strideB, const void* beta, void* C, int Ctype, int ldc,
                    long long strideC, int batchCount, int computeType, int algo) {
    if (!emu_blas::is_live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (m < 0 || n < 0 || k < 0 || batchCount < 0 || !is_op(transa) || !is_op(transb))
        return CUBLAS_STATUS_INVALID_VALUE;
    const bool trans_a = transa != CUBLAS_OP_N, trans_b = transb != CUBLAS_OP_N;
    if (lda < std::max(1, trans_a ? k : m) || ldb < std::max(1, trans_b ? n : k) || ldc < std::max(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    Product p;
    p.routine = routine;
    if (!choose_precision(routine, computeType, Atype, Btype, Ctype, handle->math_mode, p) || !is_algo(algo))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m == 0 || n == 0 || batchCount == 0) return CUBLAS_STATUS_SUCCESS;
    if (cublasStatus_t s = check_workspace(routine, *handle)) return s;
    p.trans_a = trans_a;
    p.trans_b = trans_b;
    p.m = m;
    p.n = n;
    p.k = k;
    p.batches = batchCount;
    p.a = {const_cast<void*>(A), cudaDataType_t(Atype), trans_a ? k : m, trans_a ? m : k, lda, strideA};
    p.b = {const_cast<void*>(B), cudaDataType_t(Btype), trans_b ? n : k, trans_b ? k : n, ldb, strideB};
    p.c = {C, cudaDataType_t(Ctype), m, n, ldc, strideC};
    const bool device_scalars = handle->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
    if (!device_scalars) {
        p.alpha = read_scale(alpha, p.in_f64);
        p.beta = read_scale(beta, p.in_f64);
    }
    if (cublasStatus_t s = check_memory(p)) return s;
    auto* queued = new Queued{p, alpha, beta, device_scalars};
    if (cuEmulatorEnqueue(handle->stream, run_queued, queued) != 0) {
        delete queued;
        return complain(CUBLAS_STATUS_EXECUTION_FAILED, "%s: the handle's stream is not a live stream", routine);
    }
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

CUBLAS_API cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, int transa, int transb, int m, int n, int k, const void* alpha,
    const void* A, int Atype, int lda, long long strideA, const void* B, int Btype, int ldb,
    long long strideB, const void* beta, void* C, int Ctype, int ldc, long long strideC,
    int batchCount, int computeType, int algo) {
    return gemm("cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B,
                Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo);
}

CUBLAS_API cublasStatus_t cublasGemmEx(cublasHandle_t handle, int transa, int transb, int m, int n, int k,
                                       const void* alpha, const void* A, int Atype, int lda, const void* B,
                                       int Btype, int ldb, const void* beta, void* C, int Ctype, int ldc,
                                       int computeType, int algo) {
    return gemm("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta,
                C, Ctype, ldc, 0, 1, computeType, algo);
}
