// State the driver's entry points share: the lock, the current context, live handles.
#pragma once

#include <mutex>

#include "../runtime/complain.h"
#include "cuda_api.h"

struct EmuContext {
    int retains = 0;  // primary context references (cuDevicePrimaryCtxRetain)
};

namespace emu {

// Held by every call that touches device memory or runs a kernel: the tests run on several OS
// threads, kernels write memory other threads copy, and the block scheduler is a singleton.
std::mutex& driver_lock();

// CUDA_SUCCESS, or why no driver call can be made on this thread: cuInit not called, or no
// live context current.
CUresult check_context();

// True for null (the legacy default stream), the special default-stream handles and live
// streams. Call under the driver lock.
bool is_valid_stream(CUstream stream);

// Prints a diagnosis of a misuse the real driver would not report clearly, then returns `result`.
using emu_report::complain;

}  // namespace emu
