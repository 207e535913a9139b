// The cross-entropy of logits against class targets, forward and backward. The host has checked
// every target against its range. A row belongs to a group of GROUP threads (a warp, or a block
// of 256, see ROWS_OF), which finds its most and sum of exponentials in one pass.

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

#define CROSS_ENTROPY_BACKWARD(lname, L, G, name, T) \
    extern "C" __global__ void cross_entropy_backward_##G##_##name##_##lname( \
        const L* dloss, double counted, const T* logits, const u32* targets, u32 ignore, int has_ignore, T* dx, \
        u64 rows, u64 classes) { \
        cross_entropy_backward_rows<G, T, L>(dloss, counted, logits, targets, ignore, has_ignore, dx, rows, classes); \
    }

#define LOSS_GROUP(G, name, T) \
    extern "C" __global__ void cross_entropy_##G##_##name(const T* logits, const u32* targets, u32 ignore, \
                                                          int has_ignore, double* losses, u64 rows, u64 classes) { \
        cross_entropy_rows<G, T>(logits, targets, ignore, has_ignore, losses, rows, classes); \
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
