// Loaded modules and their functions, shared by module.cpp and launch.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cuda_api.h"
#include "kernel_table.h"

struct EmuFunction {
    const emu::Kernel* kernel;
    // The dynamic shared memory a launch may ask for: 48 KiB unless the kernel opted in to more.
    unsigned max_dynamic_shared = emu::limits::kSharedMemoryPerBlock;
};

struct EmuModule {
    std::string family;
    std::vector<std::unique_ptr<EmuFunction>> functions;
};

namespace emu {

// True while the function's module is loaded. Call under the driver lock.
bool is_live_function(CUfunction function);

}  // namespace emu
