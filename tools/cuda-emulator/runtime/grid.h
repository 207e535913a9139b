// Running a kernel over a grid: what the driver's cuLaunchKernel calls.
#pragma once

#include "threads.h"

namespace emu {

// Calls a kernel with cuLaunchKernel's parameter array (kernel_table.h builds these).
using KernelBody = void (*)(void** params);

// Runs every block of `grid` one after another, each block's threads as fibers, and returns
// when all have finished; `shared_bytes` of dynamic shared memory (emu::dynamic_shared) are
// fresh for the launch, filled with 0xff bytes as fresh device memory is. The dimensions must be valid (the driver checks them). A barrier that
// some thread of its block or warp never reaches is reported and aborts the process: on a GPU
// it would hang or do something undefined.
void run_grid(const char* kernel, KernelBody body, void** params, dim3 grid, dim3 block, unsigned shared_bytes);

}  // namespace emu
