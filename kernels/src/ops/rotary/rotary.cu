// Rotary position embeddings in Hugging Face's rotate_half layout: in a head of `head` features,
// feature i < head / 2 pairs with feature i + head / 2, and row t turns by the angle
// (offset + t) inv_freq[i] (its negative backward). One thread per pair, grid-stride; the angle in
// the compute type (f32, f64 for f64), as the CPU forms it, its cosine and sine within an ulp or
// two of that type.

// An angle in half turns (radians over pi), reduced to [-1, 1] with the same sine and cosine: 1 / pi in
// two doubles (a product exact to 2^-106) and a whole number of turns taken off exactly. cosf and
// sinf would reduce large angles themselves, through a table in local memory; sincospi needs
// none once the angle is in half turns.
__device__ __forceinline__ double reduced_half_turns(double angle) {
    const double INV_PI_HI = 0x1.45f306dc9c883p-2, INV_PI_LO = -0x1.6b01ec5417056p-56;
    const double hi = angle * INV_PI_HI;
    const double lo = fma(angle, INV_PI_HI, -hi) + angle * INV_PI_LO;
    const double turns = 2.0 * rint(0.5 * hi);
    return (hi - turns) + lo;
}

// The cosine and sine of an angle of the compute type: in f32 from the f32 angle (reduced in
// f64, rounded to f32 within [-1, 1]), in f64 for f64.
__device__ __forceinline__ void cos_sin(float a, float& c, float& s) {
    sincospif((float)reduced_half_turns((double)a), &s, &c);
}
__device__ __forceinline__ void cos_sin(double a, double& c, double& s) { sincospi(reduced_half_turns(a), &s, &c); }

// `rows` rows of `2 half` features, row r at position offset + r % len, or with packed documents
// (starts not null: [rows / len / per_row, len]) at r % len less its document's start.
template <bool BACKWARD, typename T>
__device__ void rotary_rows(const T* x, const typename Io<T>::C* inv_freq, T* out, u64 rows, u64 len,
                           u64 half, u64 offset, const u32* starts, u64 per_row) {
    typedef Io<T> io;
    typedef typename io::C C;
    const u64 pairs = rows * half;
    for (u64 p = thread_index(); p < pairs; p += grid_stride()) {
        const u64 r = p / half, i = p % half;
        const u64 t = r % len;
        const u64 position = starts ? t - starts[r / len / per_row * len + t] : offset + t;
        const C angle = (C)position * inv_freq[i];
        C c, s;
        cos_sin(angle, c, s);
        if (BACKWARD) s = -s;
        const u64 first = r * 2 * half + i, second = first + half;
        const C a = io::load(x[first]), b = io::load(x[second]);
        out[first] = io::store(a * c - b * s);
        out[second] = io::store(b * c + a * s);
    }
}

// The kernels of storage type T whose frequencies are of F, its compute type.
#define ROTARY(name, T, F) \
    extern "C" __global__ void rotary_##name(const T* x, const F* inv_freq, T* out, u64 rows, u64 len, u64 half, \
                                             u64 offset, const u32* starts, u64 per_row) { \
        rotary_rows<false, T>(x, inv_freq, out, rows, len, half, offset, starts, per_row); \
    } \
    extern "C" __global__ void rotary_backward_##name(const T* x, const F* inv_freq, T* out, u64 rows, u64 len, \
                                                      u64 half, u64 offset, const u32* starts, u64 per_row) { \
        rotary_rows<true, T>(x, inv_freq, out, rows, len, half, offset, starts, per_row); \
    }
ROTARY(f32, float, float)
ROTARY(f64, double, double)
ROTARY(f16, f16, float)
ROTARY(bf16, bf16, float)
