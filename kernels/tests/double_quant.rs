//! QLoRA's double quantization against bitsandbytes, to the bit: vectors made by
//! `scripts/quant/make_double_quant_vectors.py`.

use headroom_kernels::quantize::double::{DoubleQuantized, SCALE_BLOCK};
use headroom_kernels::quantize::dynamic::{Blockwise, dynamic_map};
use headroom_kernels::quantize::nf4::Nf4;

fn data() -> serde_json::Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/double_quant.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn floats(value: &serde_json::Value) -> Vec<f32> {
    let all = value.as_array().unwrap().iter();
    all.map(|b| f32::from_bits(b.as_u64().unwrap() as u32))
        .collect()
}

fn bytes(value: &serde_json::Value) -> Vec<u8> {
    let all = value.as_array().unwrap().iter();
    all.map(|b| b.as_i64().unwrap() as u8).collect()
}

#[test]
fn the_dynamic_map_is_bitsandbytes_to_the_bit() {
    let theirs = floats(&data()["dynamic_map"]);
    for (i, (a, b)) in dynamic_map().iter().zip(&theirs).enumerate() {
        assert_eq!(a.to_bits(), b.to_bits(), "code {i}: {a} against {b}");
    }
}

/// bitsandbytes' CPU quantizer finds a code through a table of 65536 bins over [-1, 1]: where
/// the value's bin holds the midpoint between two codes, it may take the farther one.
const CPU_BIN: f32 = 2.0 / 65535.0;

#[test]
fn double_quantization_is_bitsandbytes_to_the_bit() {
    let data = data();
    let map = dynamic_map();
    for case in data["nf4"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let input = floats(&case["input"]);
        let block = case["blocksize"].as_u64().unwrap() as usize;
        let ours = DoubleQuantized::quantize(&input, block).unwrap();
        assert_eq!(ours.packed, bytes(&case["packed"]), "{name}: packed");
        // The mean of the scales: ours is summed in f64, PyTorch's in f32 lanes.
        let offset = floats(&case["offset"])[0];
        assert!(
            (ours.offset - offset).abs() <= f32::EPSILON * offset,
            "{name}: offset {} against {offset}",
            ours.offset
        );
        // The scales quantized from bitsandbytes' offset: the same scale per block, the same
        // code for each but where its CPU quantizer's bin straddles two codes' midpoint.
        let absmax = Nf4::quantize(&input, block).unwrap().absmax;
        let centred: Vec<f32> = absmax.iter().map(|a| a - offset).collect();
        let scales = Blockwise::quantize(&centred, SCALE_BLOCK, &map).unwrap();
        assert_eq!(
            scales.absmax,
            floats(&case["absmax_scales"]),
            "{name}: scales"
        );
        let codes = bytes(&case["absmax_codes"]);
        for (i, (&a, &b)) in scales.codes.iter().zip(&codes).enumerate() {
            if a != b {
                let x = centred[i] / scales.absmax[i / SCALE_BLOCK];
                let (ca, cb) = (map[usize::from(a)], map[usize::from(b)]);
                assert!(
                    (x - (ca + cb) / 2.0).abs() <= CPU_BIN,
                    "{name}: scale {i}: {a} against {b}"
                );
                assert!(
                    (x - ca).abs() <= (x - cb).abs(),
                    "{name}: scale {i}: ours is not the nearer"
                );
            }
        }
        // bitsandbytes' stored parts dequantize to its values, bit for bit.
        let stored = DoubleQuantized {
            packed: bytes(&case["packed"]),
            scales: Blockwise {
                codes,
                absmax: floats(&case["absmax_scales"]),
                block: SCALE_BLOCK,
            },
            offset,
            block,
            len: input.len(),
        };
        let back = stored.dequantize();
        let theirs = floats(&case["dequantized"]);
        for (i, (a, b)) in back.iter().zip(&theirs).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{name}: value {i}: {a} against {b}"
            );
        }
        // 4.13 bits a value for blocks of 64.
        let bits = 8.0 * ours.bytes() as f64 / input.len() as f64;
        assert!(bits < 4.2, "{name}: {bits} bits a value");
    }
}

#[test]
fn block_wise_int8_is_bitsandbytes_row_wise_int8_to_the_bit() {
    let data = data();
    for case in data["int8"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let input = floats(&case["input"]);
        let block = case["blocksize"].as_u64().unwrap() as usize;
        let ours = headroom_kernels::quantize::int8::Int8::quantize(&input, block).unwrap();
        let codes: Vec<i8> = case["codes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_i64().unwrap() as i8)
            .collect();
        assert_eq!(ours.codes, codes, "{name}: codes");
        assert_eq!(ours.absmax, floats(&case["absmax"]), "{name}: absmax");
        let back = ours.dequantize();
        for (i, (a, b)) in back.iter().zip(floats(&case["dequantized"])).enumerate() {
            assert_eq!(
                a.to_bits(),
                b.to_bits(),
                "{name}: value {i}: {a} against {b}"
            );
        }
    }
}
