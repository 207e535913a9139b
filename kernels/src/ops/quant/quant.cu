// Dequantization of block-wise quantized weights: each value from its code and its block's scale,
// in f32 with the host's operations (no contraction into a fused multiply-add), rounded once to the
// output's type. One thread per value (per pair of values for NF4), grid-stride.

// NF4's 16 levels (kernels/src/quant/nf4.rs), ascending.
__device__ const float NF4_LEVELS[16] = {
    -1.0f, -0.6961928f, -0.52507305f, -0.3949175f, -0.28444138f, -0.18477343f, -0.091050036f, 0.0f,
    0.0795803f, 0.1609302f, 0.2461123f, 0.33791524f, 0.44070983f, 0.562617f, 0.72295684f, 1.0f};

// NF4: byte i holds values 2i (high nibble) and 2i + 1 (low nibble).
template <typename T>
__device__ void nf4_values(const u8* codes, const float* scales, T* out, u64 len, u64 block) {
    const u64 pairs = (len + 1) / 2;
    for (u64 p = thread_index(); p < pairs; p += grid_stride()) {
        const u8 byte = codes[p];
        const u64 i = 2 * p;
        out[i] = Io<T>::store((typename Io<T>::C)__fmul_rn(NF4_LEVELS[byte >> 4], scales[i / block]));
        if (i + 1 < len)
            out[i + 1] = Io<T>::store(
                (typename Io<T>::C)__fmul_rn(NF4_LEVELS[byte & 0x0f], scales[(i + 1) / block]));
    }
}

// Int8: a signed code times its block's scale over 127.
template <typename T>
__device__ void int8_values(const u8* codes, const float* scales, T* out, u64 len, u64 block) {
    for (u64 i = thread_index(); i < len; i += grid_stride()) {
        const float step = __fdiv_rn(scales[i / block], 127.0f);
        out[i] = Io<T>::store((typename Io<T>::C)__fmul_rn((float)(signed char)codes[i], step));
    }
}

#define DEQUANTIZE(name, T) \
    extern "C" __global__ void dequantize_nf4_##name(const u8* codes, const float* scales, T* out, u64 len, \
                                                      u64 block) { \
        nf4_values<T>(codes, scales, out, len, block); \
    } \
    extern "C" __global__ void dequantize_int8_##name(const u8* codes, const float* scales, T* out, u64 len, \
                                                       u64 block) { \
        int8_values<T>(codes, scales, out, len, block); \
    }
DEQUANTIZE(f32, float)
DEQUANTIZE(f64, double)
DEQUANTIZE(f16, f16)
DEQUANTIZE(bf16, bf16)

// The 8-bit dynamic map: a code's entry of `map` times its block's scale (0 for a scale of 0),
// plus `offset`; f32 out (double quantization's NF4 scales).
extern "C" __global__ void dequantize_dynamic_f32(const u8* codes, const float* scales, const float* map,
                                                  float* out, u64 len, u64 block, double offset) {
    const float shift = (float)offset;
    for (u64 i = thread_index(); i < len; i += grid_stride()) {
        const float scale = scales[i / block];
        const float value = scale == 0.0f ? 0.0f : __fmul_rn(map[codes[i]], scale);
        out[i] = __fadd_rn(value, shift);
    }
}

// Rows of a quantized [rows, width] table by id (a token embedding), each value as the kernels above
// give it; an NF4 block's scale from its dynamic-map code as dequantize_dynamic_f32 gives it. The
// host has checked every id against its range.
template <typename T>
__device__ void gather_nf4_rows(const u8* codes, const u8* scale_codes, const float* absmax, const float* map,
                                const u32* ids, T* out, u64 count, u64 width, u64 block, u64 scale_block,
                                float offset) {
    for (u64 i = thread_index(); i < count * width; i += grid_stride()) {
        const u64 v = (u64)ids[i / width] * width + i % width, b = v / block;
        const float most = absmax[b / scale_block];
        const float scale = most == 0.0f ? offset : __fadd_rn(__fmul_rn(map[scale_codes[b]], most), offset);
        const u8 byte = codes[v / 2];
        const float level = NF4_LEVELS[v % 2 == 0 ? byte >> 4 : byte & 0x0f];
        out[i] = Io<T>::store((typename Io<T>::C)__fmul_rn(level, scale));
    }
}

template <typename T>
__device__ void gather_int8_rows(const u8* codes, const float* scales, const u32* ids, T* out, u64 count, u64 width,
                                 u64 block) {
    for (u64 i = thread_index(); i < count * width; i += grid_stride()) {
        const u64 v = (u64)ids[i / width] * width + i % width;
        const float step = __fdiv_rn(scales[v / block], 127.0f);
        out[i] = Io<T>::store((typename Io<T>::C)__fmul_rn((float)(signed char)codes[v], step));
    }
}

#define GATHER(name, T) \
    extern "C" __global__ void gather_nf4_##name(const u8* codes, const u8* scale_codes, const float* absmax, \
                                                 const float* map, const u32* ids, T* out, u64 count, u64 width, \
                                                 u64 block, u64 scale_block, double offset) { \
        gather_nf4_rows<T>(codes, scale_codes, absmax, map, ids, out, count, width, block, scale_block, \
                           (float)offset); \
    } \
    extern "C" __global__ void gather_int8_##name(const u8* codes, const float* scales, const u32* ids, T* out, \
                                                  u64 count, u64 width, u64 block) { \
        gather_int8_rows<T>(codes, scales, ids, out, count, width, block); \
    }
GATHER(f32, float)
GATHER(f64, double)
GATHER(f16, f16)
GATHER(bf16, bf16)
