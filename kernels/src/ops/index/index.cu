// Ops that index by integer ids: embedding lookups and their gradient; and the causal mask.
// The host has checked every id against its range.

template <typename T>
__device__ void embedding_gather(const T* table, const u32* ids, T* out, u64 count, u64 dim) {
    for (u64 i = thread_index(); i < count * dim; i += grid_stride()) out[i] = table[(u64)ids[i / dim] * dim + i % dim];
}

// The embedding's gradient (grouping.rs): rows[2v] .. rows[2v + 2] are the positions of id v
// and rows[2v + 1] .. rows[2v + 3] its pieces; piece k sums positions pieces[2k] .. pieces[2k + 1].
// partials[k][j] = column j of piece k's rows of dy, summed in order.
template <typename T>
__device__ void embedding_pieces(const u32* positions, const u32* pieces, const T* dy, typename Io<T>::C* partials,
                                 u64 count, u64 dim) {
    typedef Io<T> io;
    typedef typename io::C C;
    for (u64 i = thread_index(); i < count * dim; i += grid_stride()) {
        const u64 k = i / dim, j = i % dim;
        C acc = 0;
        for (u32 p = pieces[2 * k]; p < pieces[2 * k + 1]; ++p) acc += io::load(dy[(u64)positions[p] * dim + j]);
        partials[i] = acc;
    }
}

// out[v][j] = column j of id v's rows of dy summed in order: directly for a short run, as the sum
// of its pieces' partials in order for a long one.
template <typename T>
__device__ void embedding_rows(const u32* rows, const u32* positions, const typename Io<T>::C* partials, const T* dy,
                               T* out, u64 vocab, u64 dim) {
    typedef Io<T> io;
    typedef typename io::C C;
    for (u64 i = thread_index(); i < vocab * dim; i += grid_stride()) {
        const u64 v = i / dim, j = i % dim;
        const u32 first = rows[2 * v + 1], last = rows[2 * v + 3];
        C acc = 0;
        if (first == last) {
            for (u32 p = rows[2 * v]; p < rows[2 * v + 2]; ++p) acc += io::load(dy[(u64)positions[p] * dim + j]);
        } else {
            for (u32 k = first; k < last; ++k) acc += partials[(u64)k * dim + j];
        }
        out[i] = io::store(acc);
    }
}

template <typename T>
__device__ void causal_mask(const T* x, T* out, u64 n, u64 size, double fill) {
    const T filled = Io<T>::store((typename Io<T>::C)fill);
    for (u64 i = thread_index(); i < n; i += grid_stride()) {
        const u64 column = i % size, row = (i / size) % size;
        out[i] = column <= row ? x[i] : filled;
    }
}

#define INDEX(name, T) \
    extern "C" __global__ void embedding_##name(const T* table, const u32* ids, T* out, u64 count, u64 dim) { \
        embedding_gather<T>(table, ids, out, count, dim); \
    } \
    extern "C" __global__ void embedding_pieces_##name(const u32* positions, const u32* pieces, const T* dy, \
                                                       Io<T>::C* partials, u64 count, u64 dim) { \
        embedding_pieces<T>(positions, pieces, dy, partials, count, dim); \
    } \
    extern "C" __global__ void embedding_backward_##name(const u32* rows, const u32* positions, \
                                                         const Io<T>::C* partials, const T* dy, T* out, u64 vocab, \
                                                         u64 dim) { \
        embedding_rows<T>(rows, positions, partials, dy, out, vocab, dim); \
    } \
    extern "C" __global__ void causal_mask_##name(const T* x, T* out, u64 n, u64 size, double fill) { \
        causal_mask<T>(x, out, n, size, fill); \
    }
FOR_FLOATS(INDEX)
