// The scheduler of one block's threads, and the barriers and shuffles they call.
//
// Threads run in order of their linear index (x fastest), each until it waits or finishes; then
// the barriers that every thread they wait for has reached are released, and the threads run
// again. A warp is 32 consecutive linear indices. Shuffled values go through per-thread slots,
// two sets used alternately, so that a lane that runs ahead to the next shuffle does not
// overwrite a value a later lane has yet to read from the previous one.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "fiber.h"
#include "grid.h"

uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

namespace emu {
namespace {

constexpr unsigned kWarp = 32;
constexpr unsigned kMaxThreads = 1024;
constexpr int kSyncWarp = -1;  // the lane mask a __syncwarp waits with

enum class State : unsigned char { Ready, AtWarpBarrier, AtBlockBarrier, Done };

struct Thread {
    State state;
    uint3 index;
    int lane_mask;      // what it waits with at a warp barrier: a shuffle's mask or kSyncWarp
    unsigned shuffles;  // warp barriers passed, whose parity picks the slot set
};

struct Launch {
    const char* kernel;
    KernelBody body;
    void** params;
    uint3 block_index;
};

// One block at a time runs in the process (the driver holds its lock through a launch).
struct Block {
    std::vector<std::unique_ptr<Fiber>> fibers;
    std::vector<Thread> threads;
    uint64_t slots[2][kMaxThreads];
    unsigned count = 0;
    unsigned current = 0;
    Launch launch;
};

Block block;

struct alignas(16) Aligned {
    unsigned char bytes[16];
};
// The launch's dynamic shared memory.
std::vector<Aligned> shared_memory;

// Set CUDA_EMULATOR_ORDER=reverse to run blocks and threads last first: a kernel whose result
// depends on the order (a race on a GPU) then gives a different answer.
bool reverse_order() {
    static const bool reverse = [] {
        const char* order = std::getenv("CUDA_EMULATOR_ORDER");
        return order && std::string_view(order) == "reverse";
    }();
    return reverse;
}

[[noreturn]] void fail(const char* what) {
    const uint3& b = block.launch.block_index;
    const uint3& t = block.threads[block.current].index;
    std::fprintf(stderr, "cuda-emulator: kernel %s, block (%u, %u, %u), thread (%u, %u, %u): %s\n",
                 block.launch.kernel, b.x, b.y, b.z, t.x, t.y, t.z, what);
    std::abort();
}

void thread_main() {
    block.launch.body(block.launch.params);
    block.threads[block.current].state = State::Done;
    block.fibers[block.current]->finish();
}

void wait_as(State state, int lane_mask) {
    Thread& self = block.threads[block.current];
    self.state = state;
    self.lane_mask = lane_mask;
    block.fibers[block.current]->suspend();
}

// A warp barrier's lanes must all be there: the mask is the whole warp and the warp is whole.
void check_full_warp(unsigned mask) {
    if (mask != 0xffffffffu) fail("a warp barrier or shuffle with a partial mask is not emulated");
    if ((block.current / kWarp + 1) * kWarp > block.count)
        fail("a warp barrier or shuffle in a warp of fewer than 32 threads (the block size is not "
             "a multiple of 32): lanes of its full mask do not exist");
}

// Releases the warp when all its lanes wait with the same mask; returns whether it did.
bool release_warp(unsigned first) {
    const int lane_mask = block.threads[first].lane_mask;
    for (unsigned i = first; i < first + kWarp; ++i) {
        const Thread& t = block.threads[i];
        if (t.state != State::AtWarpBarrier) return false;
        if (t.lane_mask != lane_mask) {
            block.current = i;
            fail("lanes of one warp wait at different shuffles or __syncwarp (divergent)");
        }
    }
    for (unsigned i = first; i < first + kWarp; ++i) {
        block.threads[i].state = State::Ready;
        block.threads[i].shuffles++;
    }
    return true;
}

[[noreturn]] void report_deadlock() {
    unsigned done = 0, at_block = 0, at_warp = 0;
    for (unsigned i = 0; i < block.count; ++i) {
        const State s = block.threads[i].state;
        done += s == State::Done;
        at_block += s == State::AtBlockBarrier;
        at_warp += s == State::AtWarpBarrier;
        if (s != State::Done) block.current = i;
    }
    char what[256];
    std::snprintf(what, sizeof what,
                  "deadlock: of %u threads, %u wait at __syncthreads, %u at a warp shuffle or "
                  "__syncwarp, %u have exited; a barrier is not reached by all its threads",
                  block.count, at_block, at_warp, done);
    fail(what);
}

// Releases every barrier all of whose threads have arrived. Returns false when all threads are
// done, and reports a deadlock when some wait and none can go on.
bool release_barriers() {
    bool released = false;
    for (unsigned first = 0; first + kWarp <= block.count; first += kWarp)
        released |= release_warp(first);
    unsigned done = 0, at_block = 0;
    for (unsigned i = 0; i < block.count; ++i) {
        done += block.threads[i].state == State::Done;
        at_block += block.threads[i].state == State::AtBlockBarrier;
    }
    if (done == block.count) return false;
    // Strict: a thread that exited never reaches the barrier, which CUDA leaves undefined.
    if (at_block == block.count) {
        for (Thread& t : block.threads) t.state = State::Ready;
        released = true;
    }
    if (!released) report_deadlock();
    return true;
}

void run_thread(unsigned i) {
    Thread& t = block.threads[i];
    if (t.state != State::Ready) return;
    block.current = i;
    threadIdx = t.index;
    block.fibers[i]->resume();
}

void run_block(uint3 block_index) {
    block.launch.block_index = block_index;
    blockIdx = block_index;
    for (unsigned i = 0; i < block.count; ++i) {
        block.threads[i] = {State::Ready,
                            {i % blockDim.x, i / blockDim.x % blockDim.y, i / (blockDim.x * blockDim.y)},
                            0, 0};
        block.fibers[i]->start(thread_main);
    }
    do {
        if (reverse_order()) {
            for (unsigned i = block.count; i-- > 0;) run_thread(i);
        } else {
            for (unsigned i = 0; i < block.count; ++i) run_thread(i);
        }
    } while (release_barriers());
}

}  // namespace

unsigned char* dynamic_shared() { return shared_memory.empty() ? nullptr : shared_memory[0].bytes; }

void sync_block() { wait_as(State::AtBlockBarrier, 0); }

void sync_warp(unsigned mask) {
    check_full_warp(mask);
    wait_as(State::AtWarpBarrier, kSyncWarp);
}

uint64_t shuffle_xor(unsigned mask, uint64_t bits, int lane_mask, int width) {
    check_full_warp(mask);
    if (width != int(kWarp)) fail("a shuffle with a width other than 32 is not emulated");
    if (lane_mask < 0 || lane_mask >= int(kWarp)) fail("a shuffle's lane mask is outside 0..31");
    const unsigned self = block.current;
    const unsigned set = block.threads[self].shuffles & 1u;
    block.slots[set][self] = bits;
    wait_as(State::AtWarpBarrier, lane_mask);
    return block.slots[set][self ^ unsigned(lane_mask)];
}

void run_grid(const char* kernel, KernelBody body, void** params, dim3 grid, dim3 shape, unsigned shared_bytes) {
    // In 16-byte units, so that the memory is aligned as a GPU's.
    shared_memory.assign((shared_bytes + 15) / 16, Aligned{});
    std::memset(shared_memory.data(), 0xff, shared_memory.size() * sizeof(Aligned));
    gridDim = grid;
    blockDim = shape;
    block.count = shape.x * shape.y * shape.z;
    block.launch = {kernel, body, params, {0, 0, 0}};
    block.threads.resize(block.count);
    while (block.fibers.size() < block.count) block.fibers.push_back(std::make_unique<Fiber>());
    const unsigned long long blocks = 1ull * grid.x * grid.y * grid.z;
    for (unsigned long long n = 0; n < blocks; ++n) {
        const unsigned long long b = reverse_order() ? blocks - 1 - n : n;
        run_block({unsigned(b % grid.x), unsigned(b / grid.x % grid.y),
                   unsigned(b / (1ull * grid.x * grid.y))});
    }
}

}  // namespace emu
