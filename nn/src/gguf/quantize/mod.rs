//! f32 values stored as a GGUF tensor type, as ggml's reference quantizers store them
//! (`quantize_row_*_ref` in ggml-quants.c), one file per family of types: the plain floats,
//! ggml's blocks of 32 (Q8_0, Q4_0, Q5_0) and the K-quant Q4_K.
//!
//! Each is bit for bit what llama.cpp's Python `gguf` package (`gguf.quants.quantize`) writes
//! for the types it quantizes, and for Q4_K what ggml's C code computes on x86-64, where its
//! reference quantizers are built without fused multiply-adds (tested on vectors made by
//! `scripts/gguf/make_quant_vectors.py`).

mod float;
mod k_quants;
mod legacy;

use super::GgufType;
use crate::error::{Error, Result};

/// The stored bytes of `values` in type `ty`, their blocks one after the other: a count of
/// values that is not whole blocks, a type not written here ([`GgufType::is_written`]) and,
/// for the block types, a value that is not finite are errors.
pub fn quantize(ty: GgufType, values: &[f32]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    quantize_into(ty, values, &mut out)
        .map_err(|detail| Error::config("GGUF quantization", detail))?;
    Ok(out)
}

/// [`quantize`], appending to `out`.
pub(crate) fn quantize_into(ty: GgufType, values: &[f32], out: &mut Vec<u8>) -> Result<(), String> {
    if !values.len().is_multiple_of(ty.block_len()) {
        return Err(format!(
            "{} values are not whole blocks of {} ({ty})",
            values.len(),
            ty.block_len()
        ));
    }
    if ty.block_len() > 1
        && let Some(at) = values.iter().position(|v| !v.is_finite())
    {
        return Err(format!(
            "value {at} is {}: {ty} blocks hold finite values only",
            values[at]
        ));
    }
    out.reserve(values.len() / ty.block_len() * ty.block_bytes());
    let quantize = match ty {
        GgufType::F32 => float::f32s,
        GgufType::F16 => float::f16s,
        GgufType::BF16 => float::bf16s,
        GgufType::Q8_0 => legacy::q8_0,
        GgufType::Q4_0 => legacy::q4_0,
        GgufType::Q5_0 => legacy::q5_0,
        GgufType::Q4_K => k_quants::q4_k,
        _ => return Err(format!("{ty} (type id {}) is not written here", ty.id())),
    };
    quantize(values, out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::dequant::dequantize;

    /// Values of a few magnitudes and both signs, a block of zeros among them.
    fn values(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| match i / 32 {
                1 => 0.0,
                _ => ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * (1 + i % 3) as f32,
            })
            .collect()
    }

    #[test]
    fn every_type_said_to_be_written_is_and_reads_back_close() {
        let x = values(512);
        for id in 0..64 {
            let Some(ty) = GgufType::from_id(id) else {
                continue;
            };
            let Ok(bytes) = quantize(ty, &x) else {
                assert!(!ty.is_written(), "{ty}");
                continue;
            };
            assert!(ty.is_written(), "{ty}");
            assert_eq!(bytes.len(), 512 / ty.block_len() * ty.block_bytes(), "{ty}");
            let mut back = vec![0.0; 512];
            dequantize(ty, &bytes, &mut back).unwrap();
            let worst = x
                .iter()
                .zip(&back)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            let bound = match ty {
                GgufType::F32 => 0.0,
                GgufType::F16 => 1e-3,
                GgufType::BF16 => 1e-2,
                GgufType::Q8_0 => 0.03,
                _ => 0.5,
            };
            assert!(worst <= bound, "{ty}: {worst}");
            assert!(back[32..64].iter().all(|&v| v == 0.0), "{ty}");
        }
    }

    #[test]
    fn partial_blocks_and_non_finite_values_are_refused() {
        let err = quantize(GgufType::Q8_0, &[0.0; 33])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("33 values are not whole blocks of 32 (Q8_0)"),
            "{err}"
        );
        let mut x = vec![0.0; 32];
        x[5] = f32::NAN;
        let err = quantize(GgufType::Q4_0, &x).unwrap_err().to_string();
        assert!(err.contains("value 5 is NaN"), "{err}");
        assert!(quantize(GgufType::F16, &x).is_ok());
        let err = quantize(GgufType::Q6_K, &[0.0; 256])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("Q6_K (type id 14) is not written here"),
            "{err}"
        );
    }
}
