// Reductions of [outer, axis, inner] over the middle axis. Sums accumulate in f64 and every
// combine happens in a fixed order (no atomics), so results are the same from run to run.

// The ops' codes: the Rust side reads them from this enum (cuda/enum_codes.rs), so they are
// numbered here alone. Bare enumerators only, no initializers or comments inside the braces.
enum Reduce { R_SUM, R_MEAN, R_MAX, R_SUM_SQUARES };

struct Acc {
    double sum;
    double max;
};

template <typename T>
__device__ __forceinline__ void accumulate(Acc& acc, int op, T value) {
    const double v = Io<T>::load(value);
    if (op == R_MAX) acc.max = m_max(acc.max, v);
    else acc.sum += op == R_SUM_SQUARES ? v * v : v;
}

template <typename T>
__device__ __forceinline__ T finish(const Acc& acc, int op, u64 axis) {
    typedef typename Io<T>::C C;
    if (op == R_MAX) return Io<T>::store((C)acc.max);
    return Io<T>::store((C)(op == R_MEAN ? acc.sum / (double)axis : acc.sum));
}

// inner == 1: a block of 256 threads per output, striding along the contiguous axis.
template <typename T>
__device__ void reduce_rows(int op, const T* x, T* out, u64 outer, u64 axis) {
    __shared__ double scratch[32];
    for (u64 o = blockIdx.x; o < outer; o += gridDim.x) {
        Acc acc = {0.0, -1.0 / 0.0};
        for (u64 a = threadIdx.x; a < axis; a += blockDim.x) accumulate(acc, op, x[o * axis + a]);
        acc.sum = group_reduce<256>(acc.sum, SumOp(), scratch);
        acc.max = group_reduce<256>(acc.max, MaxOp(), scratch);
        if (threadIdx.x == 0) out[o] = finish<T>(acc, op, axis);
    }
}

// inner == 1, a few long rows: `parts` blocks per row each reduce a slice of it into a partial
// (sum, max) in `partial`, [outer, parts, 2] f64 values.
template <typename T>
__device__ void reduce_rows_partial(int op, const T* x, double* partial, u64 outer, u64 axis, u64 parts) {
    __shared__ double scratch[32];
    const u64 per = (axis + parts - 1) / parts;
    for (u64 b = blockIdx.x; b < outer * parts; b += gridDim.x) {
        const u64 o = b / parts, start = b % parts * per;
        const u64 end = start + per < axis ? start + per : axis;
        Acc acc = {0.0, -1.0 / 0.0};
        for (u64 a = start + threadIdx.x; a < end; a += blockDim.x) accumulate(acc, op, x[o * axis + a]);
        acc.sum = group_reduce<256>(acc.sum, SumOp(), scratch);
        acc.max = group_reduce<256>(acc.max, MaxOp(), scratch);
        if (threadIdx.x == 0) {
            partial[2 * b] = acc.sum;
            partial[2 * b + 1] = acc.max;
        }
    }
}

// The second pass: a block per row combines its parts' partials in order.
template <typename T>
__device__ void reduce_rows_finish(int op, const double* partial, T* out, u64 outer, u64 axis, u64 parts) {
    __shared__ double scratch[32];
    for (u64 o = blockIdx.x; o < outer; o += gridDim.x) {
        Acc acc = {0.0, -1.0 / 0.0};
        for (u64 p = threadIdx.x; p < parts; p += blockDim.x) {
            acc.sum += partial[2 * (o * parts + p)];
            acc.max = m_max(acc.max, partial[2 * (o * parts + p) + 1]);
        }
        acc.sum = group_reduce<256>(acc.sum, SumOp(), scratch);
        acc.max = group_reduce<256>(acc.max, MaxOp(), scratch);
        if (threadIdx.x == 0) out[o] = finish<T>(acc, op, axis);
    }
}

// Positions start..end of column j of outer index o, over the block's 8 rows of threads, into
// acc; true on the thread (y == 0) that then holds the column's result. Every thread of the
// block calls it.
template <typename T>
__device__ __forceinline__ bool column_slice(Acc& acc, int op, const T* x, u64 o, u64 start, u64 end, u64 axis,
                                             u64 inner, u64 j, double (*sums)[33], double (*maxes)[33]) {
    acc = {0.0, -1.0 / 0.0};
    if (j < inner)
        for (u64 a = start + threadIdx.y; a < end; a += 8) accumulate(acc, op, x[(o * axis + a) * inner + j]);
    sums[threadIdx.y][threadIdx.x] = acc.sum;
    maxes[threadIdx.y][threadIdx.x] = acc.max;
    __syncthreads();
    const bool holds = threadIdx.y == 0 && j < inner;
    if (holds) {
        for (int y = 1; y < 8; ++y) {
            acc.sum += sums[y][threadIdx.x];
            acc.max = m_max(acc.max, maxes[y][threadIdx.x]);
        }
    }
    return holds;
}

// inner > 1: blocks of 32 x 8 threads; the 32 take neighbouring inner positions (coalesced),
// the 8 split the axis, and one thread combines their 8 partial results in order.
template <typename T>
__device__ void reduce_columns(int op, const T* x, T* out, u64 outer, u64 axis, u64 inner) {
    __shared__ double sums[8][33];
    __shared__ double maxes[8][33];
    const u64 column_blocks = (inner + 31) / 32;
    for (u64 b = blockIdx.x; b < outer * column_blocks; b += gridDim.x) {
        const u64 o = b / column_blocks, j = (b % column_blocks) * 32 + threadIdx.x;
        Acc acc;
        if (column_slice(acc, op, x, o, 0, axis, axis, inner, j, sums, maxes))
            out[o * inner + j] = finish<T>(acc, op, axis);
        __syncthreads();
    }
}

// inner > 1, few blocks of columns over a long axis: `parts` blocks per 32 columns each reduce a
// slice of the axis into a partial (sum, max) in `partial`, [outer, parts, inner, 2] f64 values.
template <typename T>
__device__ void reduce_columns_partial(int op, const T* x, double* partial, u64 outer, u64 axis, u64 inner,
                                       u64 parts) {
    __shared__ double sums[8][33];
    __shared__ double maxes[8][33];
    const u64 column_blocks = (inner + 31) / 32, per = (axis + parts - 1) / parts;
    for (u64 b = blockIdx.x; b < outer * parts * column_blocks; b += gridDim.x) {
        const u64 slice = b / column_blocks, o = slice / parts, start = slice % parts * per;
        const u64 end = start + per < axis ? start + per : axis;
        const u64 j = (b % column_blocks) * 32 + threadIdx.x;
        Acc acc;
        if (column_slice(acc, op, x, o, start, end, axis, inner, j, sums, maxes)) {
            partial[2 * (slice * inner + j)] = acc.sum;
            partial[2 * (slice * inner + j) + 1] = acc.max;
        }
        __syncthreads();
    }
}

// The second pass: a thread per output combines its parts' partials in order.
template <typename T>
__device__ void reduce_columns_finish(int op, const double* partial, T* out, u64 outer, u64 axis, u64 inner,
                                      u64 parts) {
    for (u64 i = thread_index(); i < outer * inner; i += grid_stride()) {
        const u64 o = i / inner, j = i % inner;
        Acc acc = {0.0, -1.0 / 0.0};
        for (u64 p = 0; p < parts; ++p) {
            acc.sum += partial[2 * ((o * parts + p) * inner + j)];
            acc.max = m_max(acc.max, partial[2 * ((o * parts + p) * inner + j) + 1]);
        }
        out[i] = finish<T>(acc, op, axis);
    }
}

#define REDUCE(name, T) \
    extern "C" __global__ void reduce_rows_##name(int op, const T* x, T* out, u64 outer, u64 axis) { \
        reduce_rows<T>(op, x, out, outer, axis); \
    } \
    extern "C" __global__ void reduce_rows_partial_##name(int op, const T* x, double* partial, u64 outer, \
                                                          u64 axis, u64 parts) { \
        reduce_rows_partial<T>(op, x, partial, outer, axis, parts); \
    } \
    extern "C" __global__ void reduce_rows_finish_##name(int op, const double* partial, T* out, u64 outer, \
                                                         u64 axis, u64 parts) { \
        reduce_rows_finish<T>(op, partial, out, outer, axis, parts); \
    } \
    extern "C" __global__ void reduce_columns_##name(int op, const T* x, T* out, u64 outer, u64 axis, \
                                                     u64 inner) { \
        reduce_columns<T>(op, x, out, outer, axis, inner); \
    } \
    extern "C" __global__ void reduce_columns_partial_##name(int op, const T* x, double* partial, u64 outer, \
                                                             u64 axis, u64 inner, u64 parts) { \
        reduce_columns_partial<T>(op, x, partial, outer, axis, inner, parts); \
    } \
    extern "C" __global__ void reduce_columns_finish_##name(int op, const double* partial, T* out, u64 outer, \
                                                            u64 axis, u64 inner, u64 parts) { \
        reduce_columns_finish<T>(op, partial, out, outer, axis, inner, parts); \
    }
FOR_FLOATS(REDUCE)
