// Shared by every kernel family (prepended to each .cu file before NVRTC compiles it): storage
// types, their loads and stores in compute precision, math overloads, and deterministic
// reductions within a group of threads.

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned char u8;
typedef unsigned short u16;

// The half types travel as their bits; arithmetic happens in f32.
struct f16 { u16 bits; };
struct bf16 { u16 bits; };

// Host builds (tools/cuda-emulator) have no PTX; they convert in software, rounding alike.
__device__ __forceinline__ float f16_to_f32(u16 h) {
#ifdef HEADROOM_HOST_EMULATION
    return host_f16_to_f32(h);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#endif
}

__device__ __forceinline__ u16 f32_to_f16(float f) {
#ifdef HEADROOM_HOST_EMULATION
    return host_f32_to_f16(f);
#else
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#endif
}

__device__ __forceinline__ float bf16_to_f32(u16 b) {
    return __uint_as_float(((u32)b) << 16);
}

// Round to nearest even; a NaN stays a (quiet) NaN.
__device__ __forceinline__ u16 f32_to_bf16(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}

// Io<T>: the compute type C of a storage type T, and the conversions between them.
template <typename T> struct Io;
template <> struct Io<float> {
    typedef float C;
    static __device__ __forceinline__ float load(float v) { return v; }
    static __device__ __forceinline__ float store(float v) { return v; }
};
template <> struct Io<double> {
    typedef double C;
    static __device__ __forceinline__ double load(double v) { return v; }
    static __device__ __forceinline__ double store(double v) { return v; }
};
template <> struct Io<f16> {
    typedef float C;
    static __device__ __forceinline__ float load(f16 v) { return f16_to_f32(v.bits); }
    static __device__ __forceinline__ f16 store(float v) { f16 r; r.bits = f32_to_f16(v); return r; }
};
template <> struct Io<bf16> {
    typedef float C;
    static __device__ __forceinline__ float load(bf16 v) { return bf16_to_f32(v.bits); }
    static __device__ __forceinline__ bf16 store(float v) { bf16 r; r.bits = f32_to_bf16(v); return r; }
};

// Math in either compute precision.
__device__ __forceinline__ float m_exp(float x) { return expf(x); }
__device__ __forceinline__ double m_exp(double x) { return exp(x); }
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return log(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double m_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float m_pow(float x, float p) { return powf(x, p); }
__device__ __forceinline__ double m_pow(double x, double p) { return pow(x, p); }
// The larger of two, NaN winning as on the CPU (fmax would drop it).
__device__ __forceinline__ float m_max(float a, float b) { return a != a || a > b ? a : b; }
__device__ __forceinline__ double m_max(double a, double b) { return a != a || a > b ? a : b; }
template <typename C> __device__ __forceinline__ C neg_infinity() { return (C)(-1.0 / 0.0); }

// 64 random bits that are a pure function of (seed, index), the same as the host's
// (`ops::random::kernels::random_bits`): dropout masks are drawn from them again instead of being
// stored, and narrow optimizer state is rounded with them.
__device__ __forceinline__ u64 random_bits(u64 seed, u64 index) {
    u64 z = seed ^ (index * 0x9E3779B97F4A7C15ull);
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A uniform number in [0, 1) from `random_bits`, the same as the host's (`uniform`).
__device__ __forceinline__ double uniform(u64 seed, u64 index) {
    return (double)(random_bits(seed, index) >> 11) / 9007199254740992.0;
}

// The first element this thread handles and the step of a grid-stride loop.
__device__ __forceinline__ u64 thread_index() { return (u64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ u64 grid_stride() { return (u64)gridDim.x * blockDim.x; }

// Sixteen bytes of elements, for vectorised loads and stores (buffers are 256-byte aligned).
template <typename T> struct __align__(16) Pack { T v[16 / sizeof(T)]; };

// The most dimensions a strided kernel walks, and one operand's walk through them.
#define MAX_DIMS 8
struct Walk {
    u64 dims[MAX_DIMS];
    u64 strides[MAX_DIMS];
    u32 rank;
};

// The offset of contiguous element `index` of a `walk.dims` array in an operand with
// `walk.strides`.
__device__ __forceinline__ u64 walk_offset(const Walk& walk, const u64* strides, u64 index) {
    u64 offset = 0;
    for (int axis = (int)walk.rank - 1; axis >= 0; --axis) {
        u64 i = index % walk.dims[axis];
        index /= walk.dims[axis];
        offset += i * strides[axis];
    }
    return offset;
}

struct SumOp { template <typename C> __device__ __forceinline__ C operator()(C a, C b) const { return a + b; } };
struct MaxOp { template <typename C> __device__ __forceinline__ C operator()(C a, C b) const { return m_max(a, b); } };

// Reduces `v` over a group of GROUP threads (32: one warp; 256 or 512: the whole block, through
// `scratch`, a value per warp) in a fixed order, so that results never depend on timing; every thread of
// the group gets the result.
template <int GROUP, typename C, typename Op>
__device__ __forceinline__ C group_reduce(C v, Op op, C* scratch) {
    static_assert(GROUP == 32 || GROUP == 256 || GROUP == 512, "a group is one warp or a whole block");
    for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    if (GROUP == 32) return v;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    C total = scratch[0];
    for (int w = 1; w < GROUP / 32; ++w) total = op(total, scratch[w]);
    return total;
}

// Folds the running (most, sum of exp(value - most)) of other values into `max` and `sum`. A
// side that has seen nothing (most minus infinity) adds nothing.
template <typename C>
__device__ __forceinline__ void merge_exp_sums(C& max, C& sum, C other_max, C other_sum) {
    const C most = m_max(max, other_max);
    if (most == neg_infinity<C>()) return;  // neither side has seen anything: sum stays 0
    sum = sum * m_exp(max - most) + other_sum * m_exp(other_max - most);
    max = most;
}

// Merges the running (most, sum of exponentials) of every thread of a group of GROUP threads in a
// fixed order (`scratch`: two values per warp), so that every thread gets the row's.
template <int GROUP, typename C>
__device__ __forceinline__ void merge_over_group(C* scratch, C& max, C& sum) {
    for (int offset = 16; offset > 0; offset /= 2) {
        const C other_max = __shfl_xor_sync(0xffffffffu, max, offset);
        const C other_sum = __shfl_xor_sync(0xffffffffu, sum, offset);
        merge_exp_sums(max, sum, other_max, other_sum);
    }
    if (GROUP == 32) return;
    const int warp_lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = GROUP / 32;
    __syncthreads();
    if (warp_lane == 0) {
        scratch[warp] = max;
        scratch[warps + warp] = sum;
    }
    __syncthreads();
    max = scratch[0];
    sum = scratch[warps];
    for (int w = 1; w < warps; ++w) merge_exp_sums(max, sum, scratch[w], scratch[warps + w]);
}

// Folds one value into this thread's running (most, sum of exponentials): the sum is kept
// relative to the most seen so far and rescaled when a larger value comes (Milakov and
// Gimelshein's online normalizer).
template <typename C>
__device__ __forceinline__ void fold_exp(C v, C& max, C& sum) {
    if (v > max) {
        sum = sum * m_exp(max - v) + (C)1;
        max = v;
    } else if (v != neg_infinity<C>()) {
        sum += m_exp(v - max);  // NaN stays NaN
    }
}

// The most of `scale x` and the sum of exp(scale x - most) over the first `len` elements of a
// row, on every thread of its group (softmax and cross-entropy both start so), reading the row
// once: each thread folds its elements into a running pair, and the group merges those pairs
// in a fixed order.
template <int GROUP, typename T>
__device__ __forceinline__ void max_and_sum_exp(const T* row, u64 len, typename Io<T>::C scale, u64 lane,
                                                typename Io<T>::C* scratch, typename Io<T>::C& max,
                                                typename Io<T>::C& sum) {
    static_assert(GROUP == 32 || GROUP == 256 || GROUP == 512, "a group is one warp or a whole block");
    typedef Io<T> io;
    typedef typename io::C C;
    max = neg_infinity<C>();
    sum = 0;
    for (u64 j = lane; j < len; j += GROUP) fold_exp(scale * io::load(row[j]), max, sum);
    merge_over_group<GROUP>(scratch, max, sum);
}

// The bound on `k GROUP` for the elements `lane + k GROUP` of a row's first `seen` that fall to the
// thread at `lane` of a group striding over it (a cached row's fits an int: it is at most
// GROUP N).
__device__ __forceinline__ u64 stride_share(u64 seen, u64 lane) { return seen > lane ? seen - lane : 0; }

// Loads this thread's elements of a row into registers: `v[k]` is `x[k GROUP]` (`x` pointing at
// the thread's first element) where `k GROUP < mine`, `fill` past it. The elements are
// addressed from `x` with constant offsets, so that their addresses take no registers.
template <int GROUP, int N, typename T>
__device__ __forceinline__ void cache_row(const T* x, int mine, typename Io<T>::C fill, typename Io<T>::C (&v)[N]) {
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = k * GROUP < mine ? Io<T>::load(x[k * GROUP]) : fill;
}

// Instantiates M(suffix, type) for every float storage type.
#define FOR_FLOATS(M) M(f32, float) M(f64, double) M(f16, f16) M(bf16, bf16)

// Loops `r` over the rows of this group of GROUP threads (32: a warp, eight rows to a block of
// 256; 256 or 512: the block), `lane` being this thread's place in the group.
#define ROWS_OF(GROUP) \
    const u64 lane = threadIdx.x % GROUP, rows_per_block = blockDim.x / GROUP; \
    for (u64 r = blockIdx.x * rows_per_block + threadIdx.x / GROUP; r < rows; r += gridDim.x * rows_per_block)

// Room for the partial results of group_reduce (one per warp) and max_and_sum_exp (two per
// warp): 32 of compute type C, enough for blocks of up to 512 threads.
#define SCRATCH(C) \
    __shared__ __align__(8) unsigned char scratch_bytes[32 * sizeof(double)]; \
    C* scratch = (C*)scratch_bytes;

// Row kernels (softmax.cu, norm.cu). A row belongs to a group of GROUP threads: a warp (GROUP
// 32, eight rows to a block of 256) or a whole block (GROUP 256 or 512). Each thread of a group
// keeps N elements of its row in registers (of each of the two rows, in the backward passes),
// so that a row of up to GROUP * N elements is read once. Every row kernel is built in several
// shapes (`_GxN_` in its name), and the launch takes the first of its list that holds the row
// (`cuda/rows.rs`): a thread never carries registers, or runs predicated loads, for elements its
// row does not have, and the fewer registers let more rows be in flight, which is what these
// kernels wait on. Rows longer than every shape holds are read again for each pass.

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

// Instantiates F(G, N, ...) for every shape a forward row kernel is built in and B(G, N, ...)
// for every shape of a backward one (which holds N elements of each of two rows), as
// `cuda/rows.rs` lists them.
#define ROW_SHAPES(F, B, ...) \
    F(32, 8, __VA_ARGS__) F(32, 16, __VA_ARGS__) F(32, 32, __VA_ARGS__) \
    F(256, 8, __VA_ARGS__) F(256, 16, __VA_ARGS__) \
    F(512, 8, __VA_ARGS__) F(512, 16, __VA_ARGS__) F(512, 32, __VA_ARGS__) \
    B(32, 4, __VA_ARGS__) B(32, 8, __VA_ARGS__) B(32, 16, __VA_ARGS__) \
    B(256, 4, __VA_ARGS__) B(256, 8, __VA_ARGS__) B(256, 16, __VA_ARGS__) \
    B(512, 4, __VA_ARGS__) B(512, 16, __VA_ARGS__)
