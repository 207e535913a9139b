// Optimizer updates, one pass over each parameter and its state. The step's constants come
// from the host in f64 and are rounded to the compute precision here, as on the host.

// f32 rounded to bf16 up or down at random (`ops::optim::rounding`): the dropped 16 bits plus 16
// random ones carry into the kept bits with probability equal to the dropped fraction.
__device__ __forceinline__ bf16 bf16_stochastic(float x, u64 draw) {
    const u32 u = __float_as_uint(x);
    bf16 r;
    if ((u & 0x7f800000u) == 0x7f800000u) {
        r.bits = f32_to_bf16(x);  // infinities and NaN stay what they are
    } else {
        r.bits = (u16)((u + (u32)(draw >> 48)) >> 16);
    }
    return r;
}

// A parameter's new value stored as T with `draw`'s top 16 bits (`ops::optim::rounding::store_drawn`):
// a bf16 parameter rounded stochastically, any other to nearest.
template <typename T>
__device__ __forceinline__ T store_drawn(typename Io<T>::C x, u64 draw) {
    (void)draw;
    return Io<T>::store(x);
}
template <>
__device__ __forceinline__ bf16 store_drawn<bf16>(float x, u64 draw) {
    return bf16_stochastic(x, draw);
}

// A parameter's new value stored as T (`ops::optim::rounding::store_param`): a bf16 parameter
// rounded stochastically with the draw of element i on `seed`, any other to nearest.
template <typename T>
__device__ __forceinline__ T store_param(typename Io<T>::C x, u64 seed, u64 i) {
    return store_drawn<T>(x, random_bits(seed, i));
}

#define OPTIM(name, T) \
    extern "C" __global__ void adamw_##name(T* param, const T* grad, T* m, T* v, u64 n, \
                                            double scale, double b1, double b2, double decay, \
                                            double step_size, double root_correction, double eps) { \
        typedef Io<T> io; \
        typedef typename io::C C; \
        const C s = (C)scale, c1 = (C)b1, c2 = (C)b2, d = (C)decay, lr = (C)step_size; \
        const C root = (C)root_correction, e = (C)eps; \
        for (u64 i = thread_index(); i < n; i += grid_stride()) { \
            const C g = io::load(grad[i]) * s; \
            const C m_new = c1 * io::load(m[i]) + ((C)1 - c1) * g; \
            const C v_new = c2 * io::load(v[i]) + ((C)1 - c2) * g * g; \
            const C denom = m_sqrt(v_new) / root + e; \
            param[i] = io::store(io::load(param[i]) * d - lr * m_new / denom); \
            m[i] = io::store(m_new); \
            v[i] = io::store(v_new); \
        } \
    } \
    extern "C" __global__ void sgd_##name(T* param, const T* grad, T* buffer, u64 n, double lr, \
                                          double weight_decay, double momentum, double scale, \
                                          double undamped, int first, int nesterov, u64 seed) { \
        typedef Io<T> io; \
        typedef typename io::C C; \
        const C rate = (C)lr, wd = (C)weight_decay, mu = (C)momentum, s = (C)scale, u = (C)undamped; \
        for (u64 i = thread_index(); i < n; i += grid_stride()) { \
            const C p = io::load(param[i]); \
            const C d = io::load(grad[i]) * s + wd * p; \
            C step = d; \
            if (buffer) { \
                const C b = first ? d : mu * io::load(buffer[i]) + u * d; \
                buffer[i] = io::store(b); \
                step = nesterov ? d + mu * b : b; \
            } \
            param[i] = store_param<T>(p - rate * step, seed, i); \
        } \
    }
FOR_FLOATS(OPTIM)

// AdamW's moments for one element: the new (m, v) from the old and the scaled gradient, and the
// parameter moved by them, in f32 as the host computes (`AdamConstants::apply`).
struct AdamF32 {
    float s, c1, c2, d, lr, root, e;
    __device__ __forceinline__ AdamF32(double scale, double b1, double b2, double decay, double step_size,
                                       double root_correction, double eps)
        : s((float)scale), c1((float)b1), c2((float)b2), d((float)decay), lr((float)step_size),
          root((float)root_correction), e((float)eps) {}
    __device__ __forceinline__ float apply(float p, float grad, float& m, float& v) const {
        const float g = grad * s;
        m = c1 * m + (1.0f - c1) * g;
        v = c2 * v + (1.0f - c2) * g * g;
        const float denom = sqrtf(v) / root + e;
        return p * d - lr * m / denom;
    }
};

// AdamW with bf16 moments for a parameter computed in f32, rounded stochastically, and the
// parameter too where it is bf16: one draw an element, 16 of its bits for each rounding
// (`ops::optim::rounding::split_draw`).
#define ADAMW_BF16_STATE(name, T) \
    extern "C" __global__ void adamw_bf16_state_##name(T* param, const T* grad, bf16* m, bf16* v, u64 n, \
                                                       double scale, double b1, double b2, double decay, \
                                                       double step_size, double root_correction, double eps, \
                                                       u64 seed) { \
        typedef Io<T> io; \
        const AdamF32 adam(scale, b1, b2, decay, step_size, root_correction, eps); \
        for (u64 i = thread_index(); i < n; i += grid_stride()) { \
            float m_new = bf16_to_f32(m[i].bits), v_new = bf16_to_f32(v[i].bits); \
            const u64 draw = random_bits(seed, i); \
            param[i] = store_drawn<T>(adam.apply(io::load(param[i]), io::load(grad[i]), m_new, v_new), draw << 32); \
            m[i] = bf16_stochastic(m_new, draw); \
            v[i] = bf16_stochastic(v_new, draw << 16); \
        } \
    }
ADAMW_BF16_STATE(f32, float)
ADAMW_BF16_STATE(f16, f16)
ADAMW_BF16_STATE(bf16, bf16)

// The 8-bit dynamic map (`ops::optim::dynamic_map`), with the host's f32 operations in the
// host's order (none contracted into a fused multiply-add), so that both store the same codes.
__device__ __forceinline__ float decimal(u32 exponent) {
    switch (exponent) {
        case 0: return 1.0f;
        case 1: return 0.1f;
        case 2: return 0.01f;
        case 3: return 1e-3f;
        case 4: return 1e-4f;
        case 5: return 1e-5f;
        case 6: return 1e-6f;
        default: return 1e-7f;
    }
}

// The magnitude in [0, 1] of a `bits`-bit magnitude code.
__device__ __forceinline__ float map_magnitude(u32 code, u32 bits) {
    if (code == 0) return 0.0f;
    const u32 top = 31 - __clz(code);
    const float fraction = (float)((code & ((1u << top) - 1)) + 1);
    const float linear = __fmul_rn(fraction, 1.0f / (float)(1u << top));
    return __fmul_rn(decimal(bits - 1 - top), __fadd_rn(0.1f, __fmul_rn(0.9f, linear)));
}

// The `bits`-bit code of y in [0, 1]: one of the two around it, the upper with probability
// proportional to y's distance from the lower.
__device__ __forceinline__ u32 map_encode(float y, u32 bits, u64 draw) {
    const u32 top = (1u << bits) - 1;
    if (!(y > 0.0f)) return 0;  // zero, negative or NaN
    if (y >= 1.0f) return top;
    u32 low = 0, high = top;
    while (low < high) {
        const u32 mid = (low + high + 1) / 2;
        if (map_magnitude(mid, bits) <= y) low = mid;
        else high = mid - 1;
    }
    const float below = map_magnitude(low, bits), above = map_magnitude(low + 1, bits);
    const float up = __fdiv_rn(y - below, above - below);
    const float draw_uniform = __fmul_rn((float)(draw >> 40), 1.0f / 16777216.0f);
    return draw_uniform < up ? low + 1 : low;
}

__device__ __forceinline__ float decode_signed(u8 code) {
    const float value = map_magnitude(code & 0x7fu, 7);
    return code & 0x80u ? -value : value;
}

__device__ __forceinline__ u8 encode_signed(float y, u64 draw) {
    const u32 code = map_encode(fabsf(y), 7, draw);
    return (u8)(y < 0.0f && code != 0 ? code | 0x80u : code);
}

__device__ __forceinline__ float relative(float x, float scale) { return scale == 0.0f ? 0.0f : __fdiv_rn(x, scale); }

// Elements of a quantization block each thread of the 256 handles.
#define QUANT_PER_THREAD 8

// AdamW with moments block-wise in 8 bits: one thread block per quantization block of 2048
// elements, eight a thread (held in registers between the update and the encoding), the
// block's new largest magnitudes reduced in a fixed order.
#define ADAMW_8BIT(name, T) \
    extern "C" __global__ void __launch_bounds__(256) adamw_8bit_##name( \
        T* param, const T* grad, u8* m, float* m_scales, u8* v, float* v_scales, u64 n, double scale, \
        double b1, double b2, double decay, double step_size, double root_correction, double eps, \
        u64 m_seed, u64 v_seed, u64 p_seed) { \
        typedef Io<T> io; \
        __shared__ float scratch[8]; \
        const AdamF32 adam(scale, b1, b2, decay, step_size, root_correction, eps); \
        const u64 block = blockIdx.x, first = block * 2048; \
        const float m_scale = m_scales[block], v_scale = v_scales[block]; \
        float ms[QUANT_PER_THREAD], vs[QUANT_PER_THREAD]; \
        float m_most = 0.0f, v_most = 0.0f; \
        _Pragma("unroll") for (int k = 0; k < QUANT_PER_THREAD; ++k) { \
            const u64 i = first + (u64)k * 256 + threadIdx.x; \
            ms[k] = 0.0f; \
            vs[k] = 0.0f; \
            if (i < n) { \
                ms[k] = __fmul_rn(decode_signed(m[i]), m_scale); \
                vs[k] = __fmul_rn(map_magnitude(v[i], 8), v_scale); \
                param[i] = store_param<T>(adam.apply(io::load(param[i]), io::load(grad[i]), ms[k], vs[k]), p_seed, i); \
                m_most = m_max(m_most, fabsf(ms[k])); \
                v_most = m_max(v_most, vs[k]); \
            } \
        } \
        m_most = group_reduce<256>(m_most, MaxOp(), scratch); \
        v_most = group_reduce<256>(v_most, MaxOp(), scratch); \
        _Pragma("unroll") for (int k = 0; k < QUANT_PER_THREAD; ++k) { \
            const u64 i = first + (u64)k * 256 + threadIdx.x; \
            if (i < n) { \
                m[i] = encode_signed(relative(ms[k], m_most), random_bits(m_seed, i)); \
                v[i] = (u8)map_encode(relative(vs[k], v_most), 8, random_bits(v_seed, i)); \
            } \
        } \
        if (threadIdx.x == 0) { \
            m_scales[block] = m_most; \
            v_scales[block] = v_most; \
        } \
    }
ADAMW_8BIT(f32, float)
ADAMW_8BIT(f16, f16)
ADAMW_8BIT(bf16, bf16)
