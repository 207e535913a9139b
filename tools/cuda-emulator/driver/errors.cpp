// cuGetErrorName and cuGetErrorString, for the results the emulator returns, in the driver's
// words.

#include "cuda_api.h"

namespace {

struct Description {
    CUresult result;
    const char* name;
    const char* text;
};

constexpr Description kDescriptions[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const Description* describe(CUresult result) {
    for (const Description& d : kDescriptions)
        if (d.result == result) return &d;
    return nullptr;
}

}  // namespace

// As the driver: an unknown code is CUDA_ERROR_INVALID_VALUE, with *text set to null.
CU_API CUresult cuGetErrorName(CUresult result, const char** name) {
    if (!name) return CUDA_ERROR_INVALID_VALUE;
    const Description* d = describe(result);
    *name = d ? d->name : nullptr;
    return d ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_API CUresult cuGetErrorString(CUresult result, const char** text) {
    if (!text) return CUDA_ERROR_INVALID_VALUE;
    const Description* d = describe(result);
    *text = d ? d->text : nullptr;
    return d ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
