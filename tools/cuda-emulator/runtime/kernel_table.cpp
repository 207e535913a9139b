#include "kernel_table.h"

#include <string>
#include <unordered_map>

namespace emu {
namespace {

struct Entry {
    const Kernel* kernel;
    const char* family;
};

// Built on first use: the families register from static initialisers in unspecified order.
std::unordered_map<std::string, Entry>& table() {
    static std::unordered_map<std::string, Entry> kernels;
    return kernels;
}

std::unordered_map<std::string, size_t>& sizes() {
    static std::unordered_map<std::string, size_t> families;
    return families;
}

}  // namespace

FamilyRegistration::FamilyRegistration(const char* family, const Kernel* kernels, size_t count) {
    // Two families defining one name would already fail to link (kernels are extern "C").
    for (size_t i = 0; i < count; ++i) table().emplace(kernels[i].name, Entry{&kernels[i], family});
    sizes()[family] += count;
}

const Kernel* find_kernel(const char* name, const char** family) {
    const auto found = table().find(name);
    if (found == table().end()) return nullptr;
    *family = found->second.family;
    return found->second.kernel;
}

size_t family_size(const char* family) {
    const auto found = sizes().find(family);
    return found == sizes().end() ? 0 : found->second;
}

}  // namespace emu
