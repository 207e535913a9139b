// Lets the CUDA C kernel sources compile as host C++17: the CUDA keywords, the built-in index
// variables, barriers and warp shuffles of the emulated threads (runtime/threads.h), and the
// device math library. Included before a family's source; NVRTC never sees this file.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <math.h>
#include <type_traits>

#include "half.h"
#include "threads.h"

// Selects the software f16 conversions of prelude.cuh instead of its inline PTX.
#define HEADROOM_HOST_EMULATION 1

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n) __attribute__((aligned(n)))
// The blocks of a grid run one after another and each launch holds the driver's lock, so one
// static copy per declaration is the storage its block shares.
#define __shared__ static

inline void __syncthreads() { emu::sync_block(); }
// What `extern __shared__` names on a GPU: the launch's dynamic shared memory.
inline unsigned char* host_dynamic_shared() { return emu::dynamic_shared(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::sync_warp(mask); }

template <typename T>
inline T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
    static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable<T>::value,
                  "a shuffle moves at most 64 bits of plain data");
    uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof value);
    bits = emu::shuffle_xor(mask, bits, lane_mask, width);
    std::memcpy(&value, &bits, sizeof value);
    return value;
}

inline unsigned int __float_as_uint(float f) { return host_float_bits(f); }
inline float __uint_as_float(unsigned int u) { return host_bits_float(u); }
inline int __float_as_int(float f) { return int(host_float_bits(f)); }
inline float __int_as_float(int i) { return host_bits_float(unsigned(i)); }

inline long long __double_as_longlong(double d) {
    long long bits;
    std::memcpy(&bits, &d, sizeof bits);
    return bits;
}

inline double __longlong_as_double(long long bits) {
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return d;
}

// Device intrinsics with no host twin, at full precision (the GPU's are approximations within
// a few ulp, which no test may depend on).
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
// Rounded to nearest, never contracted (the host build does not fuse multiply-adds).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline int __clz(unsigned int x) { return x == 0 ? 32 : __builtin_clz(x); }
// sin(pi x) and cos(pi x) from the radian functions in double: the kernels pass |x| <= 1, where
// pi x is within an ulp of double.
inline void sincospi(double x, double* s, double* c) {
    *s = std::sin(M_PI * x);
    *c = std::cos(M_PI * x);
}
inline void sincospif(float x, float* s, float* c) {
    double sd, cd;
    sincospi(x, &sd, &cd);
    *s = float(sd);
    *c = float(cd);
}

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: acc += A B over one warp, computed in
// software. Each lane holds its fragments as the PTX ISA lays them out (lane = 4 g + t):
//   A (16 x 16): (g, 2t..2t+1), (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..), a pair a u32;
//   B (16 x 8): (k = 2t..2t+1, n = g), (k = 2t + 8.., n = g);
//   C (16 x 8): (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
// The lanes publish their fragments, wait for the warp, and each computes its own part of C
// from all of them in f32; a second wait keeps the next call from overwriting what another
// lane still reads.
namespace emu_mma {
struct Fragments {
    uint32_t a[4];
    uint32_t b[2];
};
// One slot per thread of a block: blocks run one at a time, and one slot per lane suffices.
inline Fragments* slots() {
    static Fragments lanes[1024];
    return lanes;
}
inline float operand(uint32_t pair, int half, bool bf16) {
    const uint16_t bits = uint16_t(half ? pair >> 16 : pair & 0xffffu);
    return bf16 ? host_bf16_to_f32(bits) : host_f16_to_f32(bits);
}
}  // namespace emu_mma

inline void host_mma_16816(float (&acc)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], bool bf16) {
    const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned lane = linear % 32, first = linear - lane;
    emu_mma::Fragments* warp = emu_mma::slots() + first;
    std::memcpy(warp[lane].a, a, sizeof a);
    std::memcpy(warp[lane].b, b, sizeof b);
    emu::sync_warp(0xffffffffu);
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; ++l) {
        const int g = l / 4, t = l % 4;
        for (int half = 0; half < 2; ++half) {
            const int c = 2 * t + half;
            A[g][c] = emu_mma::operand(warp[l].a[0], half, bf16);
            A[g + 8][c] = emu_mma::operand(warp[l].a[1], half, bf16);
            A[g][c + 8] = emu_mma::operand(warp[l].a[2], half, bf16);
            A[g + 8][c + 8] = emu_mma::operand(warp[l].a[3], half, bf16);
            B[c][g] = emu_mma::operand(warp[l].b[0], half, bf16);
            B[c + 8][g] = emu_mma::operand(warp[l].b[1], half, bf16);
        }
    }
    emu::sync_warp(0xffffffffu);
    const int g = lane / 4, t = lane % 4;
    for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
        float sum = acc[e];
        for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
        acc[e] = sum;
    }
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane l gives the address of row l % 8 of
// matrix l / 8 and receives in r[j] its pair of matrix j (row l / 4, columns 2 (l % 4)..; or,
// transposed, column l / 4, rows 2 (l % 4)..). The lanes publish their addresses as they do
// their fragments for host_mma_16816.
inline void host_ldmatrix_x4(uint32_t (&r)[4], const void* row, bool trans) {
    static const void* rows[1024];
    const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned lane = linear % 32, first = linear - lane;
    const void** warp = rows + first;
    warp[lane] = row;
    emu::sync_warp(0xffffffffu);
    const unsigned g = lane / 4, t = lane % 4;
    for (int j = 0; j < 4; ++j) {
        uint16_t pair[2];
        for (int half = 0; half < 2; ++half) {
            const uint16_t* from = trans ? static_cast<const uint16_t*>(warp[8 * j + 2 * t + half]) + g
                                         : static_cast<const uint16_t*>(warp[8 * j + g]) + 2 * t + half;
            std::memcpy(&pair[half], from, sizeof pair[half]);
        }
        r[j] = uint32_t(pair[0]) | uint32_t(pair[1]) << 16;
    }
    emu::sync_warp(0xffffffffu);
}
