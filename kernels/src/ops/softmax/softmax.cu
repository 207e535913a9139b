// Softmax and log-softmax over the last axis, forward and backward, scaled and causally masked
// as attention needs. Row sums reduce in a fixed order; the backward sums accumulate in f64.
// Row kernels (see prelude.cuh): rows longer than every shape holds are read twice, forward
// (the most and sum together, then the output) and backward.

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

// The forward and backward kernels of group G and cache N: `softmax_GxN_f32`,
// `softmax_backward_GxN_f32` and so on.
#define FORWARD(G, N, name, T) \
    extern "C" __global__ void ROW_BOUNDS(G, N, T, 1) \
        softmax_##G##x##N##_##name(int log, double scale, int causal, const T* x, T* y, u64 rows, u64 len) { \
        softmax_rows<G, N, T>(log, scale, causal, x, y, rows, len); \
    }
#define BACKWARD(G, N, name, T) \
    extern "C" __global__ void ROW_BOUNDS(G, N, T, 2) \
        softmax_backward_##G##x##N##_##name(int log, double scale, int causal, const T* y, const T* dy, T* dx, \
                                            u64 rows, u64 len) { \
        softmax_backward_rows<G, N, T>(log, scale, causal, y, dy, dx, rows, len); \
    }

#define SOFTMAX(name, T) ROW_SHAPES(FORWARD, BACKWARD, name, T)
FOR_FLOATS(SOFTMAX)
