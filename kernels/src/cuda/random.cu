// Dropout from a counter-based generator: the same (seed, index) draws the same number as on the
// host, so every backend drops the same elements.

__device__ __forceinline__ double uniform(u64 seed, u64 index) {
    u64 z = seed ^ (index * 0x9E3779B97F4A7C15ull);
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}

#define DROPOUT(name, T) \
    extern "C" __global__ void dropout_##name(const T* x, T* out, u64 n, double p, u64 seed) { \
        typedef Io<T> io; \
        const typename io::C scale = (typename io::C)(1.0 / (1.0 - p)); \
        for (u64 i = thread_index(); i < n; i += grid_stride()) \
            out[i] = io::store(uniform(seed, i) >= p ? io::load(x[i]) * scale : (typename io::C)0); \
    }
FOR_FLOATS(DROPOUT)
