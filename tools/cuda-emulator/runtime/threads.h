// What a kernel sees of the emulated GPU threads: its indices, and the calls that wait for other
// threads of its block or warp. The threads of a block run as fibers on one OS thread and switch
// only inside these calls, so the index variables are plain globals that the scheduler sets
// before it resumes a thread (a call into this library makes the compiler reload them).
#pragma once

#include <cstdint>

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
};

extern uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;

namespace emu {

// The running launch's dynamic shared memory (`extern __shared__`), 16-byte aligned; shared by
// its blocks, which run one after another.
unsigned char* dynamic_shared();

// __syncthreads(): waits until every thread of the block has arrived.
void sync_block();

// __syncwarp(mask): waits until every lane of the warp has arrived.
void sync_warp(unsigned mask);

// __shfl_xor_sync on 64 bits: this lane's `bits` go out, lane (lane ^ lane_mask)'s come back.
uint64_t shuffle_xor(unsigned mask, uint64_t bits, int lane_mask, int width);

}  // namespace emu
