// Softmax, log-softmax and layer normalization over the last axis, forward and backward.
//
// A row belongs to a group of GROUP threads: a warp (GROUP 32, eight rows to a block of 256) or
// a whole block (GROUP 256 or 512). Row sums reduce in a fixed order; layer normalization's
// statistics and every backward sum accumulate in f64, and the parameter gradients sum
// per-slice partial results in order (no atomics).
//
// Each thread of a group keeps N elements of its row in registers (of each of the two rows, in
// the backward passes), so that a row of up to GROUP * N elements is read once. Every row
// kernel is built in several shapes (`_GxN_` in its name), and the launch takes the first of
// its list that holds the row (`ops/norm/cuda.rs`): a thread never carries registers, or runs
// predicated loads, for elements its row does not have, and the fewer registers let more rows
// be in flight, which is what these kernels wait on. Rows longer than every shape holds are
// read again for each pass: softmax twice (the most and sum together, then the output), layer
// normalization three times, the backward passes twice.

// Blocks of 256 threads a kernel keeping `words` 32-bit registers of row elements per thread
// asks to keep resident on a multiprocessor (`__launch_bounds__`), so that the compiler fits its
// registers to them: more rows in flight hide memory latency (measured on an H100:
// benches/README.md), as far as the registers go without spilling. Turing holds at most four
// blocks of 256.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define MOST_ROW_BLOCKS 4
#else
#define MOST_ROW_BLOCKS 6
#endif
#define WORD_BLOCKS(words) ((words) <= 8 ? MOST_ROW_BLOCKS : (words) <= 16 ? 4 : (words) <= 32 ? 2 : 1)

// The same for a kernel of storage type T keeping N elements of each of `rows` rows. f64
// arithmetic is left to the compiler: its exponentials and sums take registers of their own.
#define ROW_BLOCKS(N, T, rows) (sizeof(typename Io<T>::C) == 4 ? WORD_BLOCKS((rows) * (N)) : 1)

// The launch bounds of a row kernel of group G: its blocks' threads (a warp's rows share blocks
// of 256), and ROW_BLOCKS's count of 256 threads in blocks of that size.
#define BLOCK_THREADS(G) ((G) > 256 ? (G) : 256)
#define ROW_BOUNDS(G, N, T, rows) \
    __launch_bounds__(BLOCK_THREADS(G), ROW_BLOCKS(N, T, rows) * 256 / BLOCK_THREADS(G) > 1 \
                                            ? ROW_BLOCKS(N, T, rows) * 256 / BLOCK_THREADS(G) : 1)

// Whether softmax reads and writes a row 16 bytes at a time, `Pack<T>` (`softmax_row_packed`):
// when its length is a whole number of packs and the arrays are 16-byte aligned, and for f32
// arithmetic only (f64's exponentials would take more registers than a thread has).
template <typename T>
__device__ __forceinline__ bool packs_fit(const T* x, const T* y, u64 len) {
    return sizeof(typename Io<T>::C) == 4 && len % (16 / sizeof(T)) == 0 && ((u64)x | (u64)y) % 16 == 0;
}

// The most of a row held in registers, `v` (minus infinity where a thread holds no element; the
// slots from `k GROUP >= mine` on hold none and are skipped), and what the output needs:
// `log_sum`, the log of the sum of exp(v - max), for log-softmax; `inv`, its inverse, for
// softmax, which keeps each exponential in `v`.
template <int GROUP, int N, typename C>
__device__ __forceinline__ void softmax_held(int log, C (&v)[N], int mine, C* scratch, C& max, C& log_sum,
                                             C& inv) {
    max = neg_infinity<C>();
#pragma unroll
    for (int k = 0; k < N; ++k) max = m_max(max, v[k]);
    max = group_reduce<GROUP>(max, MaxOp(), scratch);
    C sum = 0;
#pragma unroll
    for (int k = 0; k < N; ++k) {
        if (k * GROUP >= mine) continue;
        const C e = m_exp(v[k] - max);
        sum += e;
        if (!log) v[k] = e;
    }
    sum = group_reduce<GROUP>(sum, SumOp(), scratch);
    log_sum = log ? m_log(sum) : (C)0;
    inv = (C)1 / sum;
}

// Softmax of one row held in registers: `v[k]` is `scale x[lane + k GROUP]`, minus infinity
// past `seen`.
template <int GROUP, int N, typename T>
__device__ __forceinline__ void softmax_row_cached(int log, typename Io<T>::C s, const T* xr, T* yr, u64 seen,
                                                   u64 len, u64 lane, typename Io<T>::C* scratch) {
    typedef Io<T> io;
    typedef typename io::C C;
    T* y = yr + lane;
    const int mine = (int)stride_share(seen, lane), all = (int)stride_share(len, lane);
    C v[N];
    cache_row<GROUP>(xr + lane, mine, neg_infinity<C>(), v);
#pragma unroll
    for (int k = 0; k < N; ++k)
        if (k * GROUP < mine) v[k] *= s;
    C max, log_sum, inv;
    softmax_held<GROUP>(log, v, mine, scratch, max, log_sum, inv);
#pragma unroll
    for (int k = 0; k < N; ++k) {
        if (k * GROUP < mine) y[k * GROUP] = io::store(log ? v[k] - max - log_sum : v[k] * inv);
        else if (k * GROUP < all) y[k * GROUP] = io::store(log ? neg_infinity<C>() : (C)0);
    }
}

// Softmax of one row held in registers, read and written a pack of 16 bytes at a time: thread
// `lane` holds packs `lane + p GROUP`; elements past `seen` are minus infinity, whose
// exponential is the 0 (softmax) or minus infinity (log-softmax) that they must come out as.
template <int GROUP, int N, typename T>
__device__ __forceinline__ void softmax_row_packed(int log, typename Io<T>::C s, const T* xr, T* yr, u64 seen,
                                                   u64 len, u64 lane, typename Io<T>::C* scratch) {
    typedef Io<T> io;
    typedef typename io::C C;
    enum { W = 16 / sizeof(T), P = N / W };
    static_assert(N % W == 0, "a thread holds whole packs");
    const Pack<T>* xp = (const Pack<T>*)xr;
    Pack<T>* yp = (Pack<T>*)yr;
    const u64 packs = len / W;
    C v[N];
#pragma unroll
    for (int p = 0; p < P; ++p) {
        const u64 q = (u64)p * GROUP + lane;
        Pack<T> pack;
        if (q < packs) pack = xp[q];
#pragma unroll
        for (int i = 0; i < W; ++i)
            v[p * W + i] = q < packs && q * W + i < seen ? s * io::load(pack.v[i]) : neg_infinity<C>();
    }
    C max, log_sum, inv;
    softmax_held<GROUP>(log, v, GROUP * N, scratch, max, log_sum, inv);
#pragma unroll
    for (int p = 0; p < P; ++p) {
        const u64 q = (u64)p * GROUP + lane;
        if (q >= packs) continue;
        Pack<T> out;
#pragma unroll
        for (int i = 0; i < W; ++i) out.v[i] = io::store(log ? v[p * W + i] - max - log_sum : v[p * W + i] * inv);
        yp[q] = out;
    }
}

template <int GROUP, int N, typename T>
__device__ void softmax_rows(int log, double scale, int causal, const T* x, T* y, u64 rows, u64 len) {
    typedef Io<T> io;
    typedef typename io::C C;
    SCRATCH(C)
    const C s = (C)scale;
    const bool packed = packs_fit(x, y, len);
    ROWS_OF(GROUP) {
        const T* xr = x + r * len;
        T* yr = y + r * len;
        const u64 seen = causal ? r % len + 1 : len;
        if (len <= (u64)GROUP * N) {
            if (packed) softmax_row_packed<GROUP, N, T>(log, s, xr, yr, seen, len, lane, scratch);
            else softmax_row_cached<GROUP, N, T>(log, s, xr, yr, seen, len, lane, scratch);
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

// The gradient of (log-)softmax: dx = s (dy - exp(y) sum(dy)) for log-softmax, s y (dy - sum(y dy))
// for softmax, over the first `seen` elements of a row; 0 past them.
template <typename C>
__device__ __forceinline__ C softmax_grad(int log, C s, C y, C dy, C total) {
    return log ? s * (dy - m_exp(y) * total) : s * y * (dy - total);
}

// The row's sum that the gradient subtracts: sum(dy) for log-softmax, sum(y dy) for softmax.
__device__ __forceinline__ double softmax_grad_term(int log, double y, double dy) { return log ? dy : y * dy; }

template <int GROUP, int N, typename T>
__device__ __forceinline__ void softmax_backward_row_cached(int log, typename Io<T>::C s, const T* yr,
                                                            const T* dyr, T* dxr, u64 seen, u64 len, u64 lane,
                                                            double* scratch) {
    typedef Io<T> io;
    typedef typename io::C C;
    const int mine = (int)stride_share(seen, lane), all = (int)stride_share(len, lane);
    C yv[N], dv[N];
    cache_row<GROUP>(yr + lane, mine, (C)0, yv);
    cache_row<GROUP>(dyr + lane, mine, (C)0, dv);
    double acc = 0;
#pragma unroll
    for (int k = 0; k < N; ++k)
        if (k * GROUP < mine) acc += softmax_grad_term(log, (double)yv[k], (double)dv[k]);
    const C total = (C)group_reduce<GROUP>(acc, SumOp(), scratch);
    T* dx = dxr + lane;
#pragma unroll
    for (int k = 0; k < N; ++k) {
        if (k * GROUP < mine) dx[k * GROUP] = io::store(softmax_grad(log, s, yv[k], dv[k], total));
        else if (k * GROUP < all) dx[k * GROUP] = io::store((C)0);
    }
}

template <int GROUP, int N, typename T>
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
        if (len <= (u64)GROUP * N) {
            softmax_backward_row_cached<GROUP, N, T>(log, s, yr, dyr, dxr, seen, len, lane, scratch);
            continue;
        }
        double acc = 0;
        for (u64 j = lane; j < seen; j += GROUP)
            acc += softmax_grad_term(log, (double)io::load(yr[j]), (double)io::load(dyr[j]));
        const C total = (C)group_reduce<GROUP>(acc, SumOp(), scratch);
        for (u64 j = lane; j < seen; j += GROUP)
            dxr[j] = io::store(softmax_grad(log, s, io::load(yr[j]), io::load(dyr[j]), total));
        for (u64 j = seen + lane; j < len; j += GROUP) dxr[j] = io::store((C)0);
    }
}

// The reciprocal standard deviation of a row of `len` elements whose squared deviations from its
// mean sum to `squares`.
__device__ __forceinline__ double rstd_of(double squares, u64 len, double eps) {
    return 1.0 / sqrt((len ? squares / (double)len : 0.0) + eps);
}

// Layer normalization of one row held in registers; its mean and rstd go to `mean`, `rstd`.
template <int GROUP, int N, typename T>
__device__ __forceinline__ void layer_norm_row_cached(double eps, const T* xr, const T* gamma, const T* beta,
                                                      T* yr, u64 len, u64 lane, double* scratch, double& mean,
                                                      double& rstd) {
    typedef Io<T> io;
    typedef typename io::C C;
    const int mine = (int)stride_share(len, lane);
    C v[N];
    cache_row<GROUP>(xr + lane, mine, (C)0, v);
    double sum = 0;
#pragma unroll
    for (int k = 0; k < N; ++k)
        if (k * GROUP < mine) sum += (double)v[k];
    mean = len ? group_reduce<GROUP>(sum, SumOp(), scratch) / (double)len : 0.0;
    double squares = 0;
#pragma unroll
    for (int k = 0; k < N; ++k) {
        const double d = (double)v[k] - mean;
        if (k * GROUP < mine) squares += d * d;
    }
    rstd = rstd_of(group_reduce<GROUP>(squares, SumOp(), scratch), len, eps);
    const C m = (C)mean, rs = (C)rstd;
    const T *g = gamma + lane, *b = beta + lane;
    T* y = yr + lane;
#pragma unroll
    for (int k = 0; k < N; ++k)
        if (k * GROUP < mine) y[k * GROUP] = io::store((v[k] - m) * rs * io::load(g[k * GROUP]) + io::load(b[k * GROUP]));
}

template <int GROUP, int N, typename T, typename S>
__device__ void layer_norm_rows(double eps, const T* x, const T* gamma, const T* beta, T* y, S* mean_out,
                                S* rstd_out, u64 rows, u64 len) {
    typedef Io<T> io;
    typedef typename io::C C;
    SCRATCH(double)
    ROWS_OF(GROUP) {
        const T* xr = x + r * len;
        T* yr = y + r * len;
        double mean, rstd;
        if (len <= (u64)GROUP * N) {
            layer_norm_row_cached<GROUP, N, T>(eps, xr, gamma, beta, yr, len, lane, scratch, mean, rstd);
        } else {
            double sum = 0;
            for (u64 j = lane; j < len; j += GROUP) sum += (double)io::load(xr[j]);
            mean = group_reduce<GROUP>(sum, SumOp(), scratch) / (double)len;
            double squares = 0;
            for (u64 j = lane; j < len; j += GROUP) {
                const double d = (double)io::load(xr[j]) - mean;
                squares += d * d;
            }
            rstd = rstd_of(group_reduce<GROUP>(squares, SumOp(), scratch), len, eps);
            const C m = (C)mean, rs = (C)rstd;
            for (u64 j = lane; j < len; j += GROUP)
                yr[j] = io::store((io::load(xr[j]) - m) * rs * io::load(gamma[j]) + io::load(beta[j]));
        }
        if (lane == 0) {
            mean_out[r] = (S)mean;
            rstd_out[r] = (S)rstd;
        }
    }
}

// The input gradient of layer normalization: with g = dy gamma and xhat = (x - mean) rstd,
// dx = rstd (g - mean(g) - xhat mean(g xhat)).
template <int GROUP, int N, typename T>
__device__ __forceinline__ void layer_norm_dx_row_cached(const T* xr, const T* gamma, double mu, double rs,
                                                         const T* dyr, T* dxr, u64 len, u64 lane,
                                                         double* scratch) {
    typedef Io<T> io;
    typedef typename io::C C;
    const int mine = (int)stride_share(len, lane);
    C xv[N], dv[N];
    cache_row<GROUP>(xr + lane, mine, (C)0, xv);
    cache_row<GROUP>(dyr + lane, mine, (C)0, dv);
    const T* gm = gamma + lane;
    double sum_g = 0, sum_gx = 0;
#pragma unroll
    for (int k = 0; k < N; ++k) {
        if (k * GROUP >= mine) continue;
        const double g = (double)dv[k] * (double)io::load(gm[k * GROUP]);
        sum_g += g;
        sum_gx += g * ((double)xv[k] - mu) * rs;
    }
    sum_g = group_reduce<GROUP>(sum_g, SumOp(), scratch);
    sum_gx = group_reduce<GROUP>(sum_gx, SumOp(), scratch);
    const C m = (C)mu, rc = (C)rs, mean_g = (C)(sum_g / (double)len), mean_gx = (C)(sum_gx / (double)len);
    T* dx = dxr + lane;
#pragma unroll
    for (int k = 0; k < N; ++k) {
        if (k * GROUP >= mine) continue;
        const C xhat = (xv[k] - m) * rc, g = dv[k] * io::load(gm[k * GROUP]);
        dx[k * GROUP] = io::store(rc * (g - mean_g - xhat * mean_gx));
    }
}

template <int GROUP, int N, typename T, typename S>
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
        if (len <= (u64)GROUP * N) {
            layer_norm_dx_row_cached<GROUP, N, T>(xr, gamma, mu, rs, dyr, dxr, len, lane, scratch);
            continue;
        }
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

// The forward kernels of group G and cache N: `softmax_GxN_f32` and so on.
#define FORWARD(G, N, name, T, S) \
    extern "C" __global__ void ROW_BOUNDS(G, N, T, 1) \
        softmax_##G##x##N##_##name(int log, double scale, int causal, const T* x, T* y, u64 rows, u64 len) { \
        softmax_rows<G, N, T>(log, scale, causal, x, y, rows, len); \
    } \
    extern "C" __global__ void ROW_BOUNDS(G, N, T, 1) \
        layer_norm_##G##x##N##_##name(double eps, const T* x, const T* gamma, const T* beta, T* y, S* mean, \
                                      S* rstd, u64 rows, u64 len) { \
        layer_norm_rows<G, N, T, S>(eps, x, gamma, beta, y, mean, rstd, rows, len); \
    }

// The backward kernels of group G and cache N, which hold N elements of each of two rows (the
// layer-norm gradient's f64 sums counted as a third).
#define BACKWARD(G, N, name, T, S) \
    extern "C" __global__ void ROW_BOUNDS(G, N, T, 2) \
        softmax_backward_##G##x##N##_##name(int log, double scale, int causal, const T* y, const T* dy, T* dx, \
                                            u64 rows, u64 len) { \
        softmax_backward_rows<G, N, T>(log, scale, causal, y, dy, dx, rows, len); \
    } \
    extern "C" __global__ void ROW_BOUNDS(G, N, T, 3) \
        layer_norm_dx_##G##x##N##_##name(const T* x, const T* gamma, const S* mean, const S* rstd, const T* dy, \
                                         T* dx, u64 rows, u64 len) { \
        layer_norm_dx_rows<G, N, T, S>(x, gamma, mean, rstd, dy, dx, rows, len); \
    }

// The shapes each is built in, as `ops/norm/cuda.rs` lists them.
#define NORM_SHAPES(name, T, S) \
    FORWARD(32, 8, name, T, S) FORWARD(32, 16, name, T, S) FORWARD(32, 32, name, T, S) \
    FORWARD(256, 8, name, T, S) FORWARD(256, 16, name, T, S) \
    FORWARD(512, 8, name, T, S) FORWARD(512, 16, name, T, S) FORWARD(512, 32, name, T, S) \
    BACKWARD(32, 4, name, T, S) BACKWARD(32, 8, name, T, S) BACKWARD(32, 16, name, T, S) \
    BACKWARD(256, 4, name, T, S) BACKWARD(256, 8, name, T, S) BACKWARD(256, 16, name, T, S) \
    BACKWARD(512, 4, name, T, S) BACKWARD(512, 16, name, T, S)

#define NORM(name, T, S) \
    NORM_SHAPES(name, T, S) \
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
