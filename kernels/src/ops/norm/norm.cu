// Layer normalization and RMS normalization over the last axis, forward and backward. Their
// statistics and every sum accumulate in f64, in a fixed order; the parameter gradients sum
// per-slice partial results in order (no atomics). Row kernels (see prelude.cuh): rows longer than every shape holds are
// read three times forward, twice backward.

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

// The forward kernels of group G and cache N (`layer_norm_GxN_f32`), and the input gradient's,
// which hold N elements of each of two rows, its f64 sums counted as a third
// (`layer_norm_dx_GxN_f32`).
#define FORWARD(G, N, name, T, S) \
    extern "C" __global__ void ROW_BOUNDS(G, N, T, 1) \
        layer_norm_##G##x##N##_##name(double eps, const T* x, const T* gamma, const T* beta, T* y, S* mean, \
                                      S* rstd, u64 rows, u64 len) { \
        layer_norm_rows<G, N, T, S>(eps, x, gamma, beta, y, mean, rstd, rows, len); \
    }
#define BACKWARD(G, N, name, T, S) \
    extern "C" __global__ void ROW_BOUNDS(G, N, T, 3) \
        layer_norm_dx_##G##x##N##_##name(const T* x, const T* gamma, const S* mean, const S* rstd, const T* dy, \
                                         T* dx, u64 rows, u64 len) { \
        layer_norm_dx_rows<G, N, T, S>(x, gamma, mean, rstd, dy, dx, rows, len); \
    }

#define NORM(name, T, S) \
    ROW_SHAPES(FORWARD, BACKWARD, name, T, S) \
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

// ---------- RMS normalization ----------

// `gamma * round(xv * rs)`: the normalized value rounded to T before the product, as Hugging
// Face's `weight * x_normed.to(input_dtype)` (a no-op for float and double).
template <typename T>
__device__ __forceinline__ T rms_scaled(typename Io<T>::C xv, typename Io<T>::C rs, T g) {
    typedef Io<T> io;
    return io::store(io::load(g) * io::load(io::store(xv * rs)));
}

// RMS normalization of one row held in registers; its rstd goes to `rstd`.
template <int GROUP, int N, typename T>
__device__ __forceinline__ void rms_norm_row_cached(double eps, const T* xr, const T* gamma, T* yr, u64 len,
                                                    u64 lane, double* scratch, double& rstd) {
    typedef Io<T> io;
    typedef typename io::C C;
    const int mine = (int)stride_share(len, lane);
    C v[N];
    cache_row<GROUP>(xr + lane, mine, (C)0, v);
    double squares = 0;
#pragma unroll
    for (int k = 0; k < N; ++k)
        if (k * GROUP < mine) squares += (double)v[k] * (double)v[k];
    rstd = rstd_of(group_reduce<GROUP>(squares, SumOp(), scratch), len, eps);
    const C rs = (C)rstd;
    const T* g = gamma + lane;
    T* y = yr + lane;
#pragma unroll
    for (int k = 0; k < N; ++k)
        if (k * GROUP < mine) y[k * GROUP] = rms_scaled<T>(v[k], rs, g[k * GROUP]);
}

template <int GROUP, int N, typename T, typename S>
__device__ void rms_norm_rows(double eps, const T* x, const T* gamma, T* y, S* rstd_out, u64 rows, u64 len) {
    typedef Io<T> io;
    typedef typename io::C C;
    SCRATCH(double)
    ROWS_OF(GROUP) {
        const T* xr = x + r * len;
        T* yr = y + r * len;
        double rstd;
        if (len <= (u64)GROUP * N) {
            rms_norm_row_cached<GROUP, N, T>(eps, xr, gamma, yr, len, lane, scratch, rstd);
        } else {
            double squares = 0;
            for (u64 j = lane; j < len; j += GROUP) {
                const double v = (double)io::load(xr[j]);
                squares += v * v;
            }
            rstd = rstd_of(group_reduce<GROUP>(squares, SumOp(), scratch), len, eps);
            const C rs = (C)rstd;
            for (u64 j = lane; j < len; j += GROUP) yr[j] = rms_scaled<T>(io::load(xr[j]), rs, gamma[j]);
        }
        if (lane == 0) rstd_out[r] = (S)rstd;
    }
}

// The input gradient of RMS normalization: with g = dy gamma and xhat = x rstd,
// dx = rstd (g - xhat mean(g xhat)).
template <int GROUP, int N, typename T>
__device__ __forceinline__ void rms_norm_dx_row_cached(const T* xr, const T* gamma, double rs, const T* dyr,
                                                       T* dxr, u64 len, u64 lane, double* scratch) {
    typedef Io<T> io;
    typedef typename io::C C;
    const int mine = (int)stride_share(len, lane);
    C xv[N], dv[N];
    cache_row<GROUP>(xr + lane, mine, (C)0, xv);
    cache_row<GROUP>(dyr + lane, mine, (C)0, dv);
    const T* gm = gamma + lane;
    double sum_gx = 0;
#pragma unroll
    for (int k = 0; k < N; ++k) {
        if (k * GROUP >= mine) continue;
        sum_gx += (double)dv[k] * (double)io::load(gm[k * GROUP]) * (double)xv[k] * rs;
    }
    sum_gx = group_reduce<GROUP>(sum_gx, SumOp(), scratch);
    const C rc = (C)rs, mean_gx = (C)(sum_gx / (double)len);
    T* dx = dxr + lane;
#pragma unroll
    for (int k = 0; k < N; ++k) {
        if (k * GROUP >= mine) continue;
        const C xhat = xv[k] * rc, g = dv[k] * io::load(gm[k * GROUP]);
        dx[k * GROUP] = io::store(rc * (g - xhat * mean_gx));
    }
}

template <int GROUP, int N, typename T, typename S>
__device__ void rms_norm_dx_rows(const T* x, const T* gamma, const S* rstd, const T* dy, T* dx, u64 rows,
                                 u64 len) {
    typedef Io<T> io;
    typedef typename io::C C;
    SCRATCH(double)
    ROWS_OF(GROUP) {
        const T* xr = x + r * len;
        const T* dyr = dy + r * len;
        T* dxr = dx + r * len;
        const double rs = (double)rstd[r];
        if (len <= (u64)GROUP * N) {
            rms_norm_dx_row_cached<GROUP, N, T>(xr, gamma, rs, dyr, dxr, len, lane, scratch);
            continue;
        }
        double sum_gx = 0;
        for (u64 j = lane; j < len; j += GROUP)
            sum_gx += (double)io::load(dyr[j]) * (double)io::load(gamma[j]) * (double)io::load(xr[j]) * rs;
        sum_gx = group_reduce<GROUP>(sum_gx, SumOp(), scratch);
        const C rc = (C)rs, mean_gx = (C)(sum_gx / (double)len);
        for (u64 j = lane; j < len; j += GROUP) {
            const C xhat = io::load(xr[j]) * rc;
            const C g = io::load(dyr[j]) * io::load(gamma[j]);
            dxr[j] = io::store(rc * (g - xhat * mean_gx));
        }
    }
}

// Partial sums of dgamma: slice p (blockIdx.y) of gridDim.y takes rows p, p + P, ...;
// partial[p len + j] receives its sum for column j.
template <typename T, typename S>
__device__ void rms_norm_dgamma_partial(const T* x, const S* rstd, const T* dy, double* partial, u64 rows,
                                        u64 len) {
    typedef Io<T> io;
    const u64 j = (u64)blockIdx.x * blockDim.x + threadIdx.x, p = blockIdx.y, slices = gridDim.y;
    if (j >= len) return;
    double dg = 0;
    for (u64 r = p; r < rows; r += slices)
        dg += (double)io::load(dy[r * len + j]) * (double)io::load(x[r * len + j]) * (double)rstd[r];
    partial[p * len + j] = dg;
}

template <typename T>
__device__ void rms_norm_dgamma_sum(const double* partial, u64 slices, T* dgamma, u64 len) {
    typedef Io<T> io;
    typedef typename io::C C;
    for (u64 j = thread_index(); j < len; j += grid_stride()) {
        double dg = 0;
        for (u64 p = 0; p < slices; ++p) dg += partial[p * len + j];
        dgamma[j] = io::store((C)dg);
    }
}

#define RMS_FORWARD(G, N, name, T, S) \
    extern "C" __global__ void ROW_BOUNDS(G, N, T, 1) \
        rms_norm_##G##x##N##_##name(double eps, const T* x, const T* gamma, T* y, S* rstd, u64 rows, u64 len) { \
        rms_norm_rows<G, N, T, S>(eps, x, gamma, y, rstd, rows, len); \
    }
#define RMS_BACKWARD(G, N, name, T, S) \
    extern "C" __global__ void ROW_BOUNDS(G, N, T, 3) \
        rms_norm_dx_##G##x##N##_##name(const T* x, const T* gamma, const S* rstd, const T* dy, T* dx, u64 rows, \
                                       u64 len) { \
        rms_norm_dx_rows<G, N, T, S>(x, gamma, rstd, dy, dx, rows, len); \
    }

#define RMS_NORM(name, T, S) \
    ROW_SHAPES(RMS_FORWARD, RMS_BACKWARD, name, T, S) \
    extern "C" __global__ void rms_norm_dgamma_partial_##name(const T* x, const S* rstd, const T* dy, \
                                                              double* partial, u64 rows, u64 len) { \
        rms_norm_dgamma_partial<T, S>(x, rstd, dy, partial, rows, len); \
    } \
    extern "C" __global__ void rms_norm_dgamma_sum_##name(const double* partial, u64 slices, T* dgamma, \
                                                          u64 len) { \
        rms_norm_dgamma_sum<T>(partial, slices, dgamma, len); \
    }

RMS_NORM(f32, float, float)
RMS_NORM(f64, double, double)
RMS_NORM(f16, f16, float)
RMS_NORM(bf16, bf16, float)
