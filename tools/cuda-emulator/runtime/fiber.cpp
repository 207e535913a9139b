#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#if !defined(__x86_64__)
#error "the fiber switch is written for x86-64 (fiber_switch_x86_64.S)"
#endif

extern "C" void emu_switch_stack(void** save, void* load);

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

namespace emu {
namespace {

// Kernels keep little on the stack; AddressSanitizer's redzones make frames several times larger.
constexpr size_t kStackBytes = EMU_ASAN ? (512 << 10) : (128 << 10);

// The fiber running on this OS thread, for Fiber::enter, which takes no argument.
thread_local Fiber* entering = nullptr;

size_t page_size() {
    static const size_t size = size_t(sysconf(_SC_PAGESIZE));
    return size;
}

}  // namespace

Fiber::Fiber() {
    // A guard page below the stack turns an overflow into a fault instead of silent corruption.
    void* base = mmap(nullptr, kStackBytes + page_size(), PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        std::perror("cuda-emulator: mmap of a fiber stack");
        std::abort();
    }
    mprotect(base, page_size(), PROT_NONE);
    stack_ = static_cast<char*>(base) + page_size();
    // Stacks of page-aligned tops would all start in the same cache sets, and a block's threads
    // take turns on them at every barrier: each fiber starts at its own offset instead.
    static unsigned created = 0;
    color_ = (created++ % 64) * 64;
}

Fiber::~Fiber() { munmap(stack_ - page_size(), kStackBytes + page_size()); }

void Fiber::start(void (*entry)()) {
    entry_ = entry;
    // The frame emu_switch_stack pops: six zeroed registers, then the return address, enter().
    // Above it a null word stands for enter()'s own return address, so that enter() starts with
    // the stack aligned as after a call (rsp + 8 a multiple of 16).
    auto* sp = reinterpret_cast<uint64_t*>(stack_ + kStackBytes - color_);
    *--sp = 0;
    *--sp = reinterpret_cast<uint64_t>(&Fiber::enter);
    for (int i = 0; i < 6; ++i) *--sp = 0;
    stack_pointer_ = sp;
}

void Fiber::resume() {
    entering = this;
    void* scheduler_fake_stack = nullptr;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&scheduler_fake_stack, stack_, kStackBytes);
#endif
    emu_switch_stack(&scheduler_stack_pointer_, stack_pointer_);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(scheduler_fake_stack, nullptr, nullptr);
#endif
    (void)scheduler_fake_stack;
}

void Fiber::suspend() {
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&fake_stack_, scheduler_stack_bottom_, scheduler_stack_size_);
#endif
    emu_switch_stack(&stack_pointer_, scheduler_stack_pointer_);
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(fake_stack_, &scheduler_stack_bottom_, &scheduler_stack_size_);
#endif
}

void Fiber::finish() {
#if EMU_ASAN
    // A null fake stack tells AddressSanitizer this stack's frames are gone for good.
    __sanitizer_start_switch_fiber(nullptr, scheduler_stack_bottom_, scheduler_stack_size_);
#endif
    emu_switch_stack(&stack_pointer_, scheduler_stack_pointer_);
    std::fprintf(stderr, "cuda-emulator: a finished fiber was resumed without start()\n");
    std::abort();
}

void Fiber::enter() {
    Fiber* self = entering;
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &self->scheduler_stack_bottom_,
                                    &self->scheduler_stack_size_);
#endif
    self->entry_();
    std::fprintf(stderr, "cuda-emulator: a fiber's entry returned instead of calling finish()\n");
    std::abort();
}

}  // namespace emu
