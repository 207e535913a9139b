// Fills and conversions between every pair of dtypes (copies go through the copy engine).

// Every storage type to and from f64, as the CPU backend converts: floats round to nearest,
// integers round to nearest and saturate (NaN becomes 0).
__device__ __forceinline__ double to_f64(float v) { return v; }
__device__ __forceinline__ double to_f64(double v) { return v; }
__device__ __forceinline__ double to_f64(f16 v) { return f16_to_f32(v.bits); }
__device__ __forceinline__ double to_f64(bf16 v) { return bf16_to_f32(v.bits); }
__device__ __forceinline__ double to_f64(u32 v) { return v; }
__device__ __forceinline__ double to_f64(int v) { return v; }
__device__ __forceinline__ double to_f64(u8 v) { return v; }

template <typename T> __device__ __forceinline__ T from_f64(double v);
template <> __device__ __forceinline__ float from_f64<float>(double v) { return (float)v; }
template <> __device__ __forceinline__ double from_f64<double>(double v) { return v; }
// Through f32 as the host does (f64 -> f32 -> f16 can round twice, as there).
template <> __device__ __forceinline__ f16 from_f64<f16>(double v) { return Io<f16>::store((float)v); }
template <> __device__ __forceinline__ bf16 from_f64<bf16>(double v) { return Io<bf16>::store((float)v); }
template <> __device__ __forceinline__ u32 from_f64<u32>(double v) {
    v = round(v);
    return v != v || v <= 0.0 ? 0u : v >= 4294967295.0 ? 4294967295u : (u32)v;
}
template <> __device__ __forceinline__ u8 from_f64<u8>(double v) {
    v = round(v);
    return v != v || v <= 0.0 ? (u8)0 : v >= 255.0 ? (u8)255 : (u8)v;
}
template <> __device__ __forceinline__ int from_f64<int>(double v) {
    v = round(v);
    return v != v ? 0 : v <= -2147483648.0 ? (-2147483647 - 1) : v >= 2147483647.0 ? 2147483647 : (int)v;
}

#define FOR_ALL(M, ...) \
    M(f32, float, __VA_ARGS__) M(f64, double, __VA_ARGS__) M(f16, f16, __VA_ARGS__) \
    M(bf16, bf16, __VA_ARGS__) M(u32, u32, __VA_ARGS__) M(i32, int, __VA_ARGS__) \
    M(u8, u8, __VA_ARGS__)

#define FILL(name, T, unused) \
    extern "C" __global__ void fill_##name(T* out, u64 n, double value) { \
        const T v = from_f64<T>(value); \
        for (u64 i = thread_index(); i < n; i += grid_stride()) out[i] = v; \
    }
FOR_ALL(FILL, 0)

#define CAST_TO(dname, D, sname, S) \
    extern "C" __global__ void cast_##sname##_##dname(const S* src, D* dst, u64 n) { \
        for (u64 i = thread_index(); i < n; i += grid_stride()) dst[i] = from_f64<D>(to_f64(src[i])); \
    }
// The same list again: a macro cannot expand itself, so the inner loop over targets needs its own.
#define FOR_ALL_TARGETS(M, ...) \
    M(f32, float, __VA_ARGS__) M(f64, double, __VA_ARGS__) M(f16, f16, __VA_ARGS__) \
    M(bf16, bf16, __VA_ARGS__) M(u32, u32, __VA_ARGS__) M(i32, int, __VA_ARGS__) \
    M(u8, u8, __VA_ARGS__)
#define CAST_FROM(sname, S, unused) FOR_ALL_TARGETS(CAST_TO, sname, S)
FOR_ALL(CAST_FROM, 0)
