// cublasGemmStridedBatchedEx and cublasGemmEx of the emulated libcublas against the definition in the cuBLAS
// documentation, written out independently here: column-major matrices, element (i, j) of a
// matrix with leading dimension ld at i + j * ld, op(X) = X or X^T, batch b at b * stride.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "check.h"
#include "context.h"
#include "cublas_api.h"
#include "cuda_api.h"
#include "half.h"

CU_API CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CU_API CUresult cuMemFree_v2(CUdeviceptr);
CU_API CUresult cuCtxSynchronize();
CUBLAS_API cublasStatus_t cublasCreate_v2(cublasHandle_t*);
CUBLAS_API cublasStatus_t cublasDestroy_v2(cublasHandle_t);
CUBLAS_API cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void*, size_t);
CUBLAS_API cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, int, int, int, int, int, const void*,
                                                     const void*, int, int, long long, const void*, int, int,
                                                     long long, const void*, void*, int, int, long long, int,
                                                     int, int);
CUBLAS_API cublasStatus_t cublasGemmEx(cublasHandle_t, int, int, int, int, int, const void*, const void*, int, int,
                                       const void*, int, int, const void*, void*, int, int, int, int);

namespace {

// Device memory holding doubles converted to one storage type.
struct DeviceArray {
    int type;
    size_t count;
    void* data = nullptr;

    DeviceArray(int type, size_t count) : type(type), count(count) {
        CUdeviceptr p = 0;
        cuMemAlloc_v2(&p, count * bytes());
        data = reinterpret_cast<void*>(p);
    }
    ~DeviceArray() { cuMemFree_v2(reinterpret_cast<CUdeviceptr>(data)); }

    size_t bytes() const { return type == CUDA_R_64F ? 8 : type == CUDA_R_32F ? 4 : 2; }

    void set(size_t i, double v) {
        char* p = static_cast<char*>(data) + i * bytes();
        if (type == CUDA_R_64F) std::memcpy(p, &v, 8);
        if (type == CUDA_R_32F) { const float f = float(v); std::memcpy(p, &f, 4); }
        if (type == CUDA_R_16F) { const uint16_t h = host_f32_to_f16(float(v)); std::memcpy(p, &h, 2); }
        if (type == CUDA_R_16BF) { const uint16_t h = host_f32_to_bf16(float(v)); std::memcpy(p, &h, 2); }
    }

    // Element i once the work queued so far has run (with CUDA_EMULATOR_DEFER=1 it waits).
    double get(size_t i) const {
        cuCtxSynchronize();
        const char* p = static_cast<const char*>(data) + i * bytes();
        if (type == CUDA_R_64F) { double v; std::memcpy(&v, p, 8); return v; }
        if (type == CUDA_R_32F) { float v; std::memcpy(&v, p, 4); return v; }
        uint16_t h;
        std::memcpy(&h, p, 2);
        return type == CUDA_R_16F ? host_f16_to_f32(h) : host_bf16_to_f32(h);
    }
};

// Small exact values (multiples of 1/4), so that every type and order of summation agrees.
double value(size_t i) { return double(int(i * 7 % 11) - 5) / 4; }

struct Case {
    bool ta, tb;
    int m, n, k, batches;
    long long stride_a_factor;  // 0: one A shared by every batch
    int type, compute;
    double beta;
    bool single = false;  // through cublasGemmEx (one batch)
};

void run_case(cublasHandle_t handle, const Case& c) {
    const int a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
    const int b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
    const int lda = a_rows + 2, ldb = b_rows + 1, ldc = c.m + 3;
    const long long sa = c.stride_a_factor * lda * a_cols, sb = (long long)ldb * b_cols + 5, sc = (long long)ldc * c.n;
    DeviceArray a(c.type, size_t(sa ? sa * c.batches : lda * a_cols));
    DeviceArray b(c.type, size_t(sb * c.batches)), out(c.type, size_t(sc * c.batches));
    for (size_t i = 0; i < a.count; ++i) a.set(i, value(i));
    for (size_t i = 0; i < b.count; ++i) b.set(i, value(i + 3));
    for (size_t i = 0; i < out.count; ++i) out.set(i, c.beta == 0 ? NAN : value(i + 5));
    std::vector<double> before(out.count);
    for (size_t i = 0; i < out.count; ++i) before[i] = out.get(i);
    const bool f64 = c.compute == CUBLAS_COMPUTE_64F;
    const float alpha32 = 1.5f, beta32 = float(c.beta);
    const double alpha64 = 1.5, beta64 = c.beta;
    const void* alpha = f64 ? static_cast<const void*>(&alpha64) : &alpha32;
    const void* beta = f64 ? static_cast<const void*>(&beta64) : &beta32;
    const int op_a = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasStatus_t status =
        c.single ? cublasGemmEx(handle, op_a, op_b, c.m, c.n, c.k, alpha, a.data, c.type, lda, b.data, c.type, ldb,
                                beta, out.data, c.type, ldc, c.compute, -1)
                 : cublasGemmStridedBatchedEx(handle, op_a, op_b, c.m, c.n, c.k, alpha, a.data, c.type, lda, sa,
                                              b.data, c.type, ldb, sb, beta, out.data, c.type, ldc, sc, c.batches,
                                              c.compute, -1);
    CHECK(status == CUBLAS_STATUS_SUCCESS, "status %d", status);
    for (int batch = 0; batch < c.batches; ++batch) {
        for (int j = 0; j < c.n; ++j) {
            for (int i = 0; i < c.m; ++i) {
                double sum = 0;
                for (int l = 0; l < c.k; ++l) {
                    const size_t ai = batch * sa + (c.ta ? l + size_t(i) * lda : i + size_t(l) * lda);
                    const size_t bi = batch * sb + (c.tb ? j + size_t(l) * ldb : l + size_t(j) * ldb);
                    sum += a.get(ai) * b.get(bi);
                }
                const size_t ci = batch * sc + i + size_t(j) * ldc;
                const double want = 1.5 * sum + (c.beta == 0 ? 0 : c.beta * before[ci]);
                CHECK(out.get(ci) == want, "type %d ta %d tb %d batch %d C(%d, %d) = %g, want %g", c.type,
                      c.ta, c.tb, batch, i, j, out.get(ci), want);
            }
            for (int i = c.m; i < ldc; ++i) {  // the padding below each column stays as it was
                const size_t ci = batch * sc + i + size_t(j) * ldc;
                CHECK(std::isnan(out.get(ci)) == std::isnan(before[ci]) &&
                          (std::isnan(before[ci]) || out.get(ci) == before[ci]),
                      "padding C(%d, %d) of batch %d was written", i, j, batch);
            }
        }
    }
}

void test_products(cublasHandle_t handle) {
    const int types[][2] = {{CUDA_R_32F, CUBLAS_COMPUTE_32F},
                            {CUDA_R_64F, CUBLAS_COMPUTE_64F},
                            {CUDA_R_16F, CUBLAS_COMPUTE_32F},
                            {CUDA_R_16BF, CUBLAS_COMPUTE_32F}};
    for (const auto& [type, compute] : types)
        for (int ta = 0; ta < 2; ++ta)
            for (int tb = 0; tb < 2; ++tb)
                for (long long shared_a = 0; shared_a < 2; ++shared_a)
                    for (double beta : {0.0, 1.0}) {
                        run_case(handle, {ta == 1, tb == 1, 3, 4, 5, 3, shared_a, type, compute, beta});
                        if (shared_a == 1)
                            run_case(handle, {ta == 1, tb == 1, 3, 4, 5, 1, 1, type, compute, beta, true});
                    }
}

void test_tf32_rounds_inputs(cublasHandle_t handle) {
    DeviceArray a(CUDA_R_32F, 1), b(CUDA_R_32F, 1), c(CUDA_R_32F, 1);
    a.set(0, 1.0 + std::ldexp(1.0, -12));  // below TF32's 10-bit mantissa: rounds to 1
    b.set(0, 1.0);
    const float one = 1, zero = 0;
    for (int compute : {CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32}) {
        cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, a.data, CUDA_R_32F, 1, 0,
                                   b.data, CUDA_R_32F, 1, 0, &zero, c.data, CUDA_R_32F, 1, 0, 1, compute, -1);
        const double want = compute == CUBLAS_COMPUTE_32F ? a.get(0) : 1.0;
        CHECK(c.get(0) == want, "compute %d gave %.10g, want %.10g", compute, c.get(0), want);
    }
}

void test_documented_refusals(cublasHandle_t handle) {
    DeviceArray a(CUDA_R_32F, 64), c(CUDA_R_32F, 64);
    const float one = 1, zero = 0;
    auto gemm = [&](int m, int lda, int compute, int type_c) {
        return cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, m, 2, 2, &one, a.data, CUDA_R_32F, lda,
                                          0, a.data, CUDA_R_32F, 2, 0, &zero, c.data, type_c, 4, 0, 1, compute, -1);
    };
    CHECK(gemm(4, 4, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS, "a valid product");
    CHECK(gemm(4, 3, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_INVALID_VALUE, "lda < m");
    CHECK(gemm(-1, 4, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_INVALID_VALUE, "m < 0");
    CHECK(gemm(4, 4, CUBLAS_COMPUTE_64F, CUDA_R_32F) == CUBLAS_STATUS_NOT_SUPPORTED, "f32 data, f64 compute");
    CHECK(gemm(4, 4, CUBLAS_COMPUTE_32F, CUDA_R_16F) == CUBLAS_STATUS_NOT_SUPPORTED, "f32 inputs, f16 output");
    CHECK(cublasSetWorkspace_v2(handle, static_cast<char*>(c.data) + 4, 1024) == CUBLAS_STATUS_INVALID_VALUE,
          "a workspace not aligned to 256 bytes");
    DeviceArray small(CUDA_R_32F, 256);
    cublasSetWorkspace_v2(handle, small.data, 1024);
    CHECK(gemm(4, 4, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_ALLOC_FAILED, "a 1 KiB workspace");
    DeviceArray enough(CUDA_R_32F, 4096);
    cublasSetWorkspace_v2(handle, enough.data, 16 << 10);
    CHECK(gemm(4, 4, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS, "a 16 KiB workspace");
    std::vector<float> host(64);
    CHECK(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 2, &one, host.data(), CUDA_R_32F, 4, 0,
                                     a.data, CUDA_R_32F, 2, 0, &zero, c.data, CUDA_R_32F, 4, 0, 1,
                                     CUBLAS_COMPUTE_32F, -1) == CUBLAS_STATUS_EXECUTION_FAILED,
          "host memory as A");
    CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 2, &one, host.data(), CUDA_R_32F, 4, a.data,
                       CUDA_R_32F, 2, &zero, c.data, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F, -1) ==
              CUBLAS_STATUS_EXECUTION_FAILED,
          "host memory as A of cublasGemmEx");
}

}  // namespace

int main() {
    open_device();
    cublasHandle_t handle;
    cublasCreate_v2(&handle);
    test_products(handle);
    test_tf32_rounds_inputs(handle);
    test_documented_refusals(handle);
    cublasDestroy_v2(handle);
    std::printf("gemm_test: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
