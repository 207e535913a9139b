// Modules: the PTX text is read for the names and parameter sizes of its kernels, and each name
// is bound to the host build of the same kernel. A module must match one family of the build
// exactly, so that a build older than the sources fails to load instead of running stale code.

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_set>

#include "module.h"
#include "ptx_entries.h"
#include "state.h"

namespace {

std::unordered_set<CUmodule> modules;
std::unordered_set<CUfunction> functions;

CUresult complain_ptx(const char* what, const std::string& name) {
    return emu::complain(CUDA_ERROR_INVALID_PTX,
                         "cuModuleLoadData: %s `%s` (rebuild the emulator from the current "
                         "kernel sources: scripts/cuda-emulated-check.sh does)",
                         what, name.c_str());
}

bool same_sizes(const emu::Kernel& kernel, const std::vector<unsigned>& ptx_sizes) {
    if (ptx_sizes.size() != kernel.param_count) return false;
    return std::equal(ptx_sizes.begin(), ptx_sizes.end(), kernel.param_sizes);
}

CUresult load(CUmodule* module, const void* image) {
    if (CUresult r = emu::check_context()) return r;
    if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
    const char* text = static_cast<const char*>(image);
    if (std::strncmp(text, "\x7f" "ELF", 4) == 0)
        return emu::complain(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoadData: only PTX text is emulated, not cubin");
    auto loaded = std::make_unique<EmuModule>();
    for (const emu::PtxEntry& entry : emu::ptx_entries(text)) {
        const char* family = nullptr;
        const emu::Kernel* kernel = emu::find_kernel(entry.name.c_str(), &family);
        if (!kernel) return complain_ptx("the emulator has no kernel", entry.name);
        if (loaded->functions.empty()) loaded->family = family;
        if (loaded->family != family)
            return complain_ptx("the module mixes families, at kernel", entry.name);
        if (!same_sizes(*kernel, entry.param_sizes))
            return complain_ptx("the host build's parameters differ in size from the PTX's for", entry.name);
        loaded->functions.push_back(std::make_unique<EmuFunction>(EmuFunction{kernel}));
    }
    if (loaded->functions.empty()) return complain_ptx("no kernel in the module", "");
    if (loaded->functions.size() != emu::family_size(loaded->family.c_str()))
        return complain_ptx("the module's kernels differ from the emulator's for family", loaded->family);
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    for (const auto& function : loaded->functions) functions.insert(function.get());
    *module = loaded.release();
    modules.insert(*module);
    return CUDA_SUCCESS;
}

}  // namespace

namespace emu {

bool is_live_function(CUfunction function) { return functions.count(function) > 0; }

}  // namespace emu

CU_API CUresult cuModuleLoadData(CUmodule* module, const void* image) { return load(module, image); }

CU_API CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int, void*, void**) {
    return load(module, image);
}

CU_API CUresult cuModuleUnload(CUmodule module) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (modules.erase(module) == 0) return CUDA_ERROR_INVALID_HANDLE;
    for (const auto& function : module->functions) functions.erase(function.get());
    delete module;
    return CUDA_SUCCESS;
}

// Only the opt-in to more dynamic shared memory is emulated; other attributes are refused loudly.
CU_API CUresult cuFuncSetAttribute(CUfunction function, CUfunction_attribute attribute, int value) {
    if (CUresult r = emu::check_context()) return r;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (!emu::is_live_function(function)) return CUDA_ERROR_INVALID_HANDLE;
    if (attribute != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        return emu::complain(CUDA_ERROR_NOT_SUPPORTED, "cuFuncSetAttribute: attribute %d is not emulated",
                             int(attribute));
    if (value < 0 || unsigned(value) > emu::limits::kSharedMemoryPerBlockOptin) return CUDA_ERROR_INVALID_VALUE;
    function->max_dynamic_shared = unsigned(value);
    return CUDA_SUCCESS;
}

CU_API CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
    if (CUresult r = emu::check_context()) return r;
    if (!function || !name) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> guard(emu::driver_lock());
    if (modules.count(module) == 0) return CUDA_ERROR_INVALID_HANDLE;
    for (const auto& candidate : module->functions) {
        if (std::strcmp(candidate->kernel->name, name) == 0) {
            *function = candidate.get();
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}
