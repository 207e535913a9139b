// A batched product as cublasGemmStridedBatchedEx describes it (cublasGemmEx's is one batch), once
// its arguments are checked.
#pragma once

#include "cublas_api.h"

namespace emu_blas {

// How inputs are rounded before they are multiplied: kept, or cut to the mantissa of TF32,
// binary16 or bfloat16 (the FAST compute types and the TF32 math mode).
enum class Rounding { None, Tf32, F16, Bf16 };

// One operand as stored: a `rows` x `cols` column-major matrix with leading dimension `ld`, the
// matrix of batch i starting `i * stride` elements after `base`.
struct Matrix {
    void* base;
    cudaDataType_t type;
    int rows, cols, ld;
    long long stride;

    double at(long long batch, int row, int col) const;
    void store(long long batch, int row, int col, double value) const;
    size_t element_bytes() const;
};

// C[i] = alpha op(A[i]) op(B[i]) + beta C[i] for every batch i; op(A) is m x k, op(B) k x n.
struct Product {
    bool trans_a, trans_b;
    int m, n, k, batches;
    Matrix a, b, c;
    Rounding rounding;
    bool in_f64;         // accumulate and scale in f64 (CUBLAS_COMPUTE_64F), else in f32
    double alpha, beta;  // read in the scale type
    const char* routine; // the cuBLAS routine called, for refusals
};

// Runs the product, accumulating in order along k. C is not read when beta is 0.
void multiply(const Product& product);

}  // namespace emu_blas
