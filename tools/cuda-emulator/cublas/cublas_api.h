// The slice of cuBLAS (cublas_api.h, library_types.h) the emulator implements. Values are those
// of CUDA 13.
#pragma once

#include <cstddef>

#include "../runtime/complain.h"

#define CUBLAS_API extern "C" __attribute__((visibility("default")))

typedef struct EmuBlasHandle* cublasHandle_t;
typedef void* cudaStream_t;

enum cublasStatus_t {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
    CUBLAS_STATUS_LICENSE_ERROR = 16,
};

enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 };

enum cublasPointerMode_t { CUBLAS_POINTER_MODE_HOST = 0, CUBLAS_POINTER_MODE_DEVICE = 1 };

enum cublasMath_t {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_TENSOR_OP_MATH = 1,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,
    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,
};

enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 };

enum cublasComputeType_t {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_16F_PEDANTIC = 65,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_PEDANTIC = 69,
    CUBLAS_COMPUTE_64F = 70,
    CUBLAS_COMPUTE_64F_PEDANTIC = 71,
    CUBLAS_COMPUTE_32I = 72,
    CUBLAS_COMPUTE_32I_PEDANTIC = 73,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
};

typedef int cublasGemmAlgo_t;

struct EmuBlasHandle {
    cudaStream_t stream = nullptr;
    // cublasSetWorkspace's buffer; unset means cuBLAS's own pool (and again after SetStream).
    bool workspace_set = false;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    int math_mode = CUBLAS_DEFAULT_MATH;
    int pointer_mode = CUBLAS_POINTER_MODE_HOST;
};

namespace emu_blas {

// True for a handle from cublasCreate not yet destroyed.
bool is_live(cublasHandle_t handle);

// Prints a diagnosis of a call a GPU would get wrong silently or fault on, then returns `status`.
using emu_report::complain;

}  // namespace emu_blas
