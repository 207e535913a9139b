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
