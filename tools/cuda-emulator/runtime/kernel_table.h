// The kernels of the families, by name, each callable with cuLaunchKernel's parameter array.
// Every family's generated translation unit (gen_family.py) lists its kernels with EMU_KERNEL
// and registers them when the library loads.
#pragma once

#include <cstddef>
#include <utility>

#include "grid.h"

namespace emu {

struct Kernel {
    const char* name;
    KernelBody body;
    const unsigned* param_sizes;  // sizeof each C parameter, for a check against the PTX
    unsigned param_count;
};

// The C parameter types of a kernel, deduced from its pointer: the parameter array holds one
// pointer to each argument's bytes, which are read back as exactly that type.
template <typename F>
struct KernelSignature;

template <typename... A>
struct KernelSignature<void (*)(A...)> {
    static constexpr unsigned count = sizeof...(A);
    static constexpr unsigned sizes[count + 1] = {unsigned(sizeof(A))..., 0};

    template <void (*K)(A...), size_t... I>
    static void call(void** params, std::index_sequence<I...>) {
        K(*static_cast<A*>(params[I])...);
    }
};

template <auto K>
void call_kernel(void** params) {
    using Signature = KernelSignature<decltype(K)>;
    Signature::template call<K>(params, std::make_index_sequence<Signature::count>{});
}

// Adds a family's kernels to the table, from a static object of its translation unit.
struct FamilyRegistration {
    FamilyRegistration(const char* family, const Kernel* kernels, size_t count);
};

// The kernel `name` and the family it belongs to, or null.
const Kernel* find_kernel(const char* name, const char** family);

// How many kernels a family has.
size_t family_size(const char* family);

}  // namespace emu

#define EMU_KERNEL(scope, name)                                                  \
    emu::Kernel {                                                                \
        #name, &emu::call_kernel<&scope::name>,                                  \
            emu::KernelSignature<decltype(&scope::name)>::sizes,                 \
            emu::KernelSignature<decltype(&scope::name)>::count                  \
    }
