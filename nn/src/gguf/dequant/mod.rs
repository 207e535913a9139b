//! Dequantization of whole blocks of a tensor's bytes to f32, one file per family of types:
//! the plain floats, ggml's blocks of 32 and its K-quants.

mod float;
mod k_quants;
mod legacy;

use super::GgufType;

pub(crate) use float::f16_to_f32;

/// Writes the values of `bytes`, whole blocks of `ty`, into `out`, which holds exactly as many
/// values as they do; a type not dequantized here is an error naming it.
pub(super) fn dequantize(ty: GgufType, bytes: &[u8], out: &mut [f32]) -> Result<(), String> {
    let blocks = bytes.len() / ty.block_bytes();
    if blocks * ty.block_bytes() != bytes.len() || blocks * ty.block_len() != out.len() {
        return Err(format!(
            "{} bytes of {ty} are not the {} values asked for",
            bytes.len(),
            out.len()
        ));
    }
    let dequantize = match ty {
        GgufType::F32 => float::f32s,
        GgufType::F16 => float::f16s,
        GgufType::BF16 => float::bf16s,
        GgufType::Q4_0 => legacy::q4_0,
        GgufType::Q4_1 => legacy::q4_1,
        GgufType::Q5_0 => legacy::q5_0,
        GgufType::Q5_1 => legacy::q5_1,
        GgufType::Q8_0 => legacy::q8_0,
        GgufType::Q2_K => k_quants::q2_k,
        GgufType::Q3_K => k_quants::q3_k,
        GgufType::Q4_K => k_quants::q4_k,
        GgufType::Q5_K => k_quants::q5_k,
        GgufType::Q6_K => k_quants::q6_k,
        _ => {
            return Err(format!(
                "{ty} (type id {}) is not dequantized here",
                ty.id()
            ));
        }
    };
    dequantize(bytes, out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_said_to_be_dequantized_is() {
        for id in 0..64 {
            let Some(ty) = GgufType::from_id(id) else {
                continue;
            };
            let bytes = vec![0; ty.block_bytes() * 2];
            let mut out = vec![f32::NAN; ty.block_len() * 2];
            let done = dequantize(ty, &bytes, &mut out);
            assert_eq!(done.is_ok(), ty.is_dequantized(), "{ty}");
            if done.is_ok() {
                assert!(out.iter().all(|&v| v == 0.0), "{ty}");
            }
        }
    }

    #[test]
    fn mismatched_lengths_are_errors() {
        assert!(dequantize(GgufType::Q4_0, &[0; 18], &mut [0.0; 31]).is_err());
        assert!(dequantize(GgufType::Q4_0, &[0; 17], &mut [0.0; 32]).is_err());
        assert!(dequantize(GgufType::F32, &[0; 8], &mut [0.0; 2]).is_ok());
    }
}
