// Elementwise arithmetic: unary maps, binary maps (contiguous, broadcast through strides, and
// in place), and the fused SwiGLU gate with its gradients. Each op is a template argument, so each loop is compiled for one op; contiguous
// loops move sixteen bytes per load and store.

#define GELU_K 0.7978845608028654
#define GELU_C 0.044715

// The ops' codes: the Rust side reads them from these enums (cuda/enum_codes.rs), so they are
// numbered here alone. Bare enumerators only, no initializers or comments inside the braces.
enum Unary { U_NEG, U_RELU, U_GELU, U_EXP, U_LOG, U_TANH, U_SQRT, U_SCALE, U_POWF };
enum Binary { B_ADD, B_SUB, B_MUL, B_DIV, B_RELU_BW, B_GELU_BW, B_TANH_BW, B_SQRT_BW, B_POWF_BW, B_EQUAL };

template <typename C> __device__ __forceinline__ C gelu_tanh(C x) {
    return m_tanh((C)GELU_K * (x + (C)GELU_C * x * x * x));
}

template <int OP, typename C> __device__ __forceinline__ C unary_apply(C x, C p) {
    switch (OP) {
        case U_NEG: return -x;
        case U_RELU: return x > (C)0 ? x : (C)0;
        case U_GELU: return (C)0.5 * x * ((C)1 + gelu_tanh(x));
        case U_EXP: return m_exp(x);
        case U_LOG: return m_log(x);
        case U_TANH: return m_tanh(x);
        case U_SQRT: return m_sqrt(x);
        case U_SCALE: return p * x;
        default: return m_pow(x, p);
    }
}

// `p` is the op's scalar and `pm1` is p - 1, both rounded from f64 as on the CPU.
template <int OP, typename C> __device__ __forceinline__ C binary_apply(C a, C b, C p, C pm1) {
    switch (OP) {
        case B_ADD: return a + b;
        case B_SUB: return a - b;
        case B_MUL: return a * b;
        case B_DIV: return a / b;
        case B_RELU_BW: return a > (C)0 ? b : (C)0;
        case B_GELU_BW: {
            C t = gelu_tanh(a);
            C du = (C)GELU_K * ((C)1 + (C)(3.0 * GELU_C) * a * a);
            return (C)0.5 * b * ((C)1 + t + a * ((C)1 - t * t) * du);
        }
        case B_TANH_BW: return b * ((C)1 - a * a);
        case B_SQRT_BW: return b / ((C)2 * a);
        case B_POWF_BW: return b * p * m_pow(a, pm1);
        default: return a == b ? (C)1 : (C)0;
    }
}

// out[i] = f(a[i], b[i]) over n elements, sixteen bytes at a time. When a and b are the same
// array (a unary map, or x * x) each pack is loaded once.
template <typename T, typename F>
__device__ __forceinline__ void zip_map(const T* a, const T* b, T* out, u64 n, F f) {
    typedef Io<T> io;
    const int N = 16 / sizeof(T);
    const u64 packs = n / N, start = thread_index(), step = grid_stride();
    const bool same = a == b;
    const Pack<T>* pa = (const Pack<T>*)a;
    const Pack<T>* pb = (const Pack<T>*)b;
    Pack<T>* po = (Pack<T>*)out;
    for (u64 i = start; i < packs; i += step) {
        Pack<T> x = pa[i], y = same ? x : pb[i], r;
#pragma unroll
        for (int k = 0; k < N; ++k) r.v[k] = io::store(f(io::load(x.v[k]), io::load(y.v[k])));
        po[i] = r;
    }
    for (u64 i = packs * N + start; i < n; i += step) out[i] = io::store(f(io::load(a[i]), io::load(b[i])));
}

template <int OP, typename C> struct UnaryFn {
    C p;
    __device__ __forceinline__ C operator()(C x, C) const { return unary_apply<OP>(x, p); }
};
template <int OP, typename C> struct BinaryFn {
    C p, pm1;
    __device__ __forceinline__ C operator()(C a, C b) const { return binary_apply<OP>(a, b, p, pm1); }
};
// b[i] = op(a[i], b[i]) runs zip_map(a, b, b): the same function, operands in order.

template <typename T>
__device__ void unary_any(int op, typename Io<T>::C p, const T* x, T* y, u64 n) {
    typedef typename Io<T>::C C;
#define UNARY_CASE(code) case code: { UnaryFn<code, C> f = {p}; zip_map(x, x, y, n, f); break; }
    switch (op) {
        UNARY_CASE(U_NEG) UNARY_CASE(U_RELU) UNARY_CASE(U_GELU) UNARY_CASE(U_EXP) UNARY_CASE(U_LOG)
        UNARY_CASE(U_TANH) UNARY_CASE(U_SQRT) UNARY_CASE(U_SCALE) UNARY_CASE(U_POWF)
    }
#undef UNARY_CASE
}

#define BINARY_CASES(CALL) \
    CALL(B_ADD) CALL(B_SUB) CALL(B_MUL) CALL(B_DIV) CALL(B_RELU_BW) CALL(B_GELU_BW) \
    CALL(B_TANH_BW) CALL(B_SQRT_BW) CALL(B_POWF_BW) CALL(B_EQUAL)

template <typename T>
__device__ void binary_any(int op, double p, const T* a, const T* b, T* out, u64 n) {
    typedef typename Io<T>::C C;
#define BINARY_CASE(code) case code: { BinaryFn<code, C> f = {(C)p, (C)(p - 1.0)}; zip_map(a, b, out, n, f); break; }
    switch (op) { BINARY_CASES(BINARY_CASE) }
#undef BINARY_CASE
}

template <int OP, typename T>
__device__ void binary_walk(double p, const T* a, const T* b, T* out, u64 n, const Walk& wa,
                            const Walk& wb) {
    typedef Io<T> io;
    typedef typename io::C C;
    const C pc = (C)p, pm1 = (C)(p - 1.0);
    for (u64 i = thread_index(); i < n; i += grid_stride()) {
        T x = a[walk_offset(wa, wa.strides, i)];
        T y = b[walk_offset(wa, wb.strides, i)];
        out[i] = io::store(binary_apply<OP>(io::load(x), io::load(y), pc, pm1));
    }
}

template <typename T>
__device__ void binary_strided_any(int op, double p, const T* a, const T* b, T* out,
                                   u64 n, const Walk& wa, const Walk& wb) {
#define STRIDED_CASE(code) case code: binary_walk<code, T>(p, a, b, out, n, wa, wb); break;
    switch (op) { BINARY_CASES(STRIDED_CASE) }
#undef STRIDED_CASE
}

// SwiGLU: silu(gate) * up, the SiLU rounded to T before the product (Hugging Face's
// act_fn(gate) * up in a half type; a no-op for float and double).
template <typename C> __device__ __forceinline__ C sigmoid(C x) { return (C)1 / ((C)1 + m_exp(-x)); }

template <typename T> struct SwigluFn {
    typedef typename Io<T>::C C;
    __device__ __forceinline__ C operator()(C gate, C up) const {
        return Io<T>::load(Io<T>::store(gate * sigmoid(gate))) * up;
    }
};

// dgate = dy up s (1 + gate (1 - s)) with s = sigmoid(gate), and dup = dy round(silu(gate)).
template <typename T>
__device__ void swiglu_backward(const T* gate, const T* up, const T* dy, T* dgate, T* dup, u64 n) {
    typedef Io<T> io;
    typedef typename io::C C;
    for (u64 i = thread_index(); i < n; i += grid_stride()) {
        const C x = io::load(gate[i]), d = io::load(dy[i]), s = sigmoid(x);
        const C silu = io::load(io::store(x * s));
        dgate[i] = io::store(d * io::load(up[i]) * s * ((C)1 + x * ((C)1 - s)));
        dup[i] = io::store(d * silu);
    }
}

// x[i] *= factor[0], the factor read by every thread from where it lives.
template <typename T> __device__ __forceinline__ void scale_by(const T* factor, T* x, u64 n) {
    typedef Io<T> io;
    const typename io::C f = io::load(factor[0]);
    for (u64 i = thread_index(); i < n; i += grid_stride()) {
        x[i] = io::store(io::load(x[i]) * f);
    }
}

#define ELEMENTWISE(name, T) \
    extern "C" __global__ void swiglu_##name(const T* gate, const T* up, T* out, u64 n) { \
        zip_map(gate, up, out, n, SwigluFn<T>()); \
    } \
    extern "C" __global__ void swiglu_backward_##name(const T* gate, const T* up, const T* dy, T* dgate, \
                                                      T* dup, u64 n) { \
        swiglu_backward<T>(gate, up, dy, dgate, dup, n); \
    } \
    extern "C" __global__ void unary_##name(int op, double p, const T* x, T* y, u64 n) { \
        unary_any<T>(op, (typename Io<T>::C)p, x, y, n); \
    } \
    extern "C" __global__ void binary_##name(int op, double p, const T* a, const T* b, T* out, u64 n) { \
        binary_any<T>(op, p, a, b, out, n); \
    } \
    extern "C" __global__ void binary_assign_##name(int op, double p, const T* a, T* b, u64 n) { \
        binary_any<T>(op, p, a, b, b, n); \
    } \
    extern "C" __global__ void scale_by_##name(const T* factor, T* x, u64 n) { \
        scale_by<T>(factor, x, n); \
    } \
    extern "C" __global__ void binary_strided_##name(int op, double p, const T* a, const T* b, T* out, \
                                                     u64 n, Walk wa, Walk wb) { \
        binary_strided_any<T>(op, p, a, b, out, n, wa, wb); \
    }
FOR_FLOATS(ELEMENTWISE)
