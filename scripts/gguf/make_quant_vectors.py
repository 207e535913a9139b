#!/usr/bin/env python3
"""Makes the vectors that headroom-nn's GGUF quantizers are tested on (`pip install gguf numpy
safetensors`).

Writes nn/tests/data/gguf/quant.safetensors (or the file given as the first argument):

- `floats`: F32 [64], special values (zeros of both signs, infinities, a quiet NaN, the
  largest and smallest halves, subnormals, values halfway between two halves or two bfloat16s,
  values past the largest half) and random ones; `floats.f16` and `floats.bf16`: their stored
  bytes from `gguf.quants.quantize` (numpy's rounding to half, ggml's to bfloat16).
- `blocks`: F32 [16, 256], rows of several kinds (normal values at several scales, a block of
  zeros, constant, all positive, all negative, one spike, sub-blocks of very different scales,
  subnormal-size values, values on rounding ties); `blocks.q8_0`, `blocks.q4_0`, `blocks.q5_0`:
  their bytes from `gguf.quants.quantize`; `blocks.q4_k`: their bytes from `quantize_row_q4_k`
  below, a line-by-line port of ggml's `quantize_row_q4_K_ref` and `make_qkx2_quants`
  (ggml-quants.c) in float32 arithmetic, which the gguf package does not quantize.

With `--ggml PATH/libggml-base.so` (a build of llama.cpp's ggml), every type's bytes are also
checked against ggml's own `quantize_row_*_ref` functions, called through ctypes: on x86-64,
where ggml-base is built without fused multiply-adds, they are equal.
"""

import argparse
import ctypes
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from safetensors.numpy import save_file

OUT = Path(__file__).resolve().parents[2] / "nn" / "tests" / "data" / "gguf" / "quant.safetensors"
F = np.float32


def floats():
    special = np.array(
        [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x477FE000, 0xC77FE000,
         0x477FF000, 0x47800000, 0x38800000, 0x33800000, 0x33000000, 0x33000001, 0x3F801000,
         0x3F803000, 0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF, 0x00000001, 0x387FC000,
         0xB8000000, 0x3DCCCCCD, 0x42F6E979],
        dtype=np.uint32,
    ).view(np.float32)
    rng = np.random.default_rng(50)
    rest = (rng.standard_normal(64 - len(special)) * np.exp(rng.uniform(-12, 12, 64 - len(special)))).astype(F)
    return np.concatenate([special, rest]).astype(F)


def blocks():
    rng = np.random.default_rng(51)
    rows = []
    for scale in (1.0, 0.02, 300.0):
        rows.append(rng.standard_normal(256) * scale)
    row = rng.standard_normal(256) * 0.1
    row[32:64] = 0.0
    rows.append(row)
    rows.append(np.full(256, 0.37))
    rows.append(np.abs(rng.standard_normal(256)) + 0.5)
    rows.append(-np.abs(rng.standard_normal(256)) - 0.2)
    row = rng.standard_normal(256) * 0.01
    row[100] = 5.0
    row[7] = -9.0
    rows.append(row)
    row = rng.standard_normal(256)
    for j, s in enumerate([1e-4, 1.0, 1e-3, 10.0, 1e-6, 0.5, 3e-5, 2.0]):
        row[32 * j: 32 * (j + 1)] *= s
    rows.append(row)
    rows.append(rng.standard_normal(256) * 1e-6)
    rows.append(np.round(rng.standard_normal(256) * 8) / 8)  # on the codes' grid: ties
    rows.append(np.tile(np.arange(-16, 16, dtype=np.float64) / 4, 8))
    rows.append(rng.uniform(-1, 1, 256) ** 3)
    rows.append(np.zeros(256))
    rows.append(rng.standard_normal(256) + 3.0)
    rows.append(rng.laplace(size=256) * 0.05)
    return np.stack(rows).astype(F)


# ggml's Q4_K reference, ported line by line; every operation on float32 scalars.

def nearest_int(fval):
    val = F(fval) + F(12582912.0)
    i = int(np.array(val, dtype=F).view(np.int32))
    return (i & 0x007FFFFF) - 0x00400000


def make_qkx2_quants(n, nmax, x, weights, rmin, rdelta, nstep):
    L = [0] * n
    Laux = [0] * n
    mn = x[0]
    mx = x[0]
    sum_w = weights[0]
    sum_x = F(sum_w * x[0])
    for i in range(1, n):
        if x[i] < mn:
            mn = x[i]
        if x[i] > mx:
            mx = x[i]
        w = weights[i]
        sum_w = F(sum_w + w)
        sum_x = F(sum_x + F(w * x[i]))
    if mn > 0:
        mn = F(0)
    if mx == mn:
        return F(0), F(-mn), [0] * n
    iscale = F(F(nmax) / F(mx - mn))
    scale = F(F(1) / iscale)
    best_error = F(0)
    for i in range(n):
        l = nearest_int(F(iscale * F(x[i] - mn)))
        L[i] = max(0, min(nmax, l))
        diff = F(F(F(scale * F(L[i])) + mn) - x[i])
        diff = F(diff * diff)
        best_error = F(best_error + F(weights[i] * diff))
    for step in range(nstep + 1):
        iscale = F(F(F(rmin + F(rdelta * F(step))) + F(nmax)) / F(mx - mn))
        sum_l = F(0)
        sum_l2 = F(0)
        sum_xl = F(0)
        for i in range(n):
            l = nearest_int(F(iscale * F(x[i] - mn)))
            l = max(0, min(nmax, l))
            Laux[i] = l
            w = weights[i]
            wl = F(w * F(l))
            sum_l = F(sum_l + wl)
            sum_l2 = F(sum_l2 + F(wl * F(l)))
            sum_xl = F(sum_xl + F(wl * x[i]))
        D = F(F(sum_w * sum_l2) - F(sum_l * sum_l))
        if D > 0:
            this_scale = F(F(F(sum_w * sum_xl) - F(sum_x * sum_l)) / D)
            this_min = F(F(F(sum_l2 * sum_x) - F(sum_l * sum_xl)) / D)
            if this_min > 0:
                this_min = F(0)
                this_scale = F(sum_xl / sum_l2)
            cur_error = F(0)
            for i in range(n):
                diff = F(F(F(this_scale * F(Laux[i])) + this_min) - x[i])
                diff = F(diff * diff)
                cur_error = F(cur_error + F(weights[i] * diff))
            if cur_error < best_error:
                L = list(Laux)
                best_error = cur_error
                scale = this_scale
                mn = this_min
    return scale, F(-mn), L


def f16(v):
    return np.array(v, dtype=F).astype(np.float16)


def quantize_row_q4_k(x):
    out = bytearray()
    for start in range(0, len(x), 256):
        xb = [F(v) for v in x[start:start + 256]]
        L = [0] * 256
        scales = [F(0)] * 8
        mins = [F(0)] * 8
        max_scale = F(0)
        max_min = F(0)
        for j in range(8):
            sub = xb[32 * j: 32 * (j + 1)]
            sum_x2 = F(0)
            for v in sub:
                sum_x2 = F(sum_x2 + F(v * v))
            av_x = F(np.sqrt(F(sum_x2 / F(32))))
            weights = [F(av_x + F(abs(v))) for v in sub]
            scales[j], mins[j], L[32 * j: 32 * (j + 1)] = make_qkx2_quants(32, 15, sub, weights, F(-1), F(0.1), 20)
            if scales[j] > max_scale:
                max_scale = scales[j]
            if mins[j] > max_min:
                max_min = mins[j]
        inv_scale = F(F(63) / max_scale) if max_scale > 0 else F(0)
        inv_min = F(F(63) / max_min) if max_min > 0 else F(0)
        packed = [0] * 12
        for j in range(8):
            ls = min(63, nearest_int(F(inv_scale * scales[j])) & 0xFF)
            lm = min(63, nearest_int(F(inv_min * mins[j])) & 0xFF)
            if j < 4:
                packed[j] = ls
                packed[j + 4] = lm
            else:
                packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4)
                packed[j - 4] |= (ls >> 4) << 6
                packed[j] |= (lm >> 4) << 6
        d = f16(F(max_scale / F(63)))
        dmin = f16(F(max_min / F(63)))
        for j in range(8):
            if j < 4:
                sc, m = packed[j] & 63, packed[j + 4] & 63
            else:
                sc = (packed[j + 4] & 0xF) | ((packed[j - 4] >> 6) << 4)
                m = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4)
            dj = F(F(d) * F(sc))
            if not dj:
                continue
            dm = F(F(dmin) * F(m))
            for ii in range(32):
                l = nearest_int(F(F(xb[32 * j + ii] + dm) / dj))
                L[32 * j + ii] = max(0, min(15, l))
        out += d.tobytes() + dmin.tobytes() + bytes(packed)
        for j in range(0, 256, 64):
            out += bytes(L[j + l] | (L[j + l + 32] << 4) for l in range(32))
    return np.frombuffer(bytes(out), dtype=np.uint8)


def ggml_reference(lib_path, data):
    """The bytes of ggml's own reference quantizers for each row of `data`."""
    lib = ctypes.CDLL(lib_path)
    out = {}
    for name, qtype in [("q8_0", Q.Q8_0), ("q4_0", Q.Q4_0), ("q5_0", Q.Q5_0), ("q4_k", Q.Q4_K)]:
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        fn = getattr(lib, f"quantize_row_{name.replace('_k', '_K')}_ref")
        rows = []
        for row in data:
            row = np.ascontiguousarray(row, dtype=F)
            buf = (ctypes.c_uint8 * (len(row) // block * size))()
            fn(row.ctypes.data_as(ctypes.c_void_p), buf, ctypes.c_int64(len(row)))
            rows.append(np.frombuffer(bytes(buf), dtype=np.uint8))
        out[name] = (fn.__name__, np.stack(rows))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=str(OUT))
    parser.add_argument("--ggml", help="a libggml-base shared library to check every type against")
    args = parser.parse_args()
    x = floats()
    np.seterr(over="ignore")  # values past the largest half become infinities, as intended
    data = blocks()
    tensors = {
        "floats": x,
        "floats.f16": gguf.quants.quantize(x, Q.F16).view(np.uint8),
        "floats.bf16": gguf.quants.quantize(x, Q.BF16).view(np.uint8),
        "blocks": data,
        "blocks.q8_0": gguf.quants.quantize(data, Q.Q8_0),
        "blocks.q4_0": gguf.quants.quantize(data, Q.Q4_0),
        "blocks.q5_0": gguf.quants.quantize(data, Q.Q5_0),
        "blocks.q4_k": np.stack([quantize_row_q4_k(row) for row in data]),
    }
    # The port reads back through the package's dequantizer close to the values (but for the
    # row of values so small that the half-float scales lose them).
    back = gguf.quants.dequantize(tensors["blocks.q4_k"], Q.Q4_K)
    err = np.abs(back - data).max(axis=1) / np.maximum(np.abs(data).max(axis=1), 1e-30)
    assert (err[np.abs(data).max(axis=1) > 1e-3] < 0.1).all(), err
    if args.ggml:
        for name, (fn_name, ref) in ggml_reference(args.ggml, data).items():
            same = np.array_equal(ref, tensors[f"blocks.{name}"])
            print(f"{name}: {'equal to' if same else 'DIFFERENT FROM'} ggml's {fn_name}")
            assert same, name
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, args.out)
    print(f"{args.out}: {Path(args.out).stat().st_size} bytes")


if __name__ == "__main__":
    main()
