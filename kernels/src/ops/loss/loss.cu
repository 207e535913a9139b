// The cross-entropy of logits against class targets, forward and backward. The host has checked
// every target against its range. A row belongs to a group of GROUP threads (a warp, or a block
// of 256, see ROWS_OF), which finds its most and sum of exponentials in one pass.
//
// Rows lie `width` elements apart and hold `classes` scores (a head whose products were padded
// to a multiple of eight columns leaves the rest of each row as padding). Where `width` is a
// whole number of 16-byte packs every row starts on 16 bytes, and the kernels move whole packs.

// The most of a row's first `classes` logits and the sum of their exponentials relative to it,
// on every thread of the group: 16 bytes at a time where `packed`, the rest one at a time.
template <int GROUP, typename T>
__device__ __forceinline__ void row_max_and_sum(const T* row, u64 classes, int packed, u64 lane,
                                                typename Io<T>::C* scratch, typename Io<T>::C& max,
                                                typename Io<T>::C& sum) {
    typedef Io<T> io;
    typedef typename io::C C;
    const int N = 16 / sizeof(T);
    max = neg_infinity<C>();
    sum = 0;
    u64 rest = 0;
    if (packed) {
        const u64 packs = classes / N;
        const Pack<T>* p = (const Pack<T>*)row;
        for (u64 k = lane; k < packs; k += GROUP) {
            const Pack<T> pack = p[k];
            C v[16 / sizeof(T)];
            C most = neg_infinity<C>();
#pragma unroll
            for (int i = 0; i < N; ++i) {
                v[i] = io::load(pack.v[i]);
                most = m_max(most, v[i]);
            }
            C part = 0;
            if (most != neg_infinity<C>()) {
#pragma unroll
                for (int i = 0; i < N; ++i) part += m_exp(v[i] - most);  // NaN stays NaN
            }
            merge_exp_sums(max, sum, most, part);
        }
        rest = packs * N;
    }
    for (u64 j = rest + lane; j < classes; j += GROUP) fold_exp(io::load(row[j]), max, sum);
    merge_over_group<GROUP>(scratch, max, sum);
}

// losses[r] = the row's loss (0 for an ignored target).
template <int GROUP, typename T>
__device__ void cross_entropy_rows(const T* logits, const u32* targets, u32 ignore, int has_ignore,
                                   double* losses, u64 rows, u64 classes, u64 width) {
    typedef Io<T> io;
    typedef typename io::C C;
    SCRATCH(C)
    const int packed = width % (16 / sizeof(T)) == 0;
    ROWS_OF(GROUP) {
        const u32 t = targets[r];
        if (has_ignore && t == ignore) {
            if (lane == 0) losses[r] = 0.0;
            continue;
        }
        if (t >= classes) {  // unchecked by the host: no read outside the row
            if (lane == 0) losses[r] = 0.0 / 0.0;
            continue;
        }
        const T* row = logits + r * width;
        C max, sum;
        row_max_and_sum<GROUP, T>(row, classes, packed, lane, scratch, max, sum);
        if (lane == 0) losses[r] = (double)((max - io::load(row[t])) + m_log(sum));
    }
}

// A gradient element: (softmax - onehot) * scale for a class, 0 for padding.
template <typename C>
__device__ __forceinline__ C cross_entropy_gradient(C x, u64 j, u32 t, u64 classes, C max, C sum, C scale) {
    if (j >= classes) return (C)0;
    C p = m_exp(x - max) / sum;
    if (j == t) p -= (C)1;
    return p * scale;
}

template <int GROUP, typename T, typename L>
__device__ void cross_entropy_backward_rows(const L* dloss, double counted, const T* logits, const u32* targets,
                                            u32 ignore, int has_ignore, T* dx, u64 rows, u64 classes, u64 width) {
    typedef Io<T> io;
    typedef typename io::C C;
    SCRATCH(C)
    const int N = 16 / sizeof(T);
    const int packed = width % N == 0;
    const C scale = (C)((double)Io<L>::load(dloss[0]) / counted);
    ROWS_OF(GROUP) {
        const u32 t = targets[r];
        const T* row = logits + r * width;
        T* out = dx + r * width;
        const bool ignored = has_ignore && t == ignore;
        C max = 0, sum = 1;
        if (!ignored) row_max_and_sum<GROUP, T>(row, classes, packed, lane, scratch, max, sum);
        if (packed) {
            const Pack<T>* in = (const Pack<T>*)row;
            Pack<T>* o = (Pack<T>*)out;
            for (u64 k = lane; k < width / N; k += GROUP) {
                const Pack<T> pack = in[k];
                Pack<T> grad;
#pragma unroll
                for (int i = 0; i < N; ++i) {
                    const u64 j = k * N + i;
                    grad.v[i] = io::store(ignored ? (C)0
                                                  : cross_entropy_gradient(io::load(pack.v[i]), j, t, classes, max, sum, scale));
                }
                o[k] = grad;
            }
        } else {
            for (u64 j = lane; j < width; j += GROUP) {
                out[j] = io::store(ignored ? (C)0 : cross_entropy_gradient(io::load(row[j]), j, t, classes, max, sum, scale));
            }
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

// A cross-entropy whose vocabulary is sliced over ranks, these logits one slice's (rows of
// `classes`, no padding): out[r] = the row's log-sum-exp over the slice, out[rows + r] = its
// target's logit where the target lies in the slice (t < classes), 0 where it lies in another.
template <int GROUP, typename T>
__device__ void sliced_parts_rows(const T* logits, const u32* targets, typename Io<T>::C* out, u64 rows,
                                  u64 classes) {
    typedef Io<T> io;
    typedef typename io::C C;
    SCRATCH(C)
    const int packed = classes % (16 / sizeof(T)) == 0;
    ROWS_OF(GROUP) {
        const T* row = logits + r * classes;
        C max, sum;
        row_max_and_sum<GROUP, T>(row, classes, packed, lane, scratch, max, sum);
        if (lane == 0) {
            const u32 t = targets[r];
            out[r] = max + m_log(sum);
            out[rows + r] = t < classes ? io::load(row[t]) : (C)0;
        }
    }
}

// The slice's gradient against the whole vocabulary's log-sum-exp `lse`, each row times its
// `scale`: (exp(x - lse) - onehot) * scale, no onehot for a target in another slice.
template <int GROUP, typename T>
__device__ void sliced_backward_rows(const typename Io<T>::C* lse, const typename Io<T>::C* scale, const T* logits,
                                     const u32* targets, T* dx, u64 rows, u64 classes) {
    typedef Io<T> io;
    typedef typename io::C C;
    ROWS_OF(GROUP) {
        const u32 t = targets[r];
        const T* row = logits + r * classes;
        T* out = dx + r * classes;
        const C most = lse[r], s = scale[r];
        for (u64 j = lane; j < classes; j += GROUP) {
            out[j] = io::store(cross_entropy_gradient(io::load(row[j]), j, t, classes, most, (C)1, s));
        }
    }
}

#define CROSS_ENTROPY_BACKWARD(lname, L, G, name, T) \
    extern "C" __global__ void cross_entropy_backward_##G##_##name##_##lname( \
        const L* dloss, double counted, const T* logits, const u32* targets, u32 ignore, int has_ignore, T* dx, \
        u64 rows, u64 classes, u64 width) { \
        cross_entropy_backward_rows<G, T, L>(dloss, counted, logits, targets, ignore, has_ignore, dx, rows, classes, \
                                             width); \
    }

#define LOSS_GROUP(G, name, T) \
    extern "C" __global__ void cross_entropy_##G##_##name(const T* logits, const u32* targets, u32 ignore, \
                                                          int has_ignore, double* losses, u64 rows, u64 classes, \
                                                          u64 width) { \
        cross_entropy_rows<G, T>(logits, targets, ignore, has_ignore, losses, rows, classes, width); \
    } \
    extern "C" __global__ void sliced_cross_entropy_parts_##G##_##name(const T* logits, const u32* targets, \
                                                                       Io<T>::C* out, u64 rows, u64 classes) { \
        sliced_parts_rows<G, T>(logits, targets, out, rows, classes); \
    } \
    extern "C" __global__ void sliced_cross_entropy_backward_##G##_##name(const Io<T>::C* lse, const Io<T>::C* scale, \
                                                                          const T* logits, const u32* targets, T* dx, \
                                                                          u64 rows, u64 classes) { \
        sliced_backward_rows<G, T>(lse, scale, logits, targets, dx, rows, classes); \
    } \
    CROSS_ENTROPY_BACKWARD(f32, float, G, name, T) CROSS_ENTROPY_BACKWARD(f64, double, G, name, T) \
    CROSS_ENTROPY_BACKWARD(f16, f16, G, name, T) CROSS_ENTROPY_BACKWARD(bf16, bf16, G, name, T)

#define LOSS(name, T) \
    LOSS_GROUP(32, name, T) \
    LOSS_GROUP(256, name, T) \
    extern "C" __global__ void mean_loss_##name(const double* losses, u64 rows, double counted, T* out, u64 out_len) { \
        mean_loss<T>(losses, rows, counted, out, out_len); \
    }
FOR_FLOATS(LOSS)
