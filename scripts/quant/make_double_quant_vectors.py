#!/usr/bin/env python3
"""Makes the reference vectors of QLoRA's double quantization and of block-wise int8 that
headroom-kernels' tests compare against (`pip install bitsandbytes torch`; the CPU path needs
no GPU).

Writes kernels/tests/data/double_quant.json (or the path given as the first argument), every
float as the bits of its float32 so that nothing is lost to printing:
- `dynamic_map`: the 256 codes of bitsandbytes' signed dynamic map
  (`create_dynamic_map(signed=True)`), as its CPU quantizer leaves them (it sets the first
  code to -1 before searching, and dequantizes with that code).
- `nf4`: cases of `quantize_4bit(..., quant_type="nf4", compress_statistics=True)` (QLoRA's
  default): the input, the packed codes, the absmaxes' `offset` (their mean), their 8-bit
  codes (`quantize_blockwise` of absmax - offset in blocks of 256 on the dynamic map), the
  scale of each block of 256, and `dequantize_4bit`'s result.
- `int8`: cases of block-wise absmax int8 as bitsandbytes' `int8_vectorwise_quant` computes it
  row by row, each block of 64 values a row: `round(x * (127 / absmax))` (ties to even), and
  back `q * (absmax / 127)`.
"""

import json
import struct
import sys

import torch
import bitsandbytes.functional as F


def bits(t):
    return [struct.unpack("<I", struct.pack("<f", v))[0] for v in t.float().reshape(-1).tolist()]


def nf4_case(name, x, blocksize=64):
    x = x.float().reshape(-1).contiguous()
    packed, state = F.quantize_4bit(x, blocksize=blocksize, quant_type="nf4", compress_statistics=True)
    back = F.dequantize_4bit(packed, state)
    return {
        "name": name,
        "blocksize": blocksize,
        "input": bits(x),
        "packed": packed.reshape(-1).tolist(),
        "offset": bits(torch.tensor([float(state.offset)])),
        "absmax_codes": state.absmax.reshape(-1).tolist(),
        "absmax_scales": bits(state.state2.absmax),
        "absmax_block": state.state2.blocksize,
        "dequantized": bits(back),
    }


def int8_case(name, x, blocksize=64):
    rows = x.float().reshape(-1, blocksize)
    absmax = rows.abs().amax(dim=-1)
    codes = torch.round(rows * (127.0 / absmax.unsqueeze(-1))).to(torch.int8)
    back = codes.float() * (absmax.unsqueeze(-1) / 127.0)
    return {
        "name": name,
        "blocksize": blocksize,
        "input": bits(rows),
        "absmax": bits(absmax),
        "codes": codes.reshape(-1).tolist(),
        "dequantized": bits(back),
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "kernels/tests/data/double_quant.json"
    torch.manual_seed(0)
    weights = torch.randn(64, 96) * 0.02
    weights[3, 5] = 0.4
    weights[40, 70] = -0.3
    nf4 = [
        nf4_case("weights (96 blocks: one block of 256 scales, partly filled)", weights),
        nf4_case("600 blocks: three blocks of scales", torch.randn(600 * 64) * 0.05),
        nf4_case("a partial last block", torch.randn(64 * 300 + 10)),
    ]
    ties = torch.tensor([63.5, -63.5, 0.5, -0.5, 1.5, 2.5, 127.0, -127.0] * 8) / 127.0
    int8 = [
        int8_case("weights", weights),
        int8_case("halfway values round to even", ties),
    ]
    code = F.create_dynamic_map(signed=True)
    x = torch.randn(512)
    F.quantize_blockwise(x, code=code, blocksize=256)  # the CPU quantizer sets code[0] = -1
    with open(out, "w") as f:
        json.dump({"dynamic_map": bits(code), "nf4": nf4, "int8": int8}, f)
        f.write("\n")
    print(f"{len(nf4)} nf4 and {len(int8)} int8 cases written to {out}; code[0] = {float(code[0])}")


if __name__ == "__main__":
    main()
