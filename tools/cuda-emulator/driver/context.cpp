// Initialisation, the one emulated device, and its primary context.

#include <atomic>
#include <cstdio>
#include <cstring>

#include "queue.h"
#include "state.h"

namespace {

std::atomic<bool> initialised{false};
EmuContext primary;
thread_local CUcontext current = nullptr;

CUresult check_device(CUdevice device) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    return device == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

// What an H100 answers, for the attributes a caller may ask; others are refused loudly so that
// a new query shows up as a clear failure instead of a made-up value.
bool attribute_value(int attribute, int* value) {
    using namespace emu::limits;
    switch (attribute) {
        case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = kMaxThreadsPerBlock; return true;
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *value = kMaxBlockDim[0]; return true;
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *value = kMaxBlockDim[1]; return true;
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *value = kMaxBlockDim[2]; return true;
        case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *value = int(kMaxGridDim[0]); return true;
        case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *value = kMaxGridDim[1]; return true;
        case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *value = kMaxGridDim[2]; return true;
        case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *value = kSharedMemoryPerBlock; return true;
        case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *value = 32; return true;
        case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = kMultiprocessors; return true;
        case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *value = 2048; return true;
        case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; return true;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; return true;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; return true;
        case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: *value = kSharedMemoryPerBlockOptin; return true;
        case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: *value = 1; return true;
        case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *value = 1; return true;
        default: return false;
    }
}

}  // namespace

namespace emu {

std::mutex& driver_lock() {
    static std::mutex lock;
    return lock;
}

CUresult check_context() {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
    // A primary context released by all who retained it has been reset.
    if (current->retains == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    return CUDA_SUCCESS;
}

}  // namespace emu

CU_API CUresult cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    initialised = true;
    return CUDA_SUCCESS;
}

CU_API CUresult cuDriverGetVersion(int* version) {
    if (!version) return CUDA_ERROR_INVALID_VALUE;
    *version = 13000;
    return CUDA_SUCCESS;
}

CU_API CUresult cuDeviceGetCount(int* count) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = 1;
    return CUDA_SUCCESS;
}

CU_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}

CU_API CUresult cuDeviceGetName(char* name, int length, CUdevice device) {
    if (CUresult r = check_device(device)) return r;
    if (!name || length <= 0) return CUDA_ERROR_INVALID_VALUE;
    std::snprintf(name, size_t(length), "%s", "CPU emulation of a CUDA device");
    return CUDA_SUCCESS;
}

CU_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice device) {
    if (CUresult r = check_device(device)) return r;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    *bytes = emu::limits::kTotalMemory;
    return CUDA_SUCCESS;
}

CU_API CUresult cuDeviceGetAttribute(int* value, int attribute, CUdevice device) {
    if (CUresult r = check_device(device)) return r;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    if (!attribute_value(attribute, value))
        return emu::complain(CUDA_ERROR_NOT_SUPPORTED, "device attribute %d is not emulated",
                             attribute);
    return CUDA_SUCCESS;
}

CU_API CUresult cuDevicePrimaryCtxRetain(CUcontext* context, CUdevice device) {
    if (CUresult r = check_device(device)) return r;
    if (!context) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    primary.retains++;
    *context = &primary;
    return CUDA_SUCCESS;
}

CU_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
    if (CUresult r = check_device(device)) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (primary.retains == 0) return CUDA_ERROR_INVALID_CONTEXT;
    // The last release resets the context, once its queued work has run.
    if (primary.retains == 1) emu::run_all_queues();
    primary.retains--;
    return CUDA_SUCCESS;
}

CU_API CUresult cuCtxSetCurrent(CUcontext context) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (context != nullptr && context != &primary) return CUDA_ERROR_INVALID_CONTEXT;
    current = context;
    return CUDA_SUCCESS;
}

CU_API CUresult cuCtxGetCurrent(CUcontext* context) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!context) return CUDA_ERROR_INVALID_VALUE;
    *context = current;
    return CUDA_SUCCESS;
}

CU_API CUresult cuCtxGetDevice(CUdevice* device) {
    if (CUresult r = emu::check_context()) return r;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    *device = 0;
    return CUDA_SUCCESS;
}

// Runs every stream's queued work (there is none outside the deferred mode).
CU_API CUresult cuCtxSynchronize() {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    emu::run_all_queues();
    return CUDA_SUCCESS;
}
