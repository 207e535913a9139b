// Dropout from the prelude's counter-based generator (`uniform`): the same (seed, index) draws the
// same number as on the host, so every backend drops the same elements.

#define DROPOUT(name, T) \
    extern "C" __global__ void dropout_##name(const T* x, T* out, u64 n, double p, u64 seed) { \
        typedef Io<T> io; \
        const typename io::C scale = (typename io::C)(1.0 / (1.0 - p)); \
        for (u64 i = thread_index(); i < n; i += grid_stride()) \
            out[i] = io::store(uniform(seed, i) >= p ? io::load(x[i]) * scale : (typename io::C)0); \
    }
FOR_FLOATS(DROPOUT)
