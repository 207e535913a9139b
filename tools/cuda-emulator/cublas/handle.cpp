// Handles and their settings, and the status strings.

#include <cstdint>
#include <mutex>
#include <unordered_set>

#include "cublas_api.h"

namespace {

std::mutex handles_lock;
std::unordered_set<cublasHandle_t> handles;

}  // namespace

namespace emu_blas {

bool is_live(cublasHandle_t handle) {
    std::lock_guard<std::mutex> guard(handles_lock);
    return handles.count(handle) > 0;
}

}  // namespace emu_blas

CUBLAS_API cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    std::lock_guard<std::mutex> guard(handles_lock);
    *handle = new EmuBlasHandle;
    handles.insert(*handle);
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_API cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    std::lock_guard<std::mutex> guard(handles_lock);
    if (handles.erase(handle) == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

// As documented, setting the stream also drops the workspace set before.
CUBLAS_API cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
    if (!emu_blas::is_live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->stream = stream;
    handle->workspace_set = false;
    handle->workspace = nullptr;
    handle->workspace_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_API cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
    if (!emu_blas::is_live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
    *stream = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

// The documented contract: the buffer must be aligned to 256 bytes.
CUBLAS_API cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
    if (!emu_blas::is_live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0) return CUBLAS_STATUS_INVALID_VALUE;
    handle->workspace_set = true;
    handle->workspace = workspace;
    handle->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_API cublasStatus_t cublasSetMathMode(cublasHandle_t handle, int mode) {
    if (!emu_blas::is_live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    const int base = mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base > CUBLAS_TF32_TENSOR_OP_MATH) return CUBLAS_STATUS_INVALID_VALUE;
    handle->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_API cublasStatus_t cublasGetMathMode(cublasHandle_t handle, int* mode) {
    if (!emu_blas::is_live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->math_mode;
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_API cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, int mode) {
    if (!emu_blas::is_live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_API cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, int* mode) {
    if (!emu_blas::is_live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->pointer_mode;
    return CUBLAS_STATUS_SUCCESS;
}

CUBLAS_API const char* cublasGetStatusName(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

CUBLAS_API const char* cublasGetStatusString(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "success";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
        case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
        case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
        case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "the feature required is not supported";
        case CUBLAS_STATUS_LICENSE_ERROR: return "license error";
    }
    return "unknown error";
}
