// Memory-efficient attention (FlashAttention-2's algorithm): the scores and weights of a block of
// keys live only in registers, never in memory. A warp owns one row (a query in the forward pass
// and the queries' gradients, a key in the keys' and values' gradients); its lanes hold the
// row's features (lane + 32 k, up to ATT_HEAD_MAX), and each dot product is a reduction over the
// warp. The four warps of a block share tiles of the other side's rows in shared memory.
//
// Operands are [heads, len, head] in T, but keys and values (and their gradients), which are
// [heads / group, len, head]: query head h reads key/value head h / group in place (grouped-query
// attention). The log-sum-exp and the backward pass's row sums (delta) are [heads, len] in the
// compute type. The dropout mask of weight (i, j) of head h is
// drawn at index (h len + i) len + j, as dropout on the materialized weights draws it.
// When causal, query i sees keys j with i - window < j <= i (window is len without a sliding
// window), and every kernel walks only the tiles of the other side that its rows see. With packed
// documents (starts not null: [rows, len] u32, query head h in row h / per_row), query i also sees
// only keys j >= starts[i], the first position of its document; starts never fall along a row and
// starts[i] <= i (the host checks them), so a block's first row has its smallest start.

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

// The first key query i sees, when causal: keys i - window < j <= i.
__device__ __forceinline__ u64 att_first_key(u64 i, u64 window) { return i + 1 > window ? i + 1 - window : 0; }

// The row of document starts that head h reads, null without documents.
__device__ __forceinline__ const u32* att_row_starts(const u32* starts, u64 h, u64 per_row, u64 len) {
    return starts ? starts + h / per_row * len : starts;
}

// The first key query i sees, when causal: within the window and its document.
__device__ __forceinline__ u64 att_first_seen(u64 i, u64 window, const u32* starts) {
    const u64 first = att_first_key(i, window), start = starts ? starts[i] : 0;
    return first > start ? first : start;
}

// One past the last query that sees key j by its document: the first i > j whose document starts
// after j (a binary search, starts never falling), len without documents.
__device__ __forceinline__ u64 att_document_end(const u32* starts, u64 j, u64 len) {
    if (!starts) return len;
    u64 lo = j + 1, hi = len;
    while (lo < hi) {
        const u64 mid = lo + (hi - lo) / 2;
        if (starts[mid] > j) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return lo;
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
        u64 group, double scale, int causal, u64 window, const u32* starts, u64 per_row, int dropout, double p, \
        u64 seed) { \
        typedef typename Io<T>::C C; \
        __shared__ C keys[AttTile<C>::ROWS * ATT_HEAD_MAX]; \
        __shared__ C values[AttTile<C>::ROWS * ATT_HEAD_MAX]; \
        const int lane = threadIdx.x % 32; \
        const u64 h = blockIdx.y, base = h * len * head, kv_base = h / group * len * head; \
        const AttRows rows = att_rows(len); \
        const u32* row_starts = att_row_starts(starts, h, per_row, len); \
        C query[ATT_PER_LANE], acc[ATT_PER_LANE]; \
        att_load_row(q + base + (rows.mine ? rows.row : 0) * head, head, lane, query); \
        _Pragma("unroll") for (int f = 0; f < ATT_PER_LANE; ++f) acc[f] = 0; \
        C most = neg_infinity<C>(), sum = 0; \
        const u64 last = rows.first + ATT_WARPS < len ? rows.first + ATT_WARPS : len; \
        const u64 keys_seen = causal ? last : len; \
        const u64 keys_from = causal ? att_first_seen(rows.first, window, row_starts) : 0; \
        const u64 visible = causal ? rows.row + 1 : len; \
        const u64 from = causal && rows.mine ? att_first_seen(rows.row, window, row_starts) : keys_from; \
        for (u64 key0 = keys_from; key0 < keys_seen; key0 += AttTile<C>::ROWS) { \
            __syncthreads(); \
            att_load_tile(k + kv_base, key0, len, head, keys); \
            att_load_tile(v + kv_base, key0, len, head, values); \
            __syncthreads(); \
            if (!rows.mine) continue; \
            for (u64 c = from > key0 ? from - key0 : 0; c < AttTile<C>::ROWS && key0 + c < visible; ++c) { \
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

// The gradients of the keys and values: a warp per key, over its group's query heads in order
// and, for each, the tiles of queries that see it.
#define ATTENTION_BACKWARD_KV(name, T) \
    extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_backward_kv_##name( \
        const T* q, const T* k, const T* v, const T* dout, const typename Io<T>::C* lse, \
        const typename Io<T>::C* delta, T* dk, T* dv, u64 len, u64 head, u64 group, double scale, \
        int causal, u64 window, const u32* starts, u64 per_row, int dropout, double p, u64 seed) { \
        typedef typename Io<T>::C C; \
        __shared__ C queries[AttTile<C>::ROWS * ATT_HEAD_MAX]; \
        __shared__ C grads[AttTile<C>::ROWS * ATT_HEAD_MAX]; \
        const int lane = threadIdx.x % 32; \
        const u64 kv = blockIdx.y, base = kv * len * head; \
        const AttRows rows = att_rows(len); \
        const u64 key = rows.mine ? rows.row : 0; \
        C mine_k[ATT_PER_LANE], mine_v[ATT_PER_LANE], gk[ATT_PER_LANE], gv[ATT_PER_LANE]; \
        att_load_row(k + base + key * head, head, lane, mine_k); \
        att_load_row(v + base + key * head, head, lane, mine_v); \
        _Pragma("unroll") for (int f = 0; f < ATT_PER_LANE; ++f) gk[f] = gv[f] = 0; \
        const u64 start = causal ? rows.first : 0; \
        const u64 tile0 = start - start % AttTile<C>::ROWS; \
        /* One past the last query that sees the block's last key. */ \
        const u64 last = rows.first + ATT_WARPS < len ? rows.first + ATT_WARPS : len; \
        const u32* row_starts = att_row_starts(starts, kv * group, per_row, len); \
        const u64 by_window = causal && last - 1 + window < len ? last - 1 + window : len; \
        const u64 by_document = att_document_end(row_starts, last - 1, len); \
        const u64 end = by_window < by_document ? by_window : by_document; \
        /* One past the last query that sees this warp's key, by the window and its document: 32 \
           bits (the host refuses longer rows), which keeps the f64 kernel from spilling. */ \
        const u64 key_document_end = att_document_end(row_starts, key, len); \
        const u32 key_end = (u32)(key + window < key_document_end ? key + window : key_document_end); \
        for (u64 h = kv * group; h < (kv + 1) * group; ++h) { \
            const u64 q_base = h * len * head; \
            for (u64 q0 = tile0; q0 < end; q0 += AttTile<C>::ROWS) { \
                __syncthreads(); \
                att_load_tile(q + q_base, q0, len, head, queries); \
                att_load_tile(dout + q_base, q0, len, head, grads); \
                __syncthreads(); \
                if (!rows.mine) continue; \
                for (int r = 0; r < AttTile<C>::ROWS && q0 + r < end; ++r) { \
                    const u64 i = q0 + r; \
                    if (causal && (i < key || i >= key_end)) continue; \
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
        const typename Io<T>::C* delta, T* dq, u64 len, u64 head, u64 group, double scale, \
        int causal, u64 window, const u32* starts, u64 per_row, int dropout, double p, u64 seed) { \
        typedef typename Io<T>::C C; \
        __shared__ C keys[AttTile<C>::ROWS * ATT_HEAD_MAX]; \
        __shared__ C values[AttTile<C>::ROWS * ATT_HEAD_MAX]; \
        const int lane = threadIdx.x % 32; \
        const u64 h = blockIdx.y, base = h * len * head, kv_base = h / group * len * head; \
        const AttRows rows = att_rows(len); \
        const u64 i = rows.mine ? rows.row : 0; \
        C mine_q[ATT_PER_LANE], mine_g[ATT_PER_LANE], gq[ATT_PER_LANE]; \
        att_load_row(q + base + i * head, head, lane, mine_q); \
        att_load_row(dout + base + i * head, head, lane, mine_g); \
        _Pragma("unroll") for (int f = 0; f < ATT_PER_LANE; ++f) gq[f] = 0; \
        const C row_lse = lse[h * len + i], row_delta = delta[h * len + i]; \
        const u64 last = rows.first + ATT_WARPS < len ? rows.first + ATT_WARPS : len; \
        const u64 keys_seen = causal ? last : len; \
        const u32* row_starts = att_row_starts(starts, h, per_row, len); \
        const u64 keys_from = causal ? att_first_seen(rows.first, window, row_starts) : 0; \
        const u64 visible = causal ? i + 1 : len; \
        const u64 from = causal ? att_first_seen(i, window, row_starts) : 0; \
        for (u64 key0 = keys_from; key0 < keys_seen; key0 += AttTile<C>::ROWS) { \
            __syncthreads(); \
            att_load_tile(k + kv_base, key0, len, head, keys); \
            att_load_tile(v + kv_base, key0, len, head, values); \
            __syncthreads(); \
            if (!rows.mine) continue; \
            for (u64 c = from > key0 ? from - key0 : 0; c < AttTile<C>::ROWS && key0 + c < visible; ++c) { \
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

// ---------------------------------------------------------------------------------------------
// Tensor-core kernels for bf16 and f16 (compute capability 8.0 and later): the same algorithm,
// with every block product on the matrix units (mma.sync m16n8k16, f32 accumulation). A block
// holds MMA_ROWS rows of one head, 16 per warp; the other side's rows come through shared
// memory TILE at a time. Scores, weights and their gradients stay in the accumulators'
// registers, whose layout the PTX ISA fixes: lane (g, t) = (lane / 4, lane % 4) holds
//   A (16 x 16, row-major): (g, 2t..2t+1), (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..);
//   B (16 x 8, by columns): (k = 2t..2t+1, n = g), (k = 2t + 8.., n = g);
//   C (16 x 8): c0, c1 at (g, 2t..2t+1) and c2, c3 at (g + 8, 2t..2t+1),
// each pair of 16-bit values packed in a u32, the lower column (or k) in the low half. So a
// C tile pair is an A tile: the weights of one product feed the next without leaving registers.
// The other side's tiles are double-buffered: the next one is copied to shared memory
// (cp.async) while the block works on this one, and the fragments come out of it by ldmatrix,
// four 8 x 8 matrices a load. Only the tiles at the diagonal, at the window's start and past the end
// are masked.
// DP is the head rounded up to 64 (every GPT-2 size has heads of 64) or to 128 (Llama's);
// features past the head are zeros. The tiles live in dynamic shared memory: the forward pass
// of heads of 128 needs more than the 48 KiB a block gets without opting in.

#define MMA_ROWS 64
// Padding of a shared row, so that the lanes of a fragment load hit distinct banks.
#define MMA_PAD 8

// The block's dynamic shared memory (16-byte aligned), sized by the launch.
#if defined(HEADROOM_HOST_EMULATION)
__device__ __forceinline__ unsigned char* mma_shared() { return host_dynamic_shared(); }
#else
extern __shared__ __align__(16) unsigned char mma_shared_memory[];
__device__ __forceinline__ unsigned char* mma_shared() { return mma_shared_memory; }
#endif
// The other side's rows come TILE at a time (a template parameter: 64, or 32 and 16 in the
// backward pass of heads of 128, whose accumulators leave the registers no room for the scores
// of 64 rows), each tile TILE rows of DP + MMA_PAD elements in
// shared memory. The forward pass and the queries' gradients hold two tiles (double-buffered)
// of each of two operands; the keys' and values' gradients hold the same and, after them, two
// tiles of row statistics (2 x 2 x TILE floats). The host sizes the launch to match (`cuda.rs`).

// acc += a b for one 16 x 16 by 16 x 8 tile of T (bf16 or f16).
template <typename T>
__device__ __forceinline__ void mma_16816(float (&acc)[4], const u32 (&a)[4], const u32 (&b)[2]);

#define MMA_16816(T, PTX_TYPE) \
    template <> \
    __device__ __forceinline__ void mma_16816<T>(float (&acc)[4], const u32 (&a)[4], const u32 (&b)[2]) { \
        MMA_16816_BODY(T, PTX_TYPE) \
    }
#if defined(HEADROOM_HOST_EMULATION)
#define MMA_16816_BODY(T, PTX_TYPE) host_mma_16816(acc, a, b, PTX_TYPE[0] == 'b');
#elif __CUDA_ARCH__ >= 800
#define MMA_16816_BODY(T, PTX_TYPE) \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." PTX_TYPE "." PTX_TYPE ".f32 " \
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n" \
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]) \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
// Older devices run the warp kernels above; the host never launches these there.
#define MMA_16816_BODY(T, PTX_TYPE) __trap();
#endif
MMA_16816(bf16, "bf16")
MMA_16816(f16, "f16")

// Two values of T packed as the matrix units take them.
template <typename T> __device__ __forceinline__ u32 mma_pack(float lo, float hi) {
    return (u32)Io<T>::store(lo).bits | ((u32)Io<T>::store(hi).bits << 16);
}
template <typename T> __device__ __forceinline__ u32 mma_pack_bits(T lo, T hi) {
    return (u32)lo.bits | ((u32)hi.bits << 16);
}

// The matrix units' operands from shared memory (ldmatrix): four 8 x 8 matrices of 16-bit
// elements. Lane l gives the address of row l % 8 of matrix l / 8 (16-byte aligned) and
// receives in r[j] its pair of matrix j: row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1; or,
// with TRANS, column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1.
template <bool TRANS>
__device__ __forceinline__ void mma_ldsm_x4(u32 (&r)[4], const void* row) {
#if defined(HEADROOM_HOST_EMULATION)
    host_ldmatrix_x4(r, row, TRANS);
#elif __CUDA_ARCH__ >= 800
    const u32 at = (u32)__cvta_generic_to_shared(row);
    if (TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(at));
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(at));
    }
#else
    __trap();
#endif
}

// Copies BYTES (4 or 16) from global to shared memory without passing through registers, or
// writes zeros there where `valid` is false. The copies issued since the last
// mma_copy_commit form a group, and mma_copy_wait<N> waits until at most N groups are
// in flight.
template <int BYTES>
__device__ __forceinline__ void mma_copy_async(void* shared, const void* global, bool valid) {
#if defined(HEADROOM_HOST_EMULATION)
    if (valid) {
        std::memcpy(shared, global, BYTES);
    } else {
        std::memset(shared, 0, BYTES);
    }
#elif __CUDA_ARCH__ >= 800
    const u32 at = (u32)__cvta_generic_to_shared(shared);
    const int size = valid ? BYTES : 0;
    if (BYTES == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(at), "l"(global), "r"(size));
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(at), "l"(global), "r"(size));
    }
#else
    __trap();
#endif
}
__device__ __forceinline__ void mma_copy_commit() {
#if !defined(HEADROOM_HOST_EMULATION) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int PENDING> __device__ __forceinline__ void mma_copy_wait() {
#if !defined(HEADROOM_HOST_EMULATION) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
#endif
}

// Elements (row, f) and (row, f + 1) of a head's [len, head] rows in global memory, zeros
// outside it.
template <typename T>
__device__ __forceinline__ u32 mma_global_pair(const T* x, u64 row, u64 f, u64 len, u64 head) {
    T zero;
    zero.bits = 0;
    const T lo = row < len && f < head ? x[row * head + f] : zero;
    const T hi = row < len && f + 1 < head ? x[row * head + f + 1] : zero;
    return mma_pack_bits(lo, hi);
}

// The A fragments of rows first..first + 15 of a head's [len, head] rows (queries, keys, ...).
template <typename T, int DP>
__device__ __forceinline__ void mma_load_a(const T* x, u64 first, u64 len, u64 head, u32 (&a)[DP / 16][4]) {
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int kk = 0; kk < DP / 16; ++kk) {
        const u64 f = 16 * kk + 2 * t;
        a[kk][0] = mma_global_pair(x, first + g, f, len, head);
        a[kk][1] = mma_global_pair(x, first + g + 8, f, len, head);
        a[kk][2] = mma_global_pair(x, first + g, f + 8, len, head);
        a[kk][3] = mma_global_pair(x, first + g + 8, f + 8, len, head);
    }
}

// Starts loading rows first..first + TILE of a head's [len, head] rows into `tile` (rows
// of DP + MMA_PAD), zeros past the rows and the head. Heads of whole 16-byte units are copied
// asynchronously, in the caller's group; others pass through registers at once.
template <typename T, int DP, int TILE>
__device__ __forceinline__ void mma_load_tile(const T* x, u64 first, u64 len, u64 head, T* tile) {
    const int stride = DP + MMA_PAD;
    const int per_pack = 16 / sizeof(T);
    if (head % per_pack == 0) {
        for (int e = threadIdx.x; e < TILE * DP / per_pack; e += blockDim.x) {
            const int r = e / (DP / per_pack), f = e % (DP / per_pack) * per_pack;
            const bool valid = first + r < len && (u64)f < head;
            mma_copy_async<16>(tile + r * stride + f, valid ? x + (first + r) * head + f : x, valid);
        }
    } else {
        for (int e = threadIdx.x; e < TILE * DP; e += blockDim.x) {
            const int r = e / DP, f = e % DP;
            T value;
            value.bits = 0;
            if (first + r < len && (u64)f < head) value = x[(first + r) * head + f];
            tile[r * stride + f] = value;
        }
    }
}

// Starts loading rows first..first + TILE of two operands into their tiles, where first
// is before `end`, and closes the group of copies (an empty group past the last tile, so that
// every step waits the same way).
template <typename T, int DP, int TILE>
__device__ __forceinline__ void mma_prefetch_tiles(const T* a, const T* b, u64 first, u64 end, u64 len,
                                                   u64 head, T* a_tile, T* b_tile) {
    if (first < end) {
        mma_load_tile<T, DP, TILE>(a, first, len, head, a_tile);
        mma_load_tile<T, DP, TILE>(b, first, len, head, b_tile);
    }
    mma_copy_commit();
}

// s[n] (16 rows x 8 of the tile's rows n) = a . tile^T: each row of `a` against each row of
// `tile` over DP features. The tile's rows are the B operand's columns as they lie (ldmatrix).
template <typename T, int DP, int TILE>
__device__ __forceinline__ void mma_rows_by_tile(const u32 (&a)[DP / 16][4], const T* tile,
                                                 float (&s)[TILE / 8][4]) {
    const int lane = threadIdx.x % 32;
    const int stride = DP + MMA_PAD;
    // Matrix j of each load: tile rows 8 (j / 2).., features 8 (j % 2)..
    const T* mine = tile + (8 * (lane / 16) + lane % 8) * stride + 8 * (lane / 8 % 2);
#pragma unroll
    for (int n = 0; n < TILE / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int np = 0; np < TILE / 16; ++np) {
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
            u32 b[4];
            mma_ldsm_x4<false>(b, mine + 16 * np * stride + 16 * kk);
            const u32 first[2] = {b[0], b[1]}, second[2] = {b[2], b[3]};
            mma_16816<T>(s[2 * np], a[kk], first);
            mma_16816<T>(s[2 * np + 1], a[kk], second);
        }
    }
}

// acc (16 rows x DP) += w . tile, with w (16 rows x TILE, as C tiles) rounded to T. The
// tile's rows are the B operand's rows: ldmatrix transposes them.
template <typename T, int DP, int TILE>
__device__ __forceinline__ void mma_weights_by_tile(const float (&w)[TILE / 8][4], const T* tile,
                                                    float (&acc)[DP / 8][4]) {
    const int lane = threadIdx.x % 32;
    const int stride = DP + MMA_PAD;
    // Matrix j of each load: tile rows 8 (j % 2).., features 8 (j / 2)..
    const T* mine = tile + (8 * (lane / 8 % 2) + lane % 8) * stride + 8 * (lane / 16);
#pragma unroll
    for (int kc = 0; kc < TILE / 16; ++kc) {
        const u32 a[4] = {
            mma_pack<T>(w[2 * kc][0], w[2 * kc][1]),
            mma_pack<T>(w[2 * kc][2], w[2 * kc][3]),
            mma_pack<T>(w[2 * kc + 1][0], w[2 * kc + 1][1]),
            mma_pack<T>(w[2 * kc + 1][2], w[2 * kc + 1][3]),
        };
#pragma unroll
        for (int ndp = 0; ndp < DP / 16; ++ndp) {
            u32 b[4];
            mma_ldsm_x4<true>(b, mine + 16 * kc * stride + 16 * ndp);
            const u32 first[2] = {b[0], b[1]}, second[2] = {b[2], b[3]};
            mma_16816<T>(acc[2 * ndp], a, first);
            mma_16816<T>(acc[2 * ndp + 1], a, second);
        }
    }
}

// Sets s[n] (rows row0 + g and + 8 by columns col0 + 8 n + 2 t and + 1) to -infinity where the
// pair is hidden: a query or key past len or, when causal, a key after its query or window
// keys or more before it. The rows are queries, or keys where ROWS_ARE_KEYS. Only tiles at
// the edges call it.
template <bool ROWS_ARE_KEYS, int TILE>
__device__ __forceinline__ void mma_mask(float (&s)[TILE / 8][4], u64 row0, u64 col0, u64 len, int causal,
                                         u64 window, const u32* starts) {
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    // With queries as rows, a lane's elements hold two queries: their documents' starts read once.
    u64 row_start[2] = {0, 0};
    if (!ROWS_ARE_KEYS && starts) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const u64 row = row0 + g + 8 * r;
            row_start[r] = row < len ? starts[row] : 0;
        }
    }
#pragma unroll
    for (int n = 0; n < TILE / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const u64 row = row0 + g + 8 * (e / 2), col = col0 + 8 * n + 2 * t + e % 2;
            const u64 query = ROWS_ARE_KEYS ? col : row, key = ROWS_ARE_KEYS ? row : col;
            const bool other_document =
                starts && (ROWS_ARE_KEYS ? query < len && starts[query] > key : row_start[e / 2] > key);
            const bool hidden = query >= len || key >= len || (causal && (key > query || key + window <= query)) ||
                                other_document;
            if (hidden) s[n][e] = neg_infinity<float>();
        }
    }
}

// Multiplies s[n] (laid out as mma_mask's) by the dropout factors of its pairs.
template <bool ROWS_ARE_KEYS, int TILE>
__device__ __forceinline__ void mma_dropout(float (&s)[TILE / 8][4], u64 row0, u64 col0, u64 h, u64 len,
                                            double p, u64 seed) {
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int n = 0; n < TILE / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const u64 row = row0 + g + 8 * (e / 2), col = col0 + 8 * n + 2 * t + e % 2;
            const u64 query = ROWS_ARE_KEYS ? col : row, key = ROWS_ARE_KEYS ? row : col;
            s[n][e] *= att_keep<float>(1, p, seed, h, len, query, key);
        }
    }
}

// Whether rows row0..row0 + 15 against columns col0..col0 + TILE - 1 (queries against
// keys, or keys against queries where ROWS_ARE_KEYS) may hold a hidden pair: past len, above
// the diagonal or before the window.
template <bool ROWS_ARE_KEYS, int TILE>
__device__ __forceinline__ bool mma_edge(u64 row0, u64 col0, u64 len, int causal, u64 window,
                                         const u32* starts) {
    if (row0 + 16 > len || col0 + TILE > len) return true;
    if (!causal) return false;
    const u64 first_query = ROWS_ARE_KEYS ? col0 : row0, last_query = ROWS_ARE_KEYS ? col0 + TILE - 1 : row0 + 15;
    const u64 first_key = ROWS_ARE_KEYS ? row0 : col0, last_key = ROWS_ARE_KEYS ? row0 + 15 : col0 + TILE - 1;
    // The latest key against the earliest query, and the earliest key against the latest (and
    // against the latest query's document, whose start is the largest).
    return last_key > first_query || first_key + window <= last_query || (starts && starts[last_query] > first_key);
}

// The sum of `v` over the four lanes that hold one row of a C tile.
__device__ __forceinline__ float mma_row_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float mma_row_max(float v) {
    v = m_max(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return m_max(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// Where a block and its warp stand: lane (g, t), head h (of the grid's y) and its operands'
// offset, the offset of the key/value head it reads (h / group), the block's first row and this
// warp's.
struct MmaRows {
    int g, t;
    u64 h, base, kv_base, block0, first;
};
__device__ __forceinline__ MmaRows mma_rows(u64 len, u64 head, u64 group) {
    MmaRows at;
    at.g = threadIdx.x % 32 / 4;
    at.t = threadIdx.x % 4;
    at.h = blockIdx.y;
    at.base = at.h * len * head;
    at.kv_base = at.h / group * len * head;
    at.block0 = (u64)blockIdx.x * MMA_ROWS;
    at.first = at.block0 + threadIdx.x / 32 * 16;
    return at;
}

// Writes acc (rows first..first + 15 of DP features) to a head's [len, head] rows, times
// factor[r] for the rows g (r = 0) and g + 8 (r = 1).
template <typename T, int DP>
__device__ __forceinline__ void mma_store_rows(const float (&acc)[DP / 8][4], const float (&factor)[2],
                                               T* x, u64 first, u64 len, u64 head) {
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const u64 row = first + g + 8 * r;
        if (row >= len) continue;
#pragma unroll
        for (int nd = 0; nd < DP / 8; ++nd) {
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const u64 f = nd * 8 + 2 * t + c;
                if (f < head) x[row * head + f] = Io<T>::store(acc[nd][2 * r + c] * factor[r]);
            }
        }
    }
}

// The kernels exponentiate in base 2 (exp2f): scores are scaled by log2(e) once.
#define MMA_LOG2E 1.4426950408889634
#define MMA_LN2 0.6931471805599453

// The forward pass: out and the log-sum-exp of MMA_ROWS queries of one head. The tiles of keys
// and values are double-buffered: the next pair loads while the block works on this one.
template <typename T, int DP, int TILE>
__device__ __forceinline__ void attention_mma(const T* q, const T* k, const T* v, T* out, float* lse,
                                              u64 len, u64 head, u64 group, double scale, int causal,
                                              u64 window, const u32* starts, u64 per_row, int dropout, double p,
                                              u64 seed) {
    const int tile_size = TILE * (DP + MMA_PAD);
    T* const keys = (T*)mma_shared();
    T* const values = keys + 2 * tile_size;
    const MmaRows at = mma_rows(len, head, group);
    const int g = at.g, t = at.t;
    const u64 h = at.h, base = at.base, block0 = at.block0, first = at.first;
    k += at.kv_base;
    v += at.kv_base;
    u32 query[DP / 16][4];
    mma_load_a<T, DP>(q + base, first, len, head, query);
    float acc[DP / 8][4], most[2] = {neg_infinity<float>(), neg_infinity<float>()}, sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nd = 0; nd < DP / 8; ++nd) acc[nd][0] = acc[nd][1] = acc[nd][2] = acc[nd][3] = 0.0f;
    const float scale2 = (float)(scale * MMA_LOG2E);
    const u64 block_end = block0 + MMA_ROWS < len ? block0 + MMA_ROWS : len;
    const u64 keys_seen = causal ? block_end : len;
    // The block's first query sees keys from here, and its warp's from `warp_from`.
    const u32* row_starts = att_row_starts(starts, h, per_row, len);
    const u64 keys_from = causal ? att_first_seen(block0, window, row_starts) : 0;
    const u64 warp_from = first < len ? att_first_seen(first, window, row_starts) : keys_from;
    mma_prefetch_tiles<T, DP, TILE>(k, v, keys_from, keys_seen, len, head, keys, values);
    int now = 0;
    for (u64 key0 = keys_from; key0 < keys_seen; key0 += TILE, now ^= 1) {
        mma_prefetch_tiles<T, DP, TILE>(k, v, key0 + TILE, keys_seen, len, head, keys + (now ^ 1) * tile_size,
                                        values + (now ^ 1) * tile_size);
        mma_copy_wait<1>();
        __syncthreads();
        // A tile wholly after this warp's rows, or wholly before their window, has nothing for it.
        if (!causal || (key0 <= first + 15 && key0 + TILE > warp_from)) {
            float s[TILE / 8][4];
            mma_rows_by_tile<T, DP, TILE>(query, keys + now * tile_size, s);
#pragma unroll
            for (int n = 0; n < TILE / 8; ++n) {
#pragma unroll
                for (int e = 0; e < 4; ++e) s[n][e] *= scale2;
            }
            if (mma_edge<false, TILE>(first, key0, len, causal, window, row_starts))
                mma_mask<false, TILE>(s, first, key0, len, causal, window, row_starts);
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float tile_most = neg_infinity<float>();
#pragma unroll
                for (int n = 0; n < TILE / 8; ++n) tile_most = m_max(tile_most, m_max(s[n][2 * r], s[n][2 * r + 1]));
                const float new_most = m_max(most[r], mma_row_max(tile_most));
                // A row that has seen no key yet keeps a sum of 0 whatever its reference.
                const float ref = new_most == neg_infinity<float>() ? 0.0f : new_most;
                const float rescale = exp2f(most[r] - ref);
                float tile_sum = 0.0f;
#pragma unroll
                for (int n = 0; n < TILE / 8; ++n) {
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const float w = exp2f(s[n][2 * r + c] - ref);
                        tile_sum += w;
                        s[n][2 * r + c] = w;
                    }
                }
                sum[r] = sum[r] * rescale + mma_row_sum(tile_sum);
                most[r] = new_most;
#pragma unroll
                for (int nd = 0; nd < DP / 8; ++nd) {
                    acc[nd][2 * r] *= rescale;
                    acc[nd][2 * r + 1] *= rescale;
                }
            }
            if (dropout) mma_dropout<false, TILE>(s, first, key0, h, len, p, seed);
            mma_weights_by_tile<T, DP, TILE>(s, values + now * tile_size, acc);
        }
        __syncthreads();
    }
    const float inverse[2] = {1.0f / sum[0], 1.0f / sum[1]};
    mma_store_rows<T, DP>(acc, inverse, out + base, first, len, head);
    if (t == 0) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const u64 row = first + g + 8 * r;
            if (row < len) lse[h * len + row] = most[r] * (float)MMA_LN2 + m_log(sum[r]);
        }
    }
}

// The gradients of MMA_ROWS queries of one head, over the tiles of keys they see.
template <typename T, int DP, int TILE>
__device__ __forceinline__ void attention_backward_q_mma(const T* q, const T* k, const T* v, const T* dout,
                                                         const float* lse, const float* delta, T* dq,
                                                         u64 len, u64 head, u64 group, double scale,
                                                         int causal, u64 window, const u32* starts, u64 per_row,
                                                         int dropout, double p, u64 seed) {
    const int tile_size = TILE * (DP + MMA_PAD);
    T* const keys = (T*)mma_shared();
    T* const values = keys + 2 * tile_size;
    const MmaRows at = mma_rows(len, head, group);
    const int g = at.g;
    const u64 h = at.h, base = at.base, block0 = at.block0, first = at.first;
    k += at.kv_base;
    v += at.kv_base;
    u32 query[DP / 16][4], grad[DP / 16][4];
    mma_load_a<T, DP>(q + base, first, len, head, query);
    mma_load_a<T, DP>(dout + base, first, len, head, grad);
    const float scale2 = (float)(scale * MMA_LOG2E);
    float row_lse2[2], row_delta[2], acc[DP / 8][4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const u64 row = first + g + 8 * r;
        row_lse2[r] = row < len ? lse[h * len + row] * (float)MMA_LOG2E : 0.0f;
        row_delta[r] = row < len ? delta[h * len + row] : 0.0f;
    }
#pragma unroll
    for (int nd = 0; nd < DP / 8; ++nd) acc[nd][0] = acc[nd][1] = acc[nd][2] = acc[nd][3] = 0.0f;
    const u64 block_end = block0 + MMA_ROWS < len ? block0 + MMA_ROWS : len;
    const u64 keys_seen = causal ? block_end : len;
    // The block's first query sees keys from here, and its warp's from `warp_from`.
    const u32* row_starts = att_row_starts(starts, h, per_row, len);
    const u64 keys_from = causal ? att_first_seen(block0, window, row_starts) : 0;
    const u64 warp_from = first < len ? att_first_seen(first, window, row_starts) : keys_from;
    mma_prefetch_tiles<T, DP, TILE>(k, v, keys_from, keys_seen, len, head, keys, values);
    int now = 0;
    for (u64 key0 = keys_from; key0 < keys_seen; key0 += TILE, now ^= 1) {
        mma_prefetch_tiles<T, DP, TILE>(k, v, key0 + TILE, keys_seen, len, head, keys + (now ^ 1) * tile_size,
                                        values + (now ^ 1) * tile_size);
        mma_copy_wait<1>();
        __syncthreads();
        if (!causal || (key0 <= first + 15 && key0 + TILE > warp_from)) {
            float s[TILE / 8][4], dp[TILE / 8][4];
            mma_rows_by_tile<T, DP, TILE>(query, keys + now * tile_size, s);
            mma_rows_by_tile<T, DP, TILE>(grad, values + now * tile_size, dp);
#pragma unroll
            for (int n = 0; n < TILE / 8; ++n) {
#pragma unroll
                for (int e = 0; e < 4; ++e) s[n][e] = s[n][e] * scale2 - row_lse2[e / 2];
            }
            if (mma_edge<false, TILE>(first, key0, len, causal, window, row_starts))
                mma_mask<false, TILE>(s, first, key0, len, causal, window, row_starts);
            if (dropout) mma_dropout<false, TILE>(dp, first, key0, h, len, p, seed);
#pragma unroll
            for (int n = 0; n < TILE / 8; ++n) {
#pragma unroll
                for (int e = 0; e < 4; ++e) s[n][e] = exp2f(s[n][e]) * (dp[n][e] - row_delta[e / 2]) * (float)scale;
            }
            mma_weights_by_tile<T, DP, TILE>(s, keys + now * tile_size, acc);
        }
        __syncthreads();
    }
    const float one[2] = {1.0f, 1.0f};
    mma_store_rows<T, DP>(acc, one, dq + base, first, len, head);
}

// Starts loading the log-sum-exp and delta of queries first..first + TILE of a head (zeros
// past len) into the block's row statistics, in the caller's group of copies, where first is
// before `end`.
template <int TILE>
__device__ __forceinline__ void mma_load_row_stats(const float* lse, const float* delta, u64 first, u64 end,
                                                   u64 len, float* lse_tile, float* delta_tile) {
    if (first >= end) return;
    for (int e = threadIdx.x; e < 2 * TILE; e += blockDim.x) {
        const int i = e % TILE;
        const bool valid = first + i < len;
        const float* from = e < TILE ? lse : delta;
        float* to = e < TILE ? lse_tile : delta_tile;
        mma_copy_async<4>(to + i, valid ? from + first + i : from, valid);
    }
}

// The gradients of MMA_ROWS keys and values of one key/value head, over its group's query heads
// in order and, for each, the tiles of queries that see them.
template <typename T, int DP, int TILE>
__device__ __forceinline__ void attention_backward_kv_mma(const T* q, const T* k, const T* v, const T* dout,
                                                          const float* lse, const float* delta, T* dk, T* dv,
                                                          u64 len, u64 head, u64 group, double scale,
                                                          int causal, u64 window, const u32* starts, u64 per_row,
                                                          int dropout, double p, u64 seed) {
    const int tile_size = TILE * (DP + MMA_PAD);
    T* const queries = (T*)mma_shared();
    T* const grads = queries + 2 * tile_size;
    float* const tile_lse = (float*)(grads + 2 * tile_size);
    float* const tile_delta = tile_lse + 2 * TILE;
    // The grid's y is the key/value head here.
    const MmaRows at = mma_rows(len, head, 1);
    const int t = at.t;
    const u64 kv = at.h, base = at.base, block0 = at.block0, first = at.first;
    u32 key_rows[DP / 16][4], value_rows[DP / 16][4];
    mma_load_a<T, DP>(k + base, first, len, head, key_rows);
    mma_load_a<T, DP>(v + base, first, len, head, value_rows);
    float gk[DP / 8][4], gv[DP / 8][4];
#pragma unroll
    for (int nd = 0; nd < DP / 8; ++nd) {
        gk[nd][0] = gk[nd][1] = gk[nd][2] = gk[nd][3] = 0.0f;
        gv[nd][0] = gv[nd][1] = gv[nd][2] = gv[nd][3] = 0.0f;
    }
    const float scale2 = (float)(scale * MMA_LOG2E);
    // The queries that see the block's keys: from its first key to the last that sees its last.
    const u64 block_end = block0 + MMA_ROWS < len ? block0 + MMA_ROWS : len;
    const u64 q_begin = causal ? block0 : 0;
    const u64 by_window = causal && block_end - 1 + window < len ? block_end - 1 + window : len;
    const u32* row_starts = att_row_starts(starts, kv * group, per_row, len);
    const u64 by_document = att_document_end(row_starts, block_end - 1, len);
    const u64 q_end = by_window < by_document ? by_window : by_document;
    for (u64 h = kv * group; h < (kv + 1) * group; ++h) {
        const T* head_q = q + h * len * head;
        const T* head_dout = dout + h * len * head;
        const float* head_lse = lse + h * len;
        const float* head_delta = delta + h * len;
        mma_load_row_stats<TILE>(head_lse, head_delta, q_begin, q_end, len, tile_lse, tile_delta);
        mma_prefetch_tiles<T, DP, TILE>(head_q, head_dout, q_begin, q_end, len, head, queries, grads);
        int now = 0;
        for (u64 q0 = q_begin; q0 < q_end; q0 += TILE, now ^= 1) {
            mma_load_row_stats<TILE>(head_lse, head_delta, q0 + TILE, q_end, len, tile_lse + (now ^ 1) * TILE,
                                     tile_delta + (now ^ 1) * TILE);
            mma_prefetch_tiles<T, DP, TILE>(head_q, head_dout, q0 + TILE, q_end, len, head,
                                            queries + (now ^ 1) * tile_size, grads + (now ^ 1) * tile_size);
            mma_copy_wait<1>();
            __syncthreads();
            // A tile whose queries all come before these keys, or all past their window, has
            // nothing for them.
            if (!causal || (q0 + TILE > first && q0 < first + 15 + window)) {
                float s[TILE / 8][4], dp[TILE / 8][4];
                mma_rows_by_tile<T, DP, TILE>(key_rows, queries + now * tile_size, s);
                mma_rows_by_tile<T, DP, TILE>(value_rows, grads + now * tile_size, dp);
#pragma unroll
                for (int n = 0; n < TILE / 8; ++n) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int col = n * 8 + 2 * t + e % 2;
                        s[n][e] = s[n][e] * scale2 - tile_lse[now * TILE + col] * (float)MMA_LOG2E;
                    }
                }
                if (mma_edge<true, TILE>(first, q0, len, causal, window, row_starts))
                    mma_mask<true, TILE>(s, first, q0, len, causal, window, row_starts);
                if (dropout) mma_dropout<true, TILE>(dp, first, q0, h, len, p, seed);
#pragma unroll
                for (int n = 0; n < TILE / 8; ++n) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int col = n * 8 + 2 * t + e % 2;
                        const float w = exp2f(s[n][e]);
                        s[n][e] = w;
                        dp[n][e] = w * (dp[n][e] - tile_delta[now * TILE + col]) * (float)scale;
                    }
                }
                if (dropout) mma_dropout<true, TILE>(s, first, q0, h, len, p, seed);
                mma_weights_by_tile<T, DP, TILE>(s, grads + now * tile_size, gv);
                mma_weights_by_tile<T, DP, TILE>(dp, queries + now * tile_size, gk);
            }
            __syncthreads();
        }
    }
    const float one[2] = {1.0f, 1.0f};
    mma_store_rows<T, DP>(gk, one, dk + base, first, len, head);
    mma_store_rows<T, DP>(gv, one, dv + base, first, len, head);
}

// The kernels of heads of up to DP features, with tiles of FORWARD_TILE, Q_TILE and KV_TILE rows
// (`cuda.rs` sizes their shared memory alike).
#define ATTENTION_MMA(name, T, DP, FORWARD_TILE, Q_TILE, KV_TILE) \
    extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_mma##DP##_##name( \
        const T* q, const T* k, const T* v, T* out, float* lse, u64 len, u64 head, u64 group, \
        double scale, int causal, u64 window, const u32* starts, u64 per_row, int dropout, double p, u64 seed) { \
        attention_mma<T, DP, FORWARD_TILE>(q, k, v, out, lse, len, head, group, scale, causal, window, starts, per_row, \
                                           dropout, p, seed); \
    } \
    extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_backward_q_mma##DP##_##name( \
        const T* q, const T* k, const T* v, const T* dout, const float* lse, const float* delta, T* dq, \
        u64 len, u64 head, u64 group, double scale, int causal, u64 window, const u32* starts, u64 per_row, \
        int dropout, double p, u64 seed) { \
        attention_backward_q_mma<T, DP, Q_TILE>(q, k, v, dout, lse, delta, dq, len, head, group, scale, causal, \
                                                window, starts, per_row, dropout, p, seed); \
    } \
    extern "C" __global__ void __launch_bounds__(ATT_THREADS) attention_backward_kv_mma##DP##_##name( \
        const T* q, const T* k, const T* v, const T* dout, const float* lse, const float* delta, T* dk, \
        T* dv, u64 len, u64 head, u64 group, double scale, int causal, u64 window, const u32* starts, u64 per_row, \
        int dropout, double p, u64 seed) { \
        attention_backward_kv_mma<T, DP, KV_TILE>(q, k, v, dout, lse, delta, dk, dv, len, head, group, scale, \
                                                  causal, window, starts, per_row, dropout, p, seed); \
    }
ATTENTION_MMA(bf16, bf16, 64, 64, 64, 64)
ATTENTION_MMA(f16, f16, 64, 64, 64, 64)
ATTENTION_MMA(bf16, bf16, 128, 64, 32, 16)
ATTENTION_MMA(f16, f16, 128, 64, 32, 16)
