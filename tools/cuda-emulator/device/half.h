// IEEE binary16 and bfloat16 conversions in software, rounding to nearest even as the GPU's
// cvt.rn instructions do. Shared by the kernels' host build and the GEMMs of libcublas.
#pragma once

#include <cstdint>
#include <cstring>

inline uint32_t host_float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

inline float host_bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

// Exact: every binary16 value, subnormals included, is a float.
inline float host_f16_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu;
    const uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f) return host_bits_float(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
        const float magnitude = float(mantissa) * 0x1p-24f;  // subnormal (or zero)
        return sign ? -magnitude : magnitude;
    }
    return host_bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// Round to nearest even; overflow goes to infinity and NaN to the canonical NaN 0x7fff, as
// cvt.rn.f16.f32 does.
inline uint16_t host_f32_to_f16(float f) {
    const uint32_t bits = host_float_bits(f);
    const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
    uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return 0x7fff;
    // 65520 (0x477ff000) is halfway between 65504, the largest half, and 65536: ties go to the
    // even neighbour, which is infinity.
    if (magnitude >= 0x477ff000u) return sign | 0x7c00u;
    if (magnitude < 0x38800000u) {
        // Below the smallest normal half (2^-14): adding 0.5, whose ulp is 2^-24, the half
        // subnormal step, makes the FPU round to nearest even for us.
        const float sum = host_bits_float(magnitude) + 0.5f;
        return sign | uint16_t(host_float_bits(sum) - host_float_bits(0.5f));
    }
    const uint32_t odd = (magnitude >> 13) & 1u;
    magnitude += 0xc8000fffu + odd;  // rebias the exponent (127 - 15) and round
    return sign | uint16_t(magnitude >> 13);
}

inline float host_bf16_to_f32(uint16_t b) { return host_bits_float(uint32_t(b) << 16); }

// Round to nearest even; a NaN stays a quiet NaN.
inline uint16_t host_f32_to_bf16(float f) {
    uint32_t u = host_float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return uint16_t(u >> 16);
}
