// Softmax, log-softmax and layer normalization over the last axis, forward and backward.
//
// A row belongs to a group of GROUP threads: a warp (GROUP 32, eight rows to a block of 256) for
// rows up to 1024 elements, the whole block (GROUP 256) for longer ones. Row sums reduce in a
// fixed order; layer normalization's statistics and every backward sum accumulate in f64, and
// the parameter gradients sum per-slice partial results in order (no atomics).

// Elements of a row each thread of its group keeps in registers: softmax reads a row of up to
// GROUP * ROW_CACHE elements once (1024 for a warp, 8192 for a block), and longer ones three
// times (for the most, for the sum, for the output).
#define ROW_CACHE 32

// One row held in registers: `v[k]` is `scale x[lane + k GROUP]`, minus infinity past `seen`.
// Elements are addressed from this thread's first with constant offsets, so that the addresses
// take no registers of their own.
template <int GROUP, typename T>
__device__ __forceinline__ void softmax_row_cached(int log, typename Io<T>::C s, const T* xr, T* yr, u64 seen,
                                                   u64 len, u64 lane, typename Io<T>::C* scratch) {
    typedef Io<T> io;
    typedef typename io::C C;
    const T* x = xr + lane;
    T* y = yr + lane;
    // Elements of this thread's stride before `seen`, and before the row's end.
    const u64 mine = seen > lane ? seen - lane : 0, all = len > lane ? len - lane : 0;
    C v[ROW_CACHE];
    C max = neg_infinity<C>();
#pragma unroll
    for (int k = 0; k < ROW_CACHE; ++k) {
        v[k] = k * GROUP < mine ? s * io::load(x[k * GROUP]) : neg_infinity<C>();
        max = m_max(max, v[k]);
    }
    max = group_reduce<GROUP>(max, MaxOp(), scratch);
    // Softmax keeps each exponential for the output.
    C sum = 0;
#pragma unroll
    for (int k = 0; k < ROW_CACHE; ++k) {
        if (k * GROUP >= mine) continue;
        const C e = m_exp(v[k] - max);
        sum += e;
        if (!log) v[k] = e;
    }
    sum = group_reduce<GROUP>(sum, SumOp(), scratch);
    const C log_sum = log ? m_log(sum) : (C)0, inv = (C)1 / sum;
#pragma unroll
    for (int k = 0; k < ROW_CACHE; ++k) {
        if (k * GROUP < mine) y[k * GROUP] = io::store(log ? v[k] - max - log_sum : v[k] * inv);
        else if (k * GROUP < all) y[k * GROUP] = io::store(log ? neg_infinity<C>() : (C)0);
    }
}

template <int GROUP, typename T>
__device__ void softmax_rows(int log, double scale, int causal, const T* x, T* y, u64 rows, u64 len) {
    typedef Io<T> io;
    typedef typename io::C C;
    SCRATCH(C)
    const C s = (C)scale;
    ROWS_OF(GROUP) {
        const T* xr = x + r * len;
        T* yr = y + r * len;
        const u64 seen = causal ? r % len + 1 : len;
        if (len <= (u64)GROUP * ROW_CACHE) {
            softmax_row_cached<GROUP, T>(log, s, xr, yr, seen, len, lane, scratch);
            continue;
        }
        C max, sum;
        max_and_sum_exp<GROUP, T>(xr, seen, s, lane, scratch, max, sum);
        if (log) {
            const C log_sum = m_log(sum);
            for (u64 j = lane; j < seen; j += GROUP) yr[j] = io::store(s * io::load(xr[j]) - max - log_sum);
            for (u64 j = seen + lane; j < len; j += GROUP) yr[j] = io::store(neg_infinity<C>());
        } else {
            const C inv = (C)1 / sum;
            for (u64 j = lane; j < seen; j += GROUP) yr[j] = io::store(m_exp(s * io::load(xr[j]) - max) * inv);
            for (u64 j = seen + lane; j < len; j += GROUP) yr[j] = io::store((C)0);
        }
    }
}

template <int GROUP, typename T>
__device__ void softmax_backward_rows(int log, double scale, int causal, const T* y, const T* dy, T* dx,
                                      u64 rows, u64 len) {
    typedef Io<T> io;
    typedef typename io::C C;
    SCRATCH(double)
    const C s = (C)scale;
    ROWS_OF(GROUP) {
        const T* yr = y + r * len;
        const T* dyr = dy + r * len;
        T* dxr = dx + r * len;
        const u64 seen = causal ? r % len + 1 : len;
        double acc = 0;
        for (u64 j = lane; j < seen; j += GROUP)
            acc += log ? (double)io::load(dyr[j]) : (double)io::load(yr[j]) * (double)io::load(dyr[j]);
        const C total = (C)group_reduce<GROUP>(acc, SumOp(), scratch);
        for (u64 j = lane; j < seen; j += GROUP) {
            const C yv = io::load(yr[j]), d = io::load(dyr[j]);
            dxr[j] = io::store(log ? s * (d - m_exp(yv) * total) : s * yv * (d - total));
        }
        for (u64 j = seen + lane; j < len; j += GROUP) dxr[j] = io::store((C)0);
    }
}

template <int GROUP, typename T, typename S>
__device__ void layer_norm_rows(double eps, const T* x, const T* gamma, const T* beta, T* y, S* mean_out,
                                S* rstd_out, u64 rows, u64 len) {
    typedef Io<T> io;
    typedef typename io::C C;
    SCRATCH(double)
    ROWS_OF(GROUP) {
        const T* xr = x + r * len;
        T* yr = y + r * len;
        double sum = 0;
        for (u64 j = lane; j < len; j += GROUP) sum += (double)io::load(xr[j]);
        const double mean = len ? group_reduce<GROUP>(sum, SumOp(), scratch) / (double)len : 0.0;
        double squares = 0;
        for (u64 j = lane; j < len; j += GROUP) {
            const double d = (double)io::load(xr[j]) - mean;
            squares += d * d;
        }
        const double var = len ? group_reduce<GROUP>(squares, SumOp(), scratch) / (double)len : 0.0;
        const double rstd = 1.0 / sqrt(var + eps);
        if (lane == 0) {
            mean_out[r] = (S)mean;
            rstd_out[r] = (S)rstd;
        }
        const C m = (C)mean, rs = (C)rstd;
        for (u64 j = lane; j < len; j += GROUP)
            yr[j] = io::store((io::load(xr[j]) - m) * rs * io::load(gamma[j]) + io::load(beta[j]));
    }
}

template <int GROUP, typename T, typename S>
__device__ void layer_norm_dx_rows(const T* x, const T* gamma, const S* mean, const S* rstd, const T* dy,
                                   T* dx, u64 rows, u64 len) {
    typedef Io<T> io;
    typedef typename io::C C;
    SCRATCH(double)
    ROWS_OF(GROUP) {
        const T* xr = x + r * len;
        const T* dyr = dy + r * len;
        T* dxr = dx + r * len;
        const double mu = (double)mean[r], rs = (double)rstd[r];
        double sum_g = 0, sum_gx = 0;
        for (u64 j = lane; j < len; j += GROUP) {
            const double g = (double)io::load(dyr[j]) * (double)io::load(gamma[j]);
            sum_g += g;
            sum_gx += g * ((double)io::load(xr[j]) - mu) * rs;
        }
        sum_g = group_reduce<GROUP>(sum_g, SumOp(), scratch);
        sum_gx = group_reduce<GROUP>(sum_gx, SumOp(), scratch);
        const C m = (C)mu, rc = (C)rs, mean_g = (C)(sum_g / (double)len), mean_gx = (C)(sum_gx / (double)len);
        for (u64 j = lane; j < len; j += GROUP) {
            const C xhat = (io::load(xr[j]) - m) * rc;
            const C g = io::load(dyr[j]) * io::load(gamma[j]);
            dxr[j] = io::store(rc * (g - mean_g - xhat * mean_gx));
        }
    }
}

// Partial sums of dgamma and dbeta: slice p (blockIdx.y) of gridDim.y takes rows p, p + P, ...;
// partial[(2p) len + j] and partial[(2p + 1) len + j] receive its sums for column j.
template <typename T, typename S>
__device__ void layer_norm_dparams_partial(const T* x, const S* mean, const S* rstd, const T* dy,
                                           double* partial, u64 rows, u64 len) {
    typedef Io<T> io;
    const u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x, p = blockIdx.y, slices = gridDim.y;
    if (j >= len) return;
    double dg = 0, db = 0;
    for (u64 r = p; r < rows; r += slices) {
        const double d = (double)io::load(dy[r * len + j]);
        dg += d * ((double)io::load(x[r * len + j]) - (double)mean[r]) * (double)rstd[r];
        db += d;
    }
    partial[(2 * p) * len + j] = dg;
    partial[(2 * p + 1) * len + j] = db;
}

template <typename T>
__device__ void layer_norm_dparams_sum(const double* partial, u64 slices, T* dgamma, T* dbeta, u64 len) {
    typedef Io<T> io;
    typedef typename io::C C;
    for (u64 j = thread_index(); j < len; j += grid_stride()) {
        double dg = 0, db = 0;
        for (u64 p = 0; p < slices; ++p) {
            dg += partial[(2 * p) * len + j];
            db += partial[(2 * p + 1) * len + j];
        }
        dgamma[j] = io::store((C)dg);
        dbeta[j] = io::store((C)db);
    }
}

#define NORM_GROUP(G, name, T, S) \
    extern "C" __global__ void softmax_##G##_##name(int log, double scale, int causal, const T* x, T* y, \
                                                    u64 rows, u64 len) { \
        softmax_rows<G, T>(log, scale, causal, x, y, rows, len); \
    } \
    extern "C" __global__ void softmax_backward_##G##_##name(int log, double scale, int causal, const T* y, \
                                                             const T* dy, T* dx, u64 rows, u64 len) { \
        softmax_backward_rows<G, T>(log, scale, causal, y, dy, dx, rows, len); \
    } \
    extern "C" __global__ void layer_norm_##G##_##name(double eps, const T* x, const T* gamma, const T* beta, \
                                                       T* y, S* mean, S* rstd, u64 rows, u64 len) { \
        layer_norm_rows<G, T, S>(eps, x, gamma, beta, y, mean, rstd, rows, len); \
    } \
    extern "C" __global__ void layer_norm_dx_##G##_##name(const T* x, const T* gamma, const S* mean, \
                                                          const S* rstd, const T* dy, T* dx, u64 rows, u64 len) { \
        layer_norm_dx_rows<G, T, S>(x, gamma, mean, rstd, dy, dx, rows, len); \
    }

#define NORM(name, T, S) \
    NORM_GROUP(32, name, T, S) \
    NORM_GROUP(256, name, T, S) \
    extern "C" __global__ void layer_norm_dparams_partial_##name(const T* x, const S* mean, const S* rstd, \
                                                                 const T* dy, double* partial, u64 rows, u64 len) { \
        layer_norm_dparams_partial<T, S>(x, mean, rstd, dy, partial, rows, len); \
    } \
    extern "C" __global__ void layer_norm_dparams_sum_##name(const double* partial, u64 slices, T* dgamma, \
                                                             T* dbeta, u64 len) { \
        layer_norm_dparams_sum<T>(partial, slices, dgamma, dbeta, len); \
    }

NORM(f32, float, float)
NORM(f64, double, double)
NORM(f16, f16, float)
NORM(bf16, bf16, float)
