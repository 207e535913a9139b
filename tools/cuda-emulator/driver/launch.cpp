// cuLaunchKernel: checks the launch as the driver does (dynamic shared memory within what the
// kernel opted in to), then runs the whole grid in one go
// (nothing else runs meanwhile): before returning by default, or when its stream's queue reaches
// it in the deferred mode (queue.h), which copies the arguments first, as the driver does, so
// that the caller may reuse them at once.

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "grid.h"
#include "module.h"
#include "queue.h"
#include "state.h"

namespace {

bool within(const unsigned (&limit)[3], unsigned x, unsigned y, unsigned z) {
    return x <= limit[0] && y <= limit[1] && z <= limit[2];
}

// The driver's refusals of a shape: an empty dimension, a dimension above its limit, more than
// 1024 threads in a block.
bool is_valid_shape(dim3 grid, dim3 block) {
    using namespace emu::limits;
    if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z) return false;
    if (!within(kMaxGridDim, grid.x, grid.y, grid.z)) return false;
    if (!within(kMaxBlockDim, block.x, block.y, block.z)) return false;
    return 1ull * block.x * block.y * block.z <= kMaxThreadsPerBlock;
}

// Set CUDA_EMULATOR_TRACE=1 to print every launch.
bool tracing() {
    static const bool trace = std::getenv("CUDA_EMULATOR_TRACE") != nullptr;
    return trace;
}

// A launch's arguments copied out of the caller's parameter array, with an array of its own
// pointing at the copies.
struct Arguments {
    std::vector<std::vector<unsigned char>> bytes;
    std::vector<void*> params;

    Arguments(const emu::Kernel& kernel, void** from) : bytes(kernel.param_count), params(kernel.param_count) {
        for (unsigned i = 0; i < kernel.param_count; ++i) {
            const auto* first = static_cast<const unsigned char*>(from[i]);
            bytes[i].assign(first, first + kernel.param_sizes[i]);
            params[i] = bytes[i].data();
        }
    }
};

}  // namespace

CU_API CUresult cuLaunchKernel(CUfunction function, unsigned int grid_x, unsigned int grid_y,
                               unsigned int grid_z, unsigned int block_x, unsigned int block_y,
                               unsigned int block_z, unsigned int shared_bytes, CUstream stream,
                               void** params, void** extra) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (!emu::is_live_function(function) || !emu::is_valid_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
    const dim3 grid{grid_x, grid_y, grid_z}, block{block_x, block_y, block_z};
    if (!is_valid_shape(grid, block)) return CUDA_ERROR_INVALID_VALUE;
    const emu::Kernel& kernel = *function->kernel;
    if (shared_bytes > function->max_dynamic_shared)
        return emu::complain(CUDA_ERROR_INVALID_VALUE,
                             "cuLaunchKernel: %s asks for %u bytes of dynamic shared memory, more than the "
                             "%u it may (cuFuncSetAttribute opts in to up to %u)",
                             kernel.name, shared_bytes, function->max_dynamic_shared,
                             emu::limits::kSharedMemoryPerBlockOptin);
    if (extra)
        return emu::complain(CUDA_ERROR_NOT_SUPPORTED, "cuLaunchKernel: arguments through `extra` are not emulated");
    if (kernel.param_count > 0 && !params) return CUDA_ERROR_INVALID_VALUE;
    if (tracing())
        std::fprintf(stderr, "cuda-emulator: launch %s grid (%u, %u, %u) block (%u, %u, %u)\n",
                     kernel.name, grid_x, grid_y, grid_z, block_x, block_y, block_z);
    if (!emu::deferred()) {
        emu::run_grid(kernel.name, kernel.body, params, grid, block, shared_bytes);
        return CUDA_SUCCESS;
    }
    const auto arguments = std::make_shared<Arguments>(kernel, params);
    emu::enqueue(stream, [&kernel, arguments, grid, block, shared_bytes] {
        emu::run_grid(kernel.name, kernel.body, arguments->params.data(), grid, block, shared_bytes);
    });
    return CUDA_SUCCESS;
}
