// The kernels a PTX module declares, and the byte size of each of their parameters.
#pragma once

#include <string>
#include <vector>

namespace emu {

struct PtxEntry {
    std::string name;
    std::vector<unsigned> param_sizes;
};

// Reads every `.entry name(.param .u64 a, .param .align 8 .b8 b[136], ...)` of `ptx`.
std::vector<PtxEntry> ptx_entries(const std::string& ptx);

}  // namespace emu
