// void emu_switch_stack(void** save, void* load)
//
// Pushes the callee-saved registers on the current stack, stores the stack pointer in *save,
// and pops the same from the stack at `load`, returning into whatever pushed it (or into the
// entry frame Fiber::start builds). The SSE and x87 control words, callee-saved too, are left
// alone: no kernel changes the rounding mode or the exception masks, so every fiber has the
// scheduler's, and saving them doubled the cost of a switch.
    .text
    .globl emu_switch_stack
    .hidden emu_switch_stack
    .type emu_switch_stack, @function
emu_switch_stack:
    .cfi_startproc
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .cfi_endproc
    .size emu_switch_stack, .-emu_switch_stack
    .section .note.GNU-stack, "", @progbits
