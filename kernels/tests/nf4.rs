//! NF4 against bitsandbytes: the level indices, their packing, the block absmaxes and the
//! dequantized values of every case in `data/nf4.json` (made by
//! `scripts/quant/make_nf4_vectors.py` with bitsandbytes' `quantize_4bit`), to the bit.

use headroom_kernels::quantize::nf4::{LEVELS, Nf4};
use serde_json::Value;

fn floats(bits: &Value) -> Vec<f32> {
    bits.as_array()
        .expect("a list of float bits")
        .iter()
        .map(|b| f32::from_bits(b.as_u64().expect("bits") as u32))
        .collect()
}

fn reference() -> Value {
    let text = include_str!("data/nf4.json");
    serde_json::from_str(text).expect("nf4.json parses")
}

#[test]
fn the_levels_are_bitsandbytes_code_book() {
    let code = floats(&reference()["code"]);
    assert_eq!(
        code.iter().map(|c| c.to_bits()).collect::<Vec<_>>(),
        LEVELS.map(f32::to_bits)
    );
}

#[test]
fn quantization_and_dequantization_match_bitsandbytes_to_the_bit() {
    let reference = reference();
    let cases = reference["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 6);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let block = case["blocksize"].as_u64().unwrap() as usize;
        let input = floats(&case["input"]);
        let q = Nf4::quantize(&input, block).unwrap();
        let packed: Vec<u8> = case["packed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as u8)
            .collect();
        assert_eq!(q.packed, packed, "{name}: the packed indices");
        let absmax = floats(&case["absmax"]);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&q.absmax), bits(&absmax), "{name}: the absmaxes");
        let back = floats(&case["dequantized"]);
        assert_eq!(
            bits(&q.dequantize()),
            bits(&back),
            "{name}: the dequantized values"
        );
        assert_eq!(
            q.bytes(),
            input.len().div_ceil(2) + 4 * input.len().div_ceil(block)
        );
    }
}

#[test]
fn every_value_lands_on_its_nearest_level_and_nf4_takes_about_an_eighth_of_f32() {
    let values: Vec<f32> = (0..4096)
        .map(|i| ((i * 37 % 1000) as f32 / 500.0 - 1.0) * 0.05)
        .collect();
    let q = Nf4::quantize(&values, 64).unwrap();
    let back = q.dequantize();
    for (i, (&v, &b)) in values.iter().zip(&back).enumerate() {
        let scale = q.absmax[i / 64];
        let nearest = LEVELS
            .iter()
            .map(|l| (l * scale - v).abs())
            .fold(f32::INFINITY, f32::min);
        assert!(
            (b - v).abs() <= nearest * (1.0 + 1e-6) + 1e-12,
            "value {i}: {v} came back {b}"
        );
    }
    // 4.5 bits a value with f32 absmaxes over blocks of 64: 0.14 of f32's bytes.
    assert_eq!(q.bytes(), 2048 + 4 * 64);
    assert!((q.bytes() as f64) < 0.15 * (4 * values.len()) as f64);
}

#[test]
fn bad_blocks_and_non_finite_values_are_errors_naming_them() {
    for block in [0, 63] {
        let err = Nf4::quantize(&[1.0; 8], block).unwrap_err().to_string();
        assert!(err.contains(&format!("blocks of {block}")), "{err}");
    }
    let err = Nf4::quantize(&[1.0, f32::NAN, 2.0], 64)
        .unwrap_err()
        .to_string();
    assert!(err.contains("value 1 is NaN"), "{err}");
}
