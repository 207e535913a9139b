#!/usr/bin/env python3
"""Makes the GGUF files that headroom-nn's GGUF reader is tested on, with the Python `gguf`
package (llama.cpp's gguf-py: `pip install gguf numpy safetensors`).

Writes, under nn/tests/data/gguf/ (or the directory given as the first argument):

- types.gguf: written by `gguf.GGUFWriter` (GGUF v3, the default alignment of 32), one tensor
  of each type the reader dequantizes, from fixed pseudo-random values (numpy's default_rng
  with fixed seeds):
    f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k: [4, 256]
    (rows of 256, so that the K-quants apply; the first block of q8_0 .. q5_1 all zeros);
    f32_3d: F32 [2, 3, 32] (the row-major shape's order); q4_0_rows64: Q4_0 [3, 64] (rows of
    two blocks); f16_special: F16 [16] (zeros of both signs, infinities, quiet NaNs, the largest
    value, subnormals); bf16_special: BF16 [8] (likewise).
  F32 to Q5_1 and BF16 are made by `gguf.quants.quantize`; the package has no quantizer of the
  K-quants, so their blocks are fixed random bytes with finite float16 scales (one of them
  subnormal, some negative), which ggml's dequantizer still defines. Shapes are given in
  row-major order ([rows, row length]); GGUF stores them innermost first.
  Its metadata holds a value of every GGUF type: each integer type at or near its extremes,
  f32 and f64, a bool, a UTF-8 string, arrays of u8, i32, u64, f32, f64, bool and strings (one
  empty), arrays of arrays of i32 and of strings, and an array of arrays of arrays.
- types.safetensors: the values `gguf.quants.dequantize` gives for each tensor, as float32
  tensors of the same names and row-major shapes (written by the `safetensors` package).
- types.json: the metadata expected, each value as {"type", "value"} ("bits" for floats, the
  integer of their IEEE bits, so that nothing is lost to printing; "item_type" and "items" for
  arrays), and each tensor's name, GGML type name and row-major shape, in file order.
- aligned.gguf: `general.alignment` = 64 and two small tensors (F32 [3, 5], Q8_0 [2, 32]), so
  that the data section and the tensors start on 64-byte boundaries; aligned.safetensors holds
  their values.

The script reads each file back with `gguf.GGUFReader` and checks its metadata, shapes and
dequantized values against what it wrote.
"""

import json
import struct
import sys
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V
from gguf.constants import GGML_QUANT_SIZES
from safetensors.numpy import save_file

TYPE_NAMES = {
    V.UINT8: "u8", V.INT8: "i8", V.UINT16: "u16", V.INT16: "i16", V.UINT32: "u32",
    V.INT32: "i32", V.FLOAT32: "f32", V.BOOL: "bool", V.STRING: "string", V.ARRAY: "array",
    V.UINT64: "u64", V.INT64: "i64", V.FLOAT64: "f64",
}

# (key, type, value, array item type where the writer should not guess it)
METADATA = [
    ("test.u8", V.UINT8, 250, None),
    ("test.i8", V.INT8, -128, None),
    ("test.u16", V.UINT16, 65535, None),
    ("test.i16", V.INT16, -32768, None),
    ("test.u32", V.UINT32, 4294967295, None),
    ("test.i32", V.INT32, -2147483648, None),
    ("test.u64", V.UINT64, 2**64 - 1, None),
    ("test.i64", V.INT64, -(2**63), None),
    ("test.f32", V.FLOAT32, 0.1, None),
    ("test.f64", V.FLOAT64, -1.0 / 3.0, None),
    ("test.bool", V.BOOL, True, None),
    ("test.bool_false", V.BOOL, False, None),
    ("test.string", V.STRING, "héllo, GGUF ✓", None),
    ("test.small_u32", V.UINT32, 7, None),
    ("test.array.u8", V.ARRAY, [0, 1, 255], V.UINT8),
    ("test.array.i32", V.ARRAY, [1, -2, 2147483647], V.INT32),
    ("test.array.u64", V.ARRAY, [0, 2**63], V.UINT64),
    ("test.array.f32", V.ARRAY, [0.5, -1.25, 3.0e-8], V.FLOAT32),
    ("test.array.f64", V.ARRAY, [1e300, -0.0], V.FLOAT64),
    ("test.array.bool", V.ARRAY, [True, False, True], V.BOOL),
    ("test.array.string", V.ARRAY, ["a", "", "ünïcode", "<0x0A>"], V.STRING),
    ("test.array.nested_i32", V.ARRAY, [[1, 2, 3], [-4], [5, 6]], None),
    ("test.array.nested_string", V.ARRAY, [["x"], ["y", "z"]], None),
    ("test.array.nested_twice", V.ARRAY, [[[1], [2, 3]], [[4]]], None),
]


def python_type(value):
    """The GGUF type the writer gives an untyped array item."""
    return V.get_type(value)


def expected_value(vtype, value, item_type=None):
    """`value` of `vtype` as types.json holds it."""
    name = TYPE_NAMES[vtype]
    if vtype == V.FLOAT32:
        return {"type": name, "bits": struct.unpack("<I", struct.pack("<f", value))[0]}
    if vtype == V.FLOAT64:
        return {"type": name, "bits": struct.unpack("<Q", struct.pack("<d", value))[0]}
    if vtype == V.ARRAY:
        item_type = item_type if item_type is not None else python_type(value[0])
        return {
            "type": name,
            "item_type": TYPE_NAMES[item_type],
            "items": [expected_value(item_type, v) for v in value],
        }
    return {"type": name, "value": value}


def f16_bits(rng, count, low=2.0**-12, high=2.0**-4):
    """`count` finite float16 scales of either sign, as their bits."""
    mags = np.exp(rng.uniform(np.log(low), np.log(high), count)).astype(np.float16)
    signs = np.where(rng.random(count) < 0.25, -1, 1).astype(np.float16)
    return (mags * signs).view(np.uint16)


def k_quant_blocks(qtype, rows, cols, seed):
    """Random blocks of a K-quant: random bytes with the float16 fields made finite scales."""
    block, size = GGML_QUANT_SIZES[qtype]
    n = rows * cols // block
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    # Where each block's float16 fields lie (ggml-common.h's block_qN_K).
    fields = {
        Q.Q2_K: [size - 4, size - 2],  # scales[16], qs[64], d, dmin
        Q.Q3_K: [size - 2],  # hmask[32], qs[64], scales[12], d
        Q.Q4_K: [0, 2],  # d, dmin, scales[12], qs[128]
        Q.Q5_K: [0, 2],  # d, dmin, scales[12], qh[32], qs[128]
        Q.Q6_K: [size - 2],  # ql[128], qh[64], scales[16], d
    }[qtype]
    for at in fields:
        bits = f16_bits(rng, n)
        blocks[:, at] = (bits & 0xFF).astype(np.uint8)
        blocks[:, at + 1] = (bits >> 8).astype(np.uint8)
    # One subnormal scale.
    blocks[n - 1, fields[0]] = 0x03
    blocks[n - 1, fields[0] + 1] = 0x00
    return blocks.reshape(rows, cols // block * size)


def values(seed, shape, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def quantized(data, qtype):
    data = data.copy()
    if qtype not in (Q.F32, Q.F16, Q.BF16):
        data[0, :32] = 0.0  # a block of zeros: a zero scale
    return gguf.quants.quantize(data, qtype)


def f16_special():
    bits = [0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE01, 0x7BFF, 0xFBFF,
            0x0001, 0x8001, 0x03FF, 0x0400, 0x3C00, 0xBC00, 0x3555, 0x5640]
    return np.array(bits, dtype=np.uint16).view(np.uint8)


def bf16_special():
    bits = [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x7F7F, 0xBF80]
    return np.array(bits, dtype=np.uint16).view(np.uint8)


def tensors():
    """(name, GGML type, row-major shape, stored bytes or array) in file order."""
    rows, cols = 4, 256
    out = [("f32", Q.F32, [rows, cols], values(1, (rows, cols)))]
    out.append(("f16", Q.F16, [rows, cols], values(2, (rows, cols)).astype(np.float16)))
    out.append(("bf16", Q.BF16, [rows, cols], quantized(values(3, (rows, cols), 10.0), Q.BF16)))
    for seed, qtype in enumerate([Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1], start=4):
        data = values(seed, (rows, cols), 0.05)
        if qtype in (Q.Q4_1, Q.Q5_1):
            data += 0.02  # an offset for the minimum to carry
        out.append((qtype.name.lower(), qtype, [rows, cols], quantized(data, qtype)))
    for seed, qtype in enumerate([Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K], start=20):
        out.append((qtype.name.lower(), qtype, [rows, cols], k_quant_blocks(qtype, rows, cols, seed)))
    out.append(("f32_3d", Q.F32, [2, 3, 32], values(30, (2, 3, 32))))
    out.append(("q4_0_rows64", Q.Q4_0, [3, 64], quantized(values(31, (3, 64)), Q.Q4_0)))
    out.append(("f16_special", Q.F16, [16], f16_special()))
    out.append(("bf16_special", Q.BF16, [8], bf16_special()))
    return out


def add_tensor(writer, name, qtype, shape, data):
    if qtype in (Q.F32, Q.F16) and data.dtype != np.uint8:
        writer.add_tensor(name, data)
    else:
        # Stored bytes in their byte shape: the writer works the element shape out from it.
        raw = np.ascontiguousarray(data).view(np.uint8)
        writer.add_tensor(name, raw.reshape(*shape[:-1], -1), raw_dtype=qtype)


def reference(qtype, shape, data):
    """What gguf-py's dequantizer gives for the stored `data`, as float32 of `shape`."""
    raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    row_bytes = len(raw) // int(np.prod(shape[:-1], dtype=np.int64))
    values = gguf.quants.dequantize(raw.reshape(-1, row_bytes), qtype)
    return np.ascontiguousarray(values.astype(np.float32, copy=False).reshape(shape))


def write_types(out):
    path = out / "types.gguf"
    writer = gguf.GGUFWriter(str(path), arch="gguf-test")
    expected_metadata = [
        {"key": "general.architecture", **expected_value(V.STRING, "gguf-test")},
    ]
    for key, vtype, value, item_type in METADATA:
        writer.add_key_value(key, value, vtype, sub_type=item_type)
        expected_metadata.append({"key": key, **expected_value(vtype, value, item_type)})
    refs = {}
    expected_tensors = []
    for name, qtype, shape, data in tensors():
        add_tensor(writer, name, qtype, shape, data)
        refs[name] = reference(qtype, shape, data)
        expected_tensors.append({"name": name, "type": qtype.name, "shape": shape})
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    save_file(refs, str(out / "types.safetensors"))
    with open(out / "types.json", "w") as f:
        json.dump({"metadata": expected_metadata, "tensors": expected_tensors}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    check(path, expected_metadata, expected_tensors, refs)


def write_aligned(out):
    path = out / "aligned.gguf"
    writer = gguf.GGUFWriter(str(path), arch="gguf-test")
    writer.add_custom_alignment(64)
    refs = {}
    for name, qtype, shape, data in [
        ("a", Q.F32, [3, 5], values(40, (3, 5))),
        ("b", Q.Q8_0, [2, 32], gguf.quants.quantize(values(41, (2, 32)), Q.Q8_0)),
    ]:
        add_tensor(writer, name, qtype, shape, data)
        refs[name] = reference(qtype, shape, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    save_file(refs, str(out / "aligned.safetensors"))
    reader = gguf.GGUFReader(str(path))
    assert reader.alignment == 64 and reader.data_offset % 64 == 0
    for t in reader.tensors:
        assert t.data_offset % 64 == 0, t.name


def check(path, expected_metadata, expected_tensors, refs):
    """Reads `path` back with gguf-py's own reader and compares it with what was written."""
    reader = gguf.GGUFReader(str(path))
    keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    assert keys == [m["key"] for m in expected_metadata], keys
    for m in expected_metadata:
        field = reader.fields[m["key"]]
        assert TYPE_NAMES[field.types[0]] == m["type"], m["key"]
        if m["type"] in ("f32", "f64") or "nested" in m["key"]:
            continue
        if m["type"] == "array":
            if m["item_type"] in ("f32", "f64"):
                continue
            assert field.contents() == [i["value"] for i in m["items"]], m["key"]
        else:
            assert field.contents() == m["value"], m["key"]
    assert [t.name for t in reader.tensors] == [t["name"] for t in expected_tensors]
    for t, e in zip(reader.tensors, expected_tensors):
        assert t.tensor_type.name == e["type"], t.name
        assert list(reversed([int(n) for n in t.shape])) == e["shape"], t.name
        back = gguf.quants.dequantize(t.data, t.tensor_type).reshape(e["shape"])
        assert np.array_equal(back.view(np.uint32), refs[t.name].view(np.uint32)), t.name


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "nn/tests/data/gguf")
    out.mkdir(parents=True, exist_ok=True)
    write_types(out)
    write_aligned(out)
    for p in sorted(out.iterdir()):
        print(f"{p}: {p.stat().st_size} bytes")


if __name__ == "__main__":
    main()
