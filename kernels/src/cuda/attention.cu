// Memory-efficient attention (FlashAttention-2's algorithm): the scores and weights of a block of
// keys live only in registers, never in memory. A warp owns one row (a query in the forward pass
// and the queries' gradients, a key in the keys' and values' gradients); its lanes hold the
// row's features (lane + 32 k, up to ATT_HEAD_MAX), and each dot product is a reduction over the
// warp. The four warps of a block share tiles of the other side's rows in shared memory.
//
// Operands are [heads, len, head] in T; the log-sum-exp and the backward pass's row sums
// (delta) are [heads, len] in the compute type. The dropout mask of weight (i, j) of head h is
// drawn at index (h len + i) len + j, as dropout on the materialized weights draws it.

#define ATT_HEAD_MAX 128
#define ATT_PER_LANE (ATT_HEAD_MAX / 32)
#define ATT_WARPS 4
#define ATT_THREADS (ATT_WARPS * 32)

// Rows of the other side per tile: 32 KiB of shared memory for two tiles, whatever the type.
template <typename C> struct AttTile { enum { ROWS = 32 * 4 / sizeof(C) }; };

// The sum of `v` over the warp, on every lane.
template <typename C> __device__ __forceinline__ C warp_sum(C v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// The dot product of this lane's features `mine` with row `row` of a shared tile, over the warp.
template <typename C>
__device__ __forceinline__ C att_dot(const C (&mine)[ATT_PER_LANE], const C* row, int lane) {
    C partial = 0;
#pragma unroll
    for (int k = 0; k < ATT_PER_LANE; ++k) partial += mine[k] * row[lane + 32 * k];
    return warp_sum(partial);
}

// Loads this lane's features of row `row` (of `head` features) into `mine`, 0 past the head.
template <typename T>
__device__ __forceinline__ void att_load_row(const T* row, u64 head, int lane,
                                             typename Io<T>::C (&mine)[ATT_PER_LANE]) {
#pragma unroll
    for (int k = 0; k < ATT_PER_LANE; ++k) {
        const u64 f = lane + 32 * k;
        mine[k] = f < head ? Io<T>::load(row[f]) : (typename Io<T>::C)0;
    }
}

// Loads rows first..first + ROWS of `x` (a head's [len, head]) into `tile`, zeros past len.
template <typename T>
__device__ __forceinline__ void att_load_tile(const T* x, u64 first, u64 len, u64 head,
                                              typename Io<T>::C* tile) {
    typedef typename Io<T>::C C;
    const int rows = AttTile<C>::ROWS;
    for (int e = threadIdx.x; e < rows * ATT_HEAD_MAX; e += ATT_THREADS) {
        const u64 r = first + e / ATT_HEAD_MAX, f = e % ATT_HEAD_MAX;
        tile[e] = r < len && f < head ? Io<T>::load(x[r * head + f]) : (C)0;
    }
}

// The dropout factor of weight (i, j) of head h: 0 where dropped, 1 / (1 - p) where kept.
template <typename C>
__device__ __forceinline__ C att_keep(int dropout, double p, u64 seed, u64 h, u64 len, u64 i, u64 j) {
    if (!dropout) return (C)1;
    return uniform(seed, (h * len + i) * len + j) >= p ? (C)(1.0 / (1.0 - p)) : (C)0;
}

// The rows a block's warps own: first + warp, and how many keys (or queries) their tiles span.
struct AttRows { u64 first, row; bool mine; };
__device__ __forceinline__ AttRows att_rows(u64 len) {
    AttRows rows;
    rows.first = (u64)blockIdx.x * ATT_WARPS;
    rows.row = rows.first + threadIdx.x / 32;
    rows.mine = rows.row < len;
    return rows;
}

#define ATTENTION(name, T) \
    extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_##name( \
        const T* q, const T* k, const T* v, T* out, typename Io<T>::C* lse, u64 len, u64 head, \
        double scale, int causal, int dropout, double p, u64 seed) { \
        typedef typename Io<T>::C C; \
        __shared__ C keys[AttTile<C>::ROWS * ATT_HEAD_MAX]; \
        __shared__ C values[AttTile<C>::ROWS * ATT_HEAD_MAX]; \
        const int lane = threadIdx.x % 32; \
        const u64 h = blockIdx.y, base = h * len * head; \
        const AttRows rows = att_rows(len); \
        C query[ATT_PER_LANE], acc[ATT_PER_LANE]; \
        att_load_row(q + base + (rows.mine ? rows.row : 0) * head, head, lane, query); \
        _Pragma("unroll") for (int f = 0; f < ATT_PER_LANE; ++f) acc[f] = 0; \
        C most = neg_infinity<C>(), sum = 0; \
        const u64 last = rows.first + ATT_WARPS < len ? rows.first + ATT_WARPS : len; \
        const u64 keys_seen = causal ? last : len; \
        const u64 visible = causal ? rows.row + 1 : len; \
        for (u64 key0 = 0; key0 < keys_seen; key0 += AttTile<C>::ROWS) { \
            __syncthreads(); \
            att_load_tile(k + base, key0, len, head, keys); \
            att_load_tile(v + base, key0, len, head, values); \
            __syncthreads(); \
            if (!rows.mine) continue; \
            for (int c = 0; c < AttTile<C>::ROWS && key0 + c < visible; ++c) { \
                const C s = (C)scale * att_dot(query, keys + c * ATT_HEAD_MAX, lane); \
                const C new_most = m_max(most, s); \
                const C rescale = m_exp(most - new_most), weight = m_exp(s - new_most); \
                sum = sum * rescale + weight; \
                const C kept = weight * att_keep<C>(dropout, p, seed, h, len, rows.row, key0 + c); \
                _Pragma("unroll") for (int f = 0; f < ATT_PER_LANE; ++f) \
                    acc[f] = acc[f] * rescale + kept * values[c * ATT_HEAD_MAX + lane + 32 * f]; \
                most = new_most; \
            } \
        } \
        if (!rows.mine) return; \
        _Pragma("unroll") for (int f = 0; f < ATT_PER_LANE; ++f) { \
            const u64 feature = lane + 32 * f; \
            if (feature < head) out[base + rows.row * head + feature] = Io<T>::store(acc[f] / sum); \
        } \
        if (lane == 0) lse[h * len + rows.row] = most + m_log(sum); \
    }
FOR_FLOATS(ATTENTION)

// delta[i] = dout[i] . out[i]: a warp per row.
#define ATTENTION_DELTA(name, T) \
    extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_delta_##name( \
        const T* out, const T* dout, typename Io<T>::C* delta, u64 rows, u64 head) { \
        typedef typename Io<T>::C C; \
        const int lane = threadIdx.x % 32; \
        const u64 row = (u64)blockIdx.x * ATT_WARPS + threadIdx.x / 32; \
        if (row >= rows) return; \
        C partial = 0; \
        for (u64 f = lane; f < head; f += 32) \
            partial += Io<T>::load(out[row * head + f]) * Io<T>::load(dout[row * head + f]); \
        partial = warp_sum(partial); \
        if (lane == 0) delta[row] = partial; \
    }
FOR_FLOATS(ATTENTION_DELTA)

// The gradients of the keys and values: a warp per key, over the tiles of queries that see it.
#define ATTENTION_BACKWARD_KV(name, T) \
    extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_backward_kv_##name( \
        const T* q, const T* k, const T* v, const T* dout, const typename Io<T>::C* lse, \
        const typename Io<T>::C* delta, T* dk, T* dv, u64 len, u64 head, double scale, int causal, \
        int dropout, double p, u64 seed) { \
        typedef typename Io<T>::C C; \
        __shared__ C queries[AttTile<C>::ROWS * ATT_HEAD_MAX]; \
        __shared__ C grads[AttTile<C>::ROWS * ATT_HEAD_MAX]; \
        const int lane = threadIdx.x % 32; \
        const u64 h = blockIdx.y, base = h * len * head; \
        const AttRows rows = att_rows(len); \
        const u64 key = rows.mine ? rows.row : 0; \
        C mine_k[ATT_PER_LANE], mine_v[ATT_PER_LANE], gk[ATT_PER_LANE], gv[ATT_PER_LANE]; \
        att_load_row(k + base + key * head, head, lane, mine_k); \
        att_load_row(v + base + key * head, head, lane, mine_v); \
        _Pragma("unroll") for (int f = 0; f < ATT_PER_LANE; ++f) gk[f] = gv[f] = 0; \
        const u64 start = causal ? rows.first : 0; \
        const u64 tile0 = start - start % AttTile<C>::ROWS; \
        for (u64 q0 = tile0; q0 < len; q0 += AttTile<C>::ROWS) { \
            __syncthreads(); \
            att_load_tile(q + base, q0, len, head, queries); \
            att_load_tile(dout + base, q0, len, head, grads); \
            __syncthreads(); \
            if (!rows.mine) continue; \
            for (int r = 0; r < AttTile<C>::ROWS && q0 + r < len; ++r) { \
                const u64 i = q0 + r; \
                if (causal && i < key) continue; \
                const C* qi = queries + r * ATT_HEAD_MAX; \
                const C* gi = grads + r * ATT_HEAD_MAX; \
                const C weight = m_exp((C)scale * att_dot(mine_k, qi, lane) - lse[h * len + i]); \
                const C keep = att_keep<C>(dropout, p, seed, h, len, i, key); \
                const C dweight = att_dot(mine_v, gi, lane) * keep; \
                const C dscore = weight * (dweight - delta[h * len + i]) * (C)scale; \
                _Pragma("unroll") for (int f = 0; f < ATT_PER_LANE; ++f) { \
                    gv[f] += weight * keep * gi[lane + 32 * f]; \
                    gk[f] += dscore * qi[lane + 32 * f]; \
                } \
            } \
        } \
        if (!rows.mine) return; \
        _Pragma("unroll") for (int f = 0; f < ATT_PER_LANE; ++f) { \
            const u64 feature = lane + 32 * f; \
            if (feature < head) { \
                dk[base + key * head + feature] = Io<T>::store(gk[f]); \
                dv[base + key * head + feature] = Io<T>::store(gv[f]); \
            } \
        } \
    }
FOR_FLOATS(ATTENTION_BACKWARD_KV)

// The gradients of the queries: a warp per query, over the tiles of keys it sees.
#define ATTENTION_BACKWARD_Q(name, T) \
    extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_backward_q_##name( \
        const T* q, const T* k, const T* v, const T* dout, const typename Io<T>::C* lse, \
        const typename Io<T>::C* delta, T* dq, u64 len, u64 head, double scale, int causal, \
        int dropout, double p, u64 seed) { \
        typedef typename Io<T>::C C; \
        __shared__ C keys[AttTile<C>::ROWS * ATT_HEAD_MAX]; \
        __shared__ C values[AttTile<C>::ROWS * ATT_HEAD_MAX]; \
        const int lane = threadIdx.x % 32; \
        const u64 h = blockIdx.y, base = h * len * head; \
        const AttRows rows = att_rows(len); \
        const u64 i = rows.mine ? rows.row : 0; \
        C mine_q[ATT_PER_LANE], mine_g[ATT_PER_LANE], gq[ATT_PER_LANE]; \
        att_load_row(q + base + i * head, head, lane, mine_q); \
        att_load_row(dout + base + i * head, head, lane, mine_g); \
        _Pragma("unroll") for (int f = 0; f < ATT_PER_LANE; ++f) gq[f] = 0; \
        const C row_lse = lse[h * len + i], row_delta = delta[h * len + i]; \
        const u64 last = rows.first + ATT_WARPS < len ? rows.first + ATT_WARPS : len; \
        const u64 keys_seen = causal ? last : len; \
        const u64 visible = causal ? i + 1 : len; \
        for (u64 key0 = 0; key0 < keys_seen; key0 += AttTile<C>::ROWS) { \
            __syncthreads(); \
            att_load_tile(k + base, key0, len, head, keys); \
            att_load_tile(v + base, key0, len, head, values); \
            __syncthreads(); \
            if (!rows.mine) continue; \
            for (int c = 0; c < AttTile<C>::ROWS && key0 + c < visible; ++c) { \
                const C* kj = keys + c * ATT_HEAD_MAX; \
                const C weight = m_exp((C)scale * att_dot(mine_q, kj, lane) - row_lse); \
                const C keep = att_keep<C>(dropout, p, seed, h, len, i, key0 + c); \
                const C dweight = att_dot(mine_g, values + c * ATT_HEAD_MAX, lane) * keep; \
                const C dscore = weight * (dweight - row_delta) * (C)scale; \
                _Pragma("unroll") for (int f = 0; f < ATT_PER_LANE; ++f) \
                    gq[f] += dscore * kj[lane + 32 * f]; \
            } \
        } \
        if (!rows.mine) return; \
        _Pragma("unroll") for (int f = 0; f < ATT_PER_LANE; ++f) { \
            const u64 feature = lane + 32 * f; \
            if (feature < head) dq[base + i * head + feature] = Io<T>::store(gq[f]); \
        } \
    }
FOR_FLOATS(ATTENTION_BACKWARD_Q)
