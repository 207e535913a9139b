// State the driver's entry points share: the lock, the current context, live handles.
#pragma once

#include <mutex>

#include "../runtime/complain.h"
#include "cuda_api.h"

struct EmuContext {
    int retains = 0;  // primary context references (cuDevicePrimaryCtxRetain)
};

namespace emu {

// Fresh device memory is filled with 0xff bytes, a NaN in every float dtype, so that a kernel
// reading memory nothing wrote gives NaNs instead of the zeros fresh pages would hold.
constexpr unsigned char kPoison = 0xff;

// Held by every call that touches device memory or runs a kernel: the tests run on several OS
// threads, kernels write memory other threads copy, and the block scheduler is a singleton.
std::mutex& driver_lock();

// CUDA_SUCCESS, or why no driver call can be made on this thread: cuInit not called, or no
// live context current.
CUresult check_context();

// True for null (the legacy default stream), the special default-stream handles and live
// streams. Call under the driver lock.
bool is_valid_stream(CUstream stream);

// Device memory in use (allocations and physical handles together) under the emulated total:
// take_memory claims `bytes` and says whether they fit; give_memory returns them. Call under
// the driver lock.
bool take_memory(size_t bytes);
void give_memory(size_t bytes);
size_t memory_in_use();

// True when [address, address + bytes) lies in mappings of virtual memory that follow one
// another without a gap, each readable and writable. Call under the driver lock.
bool is_mapped_range(CUdeviceptr address, size_t bytes);

// Prints a diagnosis of a misuse the real driver would not report clearly, then returns `result`.
using emu_report::complain;

}  // namespace emu
