// Ops that index by integer ids: embedding lookups and their gradient, cross-entropy against
// class targets, and the causal mask. The host has checked every id against its range.

// losses[r] = the row's loss (0 for an ignored target).
template <int GROUP, typename T>
__device__ void cross_entropy_rows(const T* logits, const u32* targets, u32 ignore, int has_ignore,
                                   double* losses, u64 rows, u64 classes) {
    typedef Io<T> io;
    typedef typename io::C C;
    SCRATCH(C)
    ROWS_OF(GROUP) {
        const u32 t = targets[r];
        if (has_ignore && t == ignore) {
            if (lane == 0) losses[r] = 0.0;
            continue;
        }
        const T* row = logits + r * classes;
        C max, sum;
        max_and_sum_exp<GROUP, T>(row, classes, (C)1, lane, scratch, max, sum);
        if (lane == 0) losses[r] = (double)((max - io::load(row[t])) + m_log(sum));
    }
}

template <int GROUP, typename T, typename L>
__device__ void cross_entropy_backward_rows(const L* dloss, double counted, const T* logits, const u32* targets,
                                            u32 ignore, int has_ignore, T* dx, u64 rows, u64 classes) {
    typedef Io<T> io;
    typedef typename io::C C;
    SCRATCH(C)
    const C scale = (C)((double)Io<L>::load(dloss[0]) / counted);
    ROWS_OF(GROUP) {
        const u32 t = targets[r];
        const T* row = logits + r * classes;
        T* out = dx + r * classes;
        if (has_ignore && t == ignore) {
            for (u64 j = lane; j < classes; j += GROUP) out[j] = io::store((C)0);
            continue;
        }
        C max, sum;
        max_and_sum_exp<GROUP, T>(row, classes, (C)1, lane, scratch, max, sum);
        for (u64 j = lane; j < classes; j += GROUP) {
            C p = m_exp(io::load(row[j]) - max) / sum;
            if (j == t) p -= (C)1;
            out[j] = io::store(p * scale);
        }
    }
}

// out[..] = sum(losses) / counted (0 when nothing counts), summed by one block in a fixed order.
template <typename O>
__device__ void mean_loss(const double* losses, u64 rows, double counted, O* out, u64 out_len) {
    SCRATCH(double)
    double sum = 0;
    for (u64 r = threadIdx.x; r < rows; r += blockDim.x) sum += losses[r];
    sum = group_reduce<256>(sum, SumOp(), scratch);
    const double loss = counted == 0.0 ? 0.0 : sum / counted;
    for (u64 i = threadIdx.x; i < out_len; i += blockDim.x) out[i] = Io<O>::store((typename Io<O>::C)loss);
}

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

#define CROSS_ENTROPY_BACKWARD(lname, L, G, name, T) \
    extern "C" __global__ void cross_entropy_backward_##G##_##name##_##lname( \
        const L* dloss, double counted, const T* logits, const u32* targets, u32 ignore, int has_ignore, T* dx, \
        u64 rows, u64 classes) { \
        cross_entropy_backward_rows<G, T, L>(dloss, counted, logits, targets, ignore, has_ignore, dx, rows, classes); \
    }

#define INDEX_GROUP(G, name, T) \
    extern "C" __global__ void cross_entropy_##G##_##name(const T* logits, const u32* targets, u32 ignore, \
                                                          int has_ignore, double* losses, u64 rows, u64 classes) { \
        cross_entropy_rows<G, T>(logits, targets, ignore, has_ignore, losses, rows, classes); \
    } \
    CROSS_ENTROPY_BACKWARD(f32, float, G, name, T) CROSS_ENTROPY_BACKWARD(f64, double, G, name, T) \
    CROSS_ENTROPY_BACKWARD(f16, f16, G, name, T) CROSS_ENTROPY_BACKWARD(bf16, bf16, G, name, T)

#define INDEX(name, T) \
    INDEX_GROUP(32, name, T) \
    INDEX_GROUP(256, name, T) \
    extern "C" __global__ void mean_loss_##name(const double* losses, u64 rows, double counted, T* out, u64 out_len) { \
        mean_loss<T>(losses, rows, counted, out, out_len); \
    } \
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
