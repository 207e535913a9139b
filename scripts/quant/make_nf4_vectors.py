#!/usr/bin/env python3
"""Makes the NF4 reference vectors that headroom-kernels' `nf4` tests compare against, with
bitsandbytes (`pip install bitsandbytes torch`; its CPU path needs no GPU).

Writes kernels/tests/data/nf4.json (or the path given as the first argument): for each case,
its name, the block size, and, as the bits of each float32 (so that nothing is lost to
printing): `input`, the `absmax` of each block, and `dequantized`, what
`bitsandbytes.functional.dequantize_4bit` gives back; and `packed`, the 4-bit codes two to a
byte as `quantize_4bit(..., quant_type="nf4", compress_statistics=False)` packs them (the even
element in the high nibble). The cases: weight-like normal values with outliers (whole blocks),
a length that leaves a partial last block, an odd length (the last byte padded), a block of
zeros, values at the code book's midpoints and at its ends, and blocks of 128.
"""

import json
import struct
import sys

import torch
import bitsandbytes.functional as F


def bits(t):
    return [struct.unpack("<I", struct.pack("<f", v))[0] for v in t.float().reshape(-1).tolist()]


def case(name, x, blocksize=64):
    # Flat, as quantize_4bit's blocks are: bitsandbytes' CPU dequantizer takes a 2-D tensor's
    # blocks row by row, which differs from the blocks quantization made (and from its CUDA
    # dequantizer) when a row is not a whole number of blocks.
    x = x.float().reshape(-1).contiguous()
    packed, state = F.quantize_4bit(x, blocksize=blocksize, quant_type="nf4", compress_statistics=False)
    back = F.dequantize_4bit(packed, state)
    return {
        "name": name,
        "blocksize": blocksize,
        "input": bits(x),
        "absmax": bits(state.absmax),
        "packed": packed.reshape(-1).tolist(),
        "dequantized": bits(back),
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "kernels/tests/data/nf4.json"
    torch.manual_seed(0)
    weights = torch.randn(8, 96) * 0.02
    weights[3, 5] = 0.4
    weights[6, 70] = -0.3
    code = F.get_4bit_type("nf4", device="cpu")
    midpoints = (code[:-1] + code[1:]) / 2
    # Each midpoint and each code value, scaled by a block whose absmax is 1.
    edges = torch.cat([midpoints, code, torch.tensor([1.0, -1.0])])
    edges = torch.cat([edges, torch.zeros(64 - edges.numel() % 64)]) if edges.numel() % 64 else edges
    cases = [
        case("weights", weights),
        case("partial last block", torch.randn(100) * 3.0),
        case("odd length", torch.randn(99)),
        case("a block of zeros", torch.cat([torch.zeros(64), torch.randn(64)])),
        case("midpoints and code values", edges),
        case("blocks of 128", torch.randn(4, 128) * 0.5, blocksize=128),
    ]
    with open(out, "w") as f:
        json.dump({"code": bits(code), "cases": cases}, f)
        f.write("\n")
    print(f"{len(cases)} cases written to {out}")


if __name__ == "__main__":
    main()
