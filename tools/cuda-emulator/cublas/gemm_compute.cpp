#include <cstdint>
#include <cstring>
#include <vector>

#include "gemm.h"
#include "half.h"

namespace emu_blas {
namespace {

char* element(const Matrix& m, long long batch, int row, int col) {
    const long long index = batch * m.stride + (long long)col * m.ld + row;
    return static_cast<char*>(m.base) + index * (long long)m.element_bytes();
}

// Tensor cores take TF32 inputs rounded to nearest, ties away from zero (cvt.rna.tf32.f32).
float round_tf32(float x) {
    uint32_t bits = host_float_bits(x);
    if ((bits & 0x7f800000u) != 0x7f800000u) bits += 0x1000u;  // not for infinities and NaNs
    return host_bits_float(bits & 0xffffe000u);
}

double round_input(double x, Rounding rounding) {
    switch (rounding) {
        case Rounding::None: return x;
        case Rounding::Tf32: return round_tf32(float(x));
        case Rounding::F16: return host_f16_to_f32(host_f32_to_f16(float(x)));
        case Rounding::Bf16: return host_bf16_to_f32(host_f32_to_bf16(float(x)));
    }
    return x;
}

template <typename Acc>
void multiply_in(const Product& p) {
    // op(A) by rows and op(B) by columns, so that each dot product runs over contiguous memory.
    std::vector<Acc> a(size_t(p.m) * p.k), b(size_t(p.n) * p.k);
    const Acc alpha = Acc(p.alpha), beta = Acc(p.beta);
    for (long long batch = 0; batch < p.batches; ++batch) {
        for (int i = 0; i < p.m; ++i)
            for (int l = 0; l < p.k; ++l)
                a[size_t(i) * p.k + l] = Acc(round_input(
                    p.trans_a ? p.a.at(batch, l, i) : p.a.at(batch, i, l), p.rounding));
        for (int j = 0; j < p.n; ++j)
            for (int l = 0; l < p.k; ++l)
                b[size_t(j) * p.k + l] = Acc(round_input(
                    p.trans_b ? p.b.at(batch, j, l) : p.b.at(batch, l, j), p.rounding));
        for (int j = 0; j < p.n; ++j) {
            for (int i = 0; i < p.m; ++i) {
                const Acc* row = &a[size_t(i) * p.k];
                const Acc* column = &b[size_t(j) * p.k];
                Acc sum = 0;
                for (int l = 0; l < p.k; ++l) sum += row[l] * column[l];
                Acc result = alpha * sum;
                if (p.beta != 0) result += beta * Acc(p.c.at(batch, i, j));
                p.c.store(batch, i, j, double(result));
            }
        }
    }
}

}  // namespace

size_t Matrix::element_bytes() const {
    switch (type) {
        case CUDA_R_64F: return 8;
        case CUDA_R_32F: return 4;
        default: return 2;
    }
}

double Matrix::at(long long batch, int row, int col) const {
    const char* p = element(*this, batch, row, col);
    switch (type) {
        case CUDA_R_64F: { double v; std::memcpy(&v, p, 8); return v; }
        case CUDA_R_32F: { float v; std::memcpy(&v, p, 4); return v; }
        case CUDA_R_16F: { uint16_t v; std::memcpy(&v, p, 2); return host_f16_to_f32(v); }
        case CUDA_R_16BF: { uint16_t v; std::memcpy(&v, p, 2); return host_bf16_to_f32(v); }
    }
    return 0;
}

// Results round to nearest even into C's type (from f32, or from f64 for f64 products).
void Matrix::store(long long batch, int row, int col, double value) const {
    char* p = element(*this, batch, row, col);
    switch (type) {
        case CUDA_R_64F: std::memcpy(p, &value, 8); break;
        case CUDA_R_32F: { const float v = float(value); std::memcpy(p, &v, 4); break; }
        case CUDA_R_16F: { const uint16_t v = host_f32_to_f16(float(value)); std::memcpy(p, &v, 2); break; }
        case CUDA_R_16BF: { const uint16_t v = host_f32_to_bf16(float(value)); std::memcpy(p, &v, 2); break; }
    }
}

void multiply(const Product& product) {
    if (product.in_f64) {
        multiply_in<double>(product);
    } else {
        multiply_in<float>(product);
    }
}

}  // namespace emu_blas
