// The emulated threads against what CUDA specifies: index variables, __syncthreads with shared
// memory, warp shuffles between consecutive linear ids, and a barrier not all threads reach.

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "cuda_shim.h"
#include "kernel_table.h"

namespace {

__global__ void linear_ids(unsigned* out) {
    const unsigned in_block = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    out[block * blockDim.x * blockDim.y * blockDim.z + in_block] = block * 10000 + in_block;
}

// Each block reverses its slice through shared memory: every read needs another thread's write.
__global__ void reverse_in_blocks(const int* in, int* out) {
    __shared__ int tile[256];
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = in[i];
    __syncthreads();
    out[i] = tile[blockDim.x - 1 - threadIdx.x];
}

// A butterfly sum over each warp: every lane ends with the sum of its warp's values.
__global__ void warp_sums(const double* in, double* out) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    double v = in[i];
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    out[i] = v;
}

__global__ void partner_of(int offset, int* out) {
    const unsigned i = threadIdx.x;
    out[i] = __shfl_xor_sync(0xffffffffu, int(i), offset);
}

__global__ void early_exit_then_barrier() {
    if (threadIdx.x == 5) return;
    __syncthreads();
}

template <auto K>
void launch(dim3 grid, dim3 block, std::vector<void*> params) {
    emu::run_grid("test", &emu::call_kernel<K>, params.data(), grid, block, 0);
}

void test_indices() {
    const dim3 grid{3, 2, 2}, block{8, 4, 2};
    std::vector<unsigned> out(12 * 64, ~0u);
    unsigned* p = out.data();
    launch<&linear_ids>(grid, block, {&p});
    for (unsigned b = 0; b < 12; ++b)
        for (unsigned t = 0; t < 64; ++t)
            CHECK(out[b * 64 + t] == b * 10000 + t, "block %u thread %u wrote %u", b, t, out[b * 64 + t]);
}

void test_shared_memory() {
    std::vector<int> in(4 * 256), out(in.size());
    for (size_t i = 0; i < in.size(); ++i) in[i] = int(i);
    const int* a = in.data();
    int* b = out.data();
    launch<&reverse_in_blocks>({4, 1, 1}, {256, 1, 1}, {&a, &b});
    for (size_t i = 0; i < in.size(); ++i)
        CHECK(out[i] == int(i / 256 * 256 + 255 - i % 256), "out[%zu] = %d", i, out[i]);
}

void test_shuffles() {
    std::vector<double> in(2 * 256), out(in.size());
    for (size_t i = 0; i < in.size(); ++i) in[i] = double(i);
    const double* a = in.data();
    double* b = out.data();
    launch<&warp_sums>({2, 1, 1}, {256, 1, 1}, {&a, &b});
    for (size_t i = 0; i < in.size(); ++i) {
        const double first = double(i / 32 * 32), want = 32 * first + 496;
        CHECK(out[i] == want, "lane %zu summed %g, want %g", i, out[i], want);
    }
    for (int offset : {1, 5, 16}) {
        std::vector<int> partners(64);
        int* p = partners.data();
        launch<&partner_of>({1, 1, 1}, {64, 1, 1}, {&offset, &p});
        for (int i = 0; i < 64; ++i) CHECK(partners[i] == (i ^ offset), "lane %d got %d", i, partners[i]);
    }
}

// Runs `body` in a child process; returns whether it aborted, and what it wrote to stderr.
template <typename F>
bool aborts(F body, std::string& message) {
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0) return false;
    const pid_t child = fork();
    if (child == 0) {
        dup2(pipe_fds[1], 2);
        body();
        _exit(0);
    }
    close(pipe_fds[1]);
    char buffer[512];
    for (ssize_t n; (n = read(pipe_fds[0], buffer, sizeof buffer)) > 0;) message.append(buffer, size_t(n));
    close(pipe_fds[0]);
    int status = 0;
    waitpid(child, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

void test_deadlock_is_reported() {
    std::string message;
    const bool aborted = aborts([] { launch<&early_exit_then_barrier>({1, 1, 1}, {64, 1, 1}, {}); }, message);
    CHECK(aborted, "a barrier one thread never reaches did not abort");
    CHECK(message.find("deadlock") != std::string::npos &&
              message.find("63 wait at __syncthreads") != std::string::npos &&
              message.find("1 have exited") != std::string::npos,
          "message: %s", message.c_str());
}

}  // namespace

int main() {
    test_indices();
    test_shared_memory();
    test_shuffles();
    test_deadlock_is_reported();
    std::printf("threads_test: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
