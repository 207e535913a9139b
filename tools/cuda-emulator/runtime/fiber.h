// A fiber: a stack of its own on which one emulated GPU thread runs until it waits at a barrier,
// then hands the OS thread back to the scheduler that resumed it.
//
// The switch saves only the registers the x86-64 System V ABI asks a callee to preserve (rbx,
// rbp, r12-r15 and the stack pointer), in a few instructions: swapcontext also saves and
// restores the signal mask with a system call on every switch, measured here at 717 ns a round
// trip against 21 ns, and a kernel switches at every barrier of every thread.
#pragma once

#include <cstddef>

namespace emu {

class Fiber {
public:
    Fiber();
    ~Fiber();
    Fiber(const Fiber&) = delete;
    Fiber& operator=(const Fiber&) = delete;

    // Makes the next resume() start entry() from the top of the stack, whatever the fiber did
    // before. entry() must never return: it ends with finish().
    void start(void (*entry)());

    // From the scheduler: runs the fiber until it calls suspend() or finish().
    void resume();

    // From the fiber: back to the scheduler, to go on from here at the next resume().
    void suspend();

    // From the fiber: back to the scheduler for good (until the next start()).
    [[noreturn]] void finish();

private:
    static void enter();

    char* stack_ = nullptr;  // lowest usable byte, above a guard page
    size_t color_ = 0;       // bytes left unused at the top (see the constructor)
    void* stack_pointer_ = nullptr;
    void* scheduler_stack_pointer_ = nullptr;
    void (*entry_)() = nullptr;
    // AddressSanitizer must be told of every stack switch (see fiber.cpp).
    void* fake_stack_ = nullptr;
    const void* scheduler_stack_bottom_ = nullptr;
    size_t scheduler_stack_size_ = 0;
};

}  // namespace emu
