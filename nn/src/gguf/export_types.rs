//! Which type each tensor of an exported model is stored in: the quantization asked for, the
//! plain floats where llama.cpp keeps them, and llama.cpp's fallbacks for rows that are not
//! whole blocks of it.

use std::fmt;
use std::str::FromStr;

use super::GgufType;
use super::llama_layout::ROPE_FREQS;

/// The quantization of an exported model's matrices (`--quant`), as llama.cpp names it.
///
/// Vectors (norms, biases, `rope_freqs.weight`) and every `*_norm.weight` stay F32, as
/// llama.cpp's converter keeps them. F32, F16, BF16 and Q8_0 are the converter's
/// (`convert_hf_to_gguf.py --outtype`); a matrix whose rows are not whole blocks of 32 falls
/// back to F16 there, and so here. Q4_0 and Q4_K are what `llama-quantize --pure` makes of a
/// float model (every matrix in that type, the output and token embedding included): its
/// fallback for Q4_K is Q5_0, or F16 where rows are not whole blocks of 32 either; for Q4_0
/// it has none (it refuses), so F16 here, as the converter.
#[allow(non_camel_case_types, reason = "llama.cpp's names")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgufQuant {
    /// f32 throughout.
    F32,
    /// IEEE half floats.
    F16,
    /// bfloat16.
    BF16,
    /// Blocks of 32 8-bit codes and a half-float scale: 8.5 bits a value.
    Q8_0,
    /// Blocks of 32 4-bit codes and a half-float scale: 4.5 bits a value.
    Q4_0,
    /// Super-blocks of 256 4-bit codes with 6-bit scales and minimums: 4.5 bits a value.
    Q4_K,
}

impl GgufQuant {
    /// Every one, in the order of their names.
    pub const ALL: [GgufQuant; 6] = [
        Self::F32,
        Self::F16,
        Self::BF16,
        Self::Q8_0,
        Self::Q4_0,
        Self::Q4_K,
    ];

    /// Its name as `--quant` and llama.cpp spell it: `f32`, `f16`, `bf16`, `q8_0`, `q4_0`,
    /// `q4_k`.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::BF16 => "bf16",
            Self::Q8_0 => "q8_0",
            Self::Q4_0 => "q4_0",
            Self::Q4_K => "q4_k",
        }
    }

    /// The type of its matrices, before any fallback.
    pub fn matrix_type(self) -> GgufType {
        match self {
            Self::F32 => GgufType::F32,
            Self::F16 => GgufType::F16,
            Self::BF16 => GgufType::BF16,
            Self::Q8_0 => GgufType::Q8_0,
            Self::Q4_0 => GgufType::Q4_0,
            Self::Q4_K => GgufType::Q4_K,
        }
    }

    /// llama.cpp's `general.file_type` of a file of this quantization (`llama_ftype`:
    /// `MOSTLY_Q4_K_S` for Q4_K, whose type `--pure` gives every matrix).
    pub fn file_type(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q8_0 => 7,
            Self::Q4_K => 14,
            Self::BF16 => 32,
        }
    }

    /// The type the tensor `name` (llama.cpp's name) of row-major `shape` is stored in.
    pub fn tensor_type(self, name: &str, shape: &[usize]) -> GgufType {
        if shape.len() < 2 || name.ends_with("_norm.weight") || name == ROPE_FREQS {
            return GgufType::F32;
        }
        let row = shape.last().copied().unwrap_or(1);
        let fits = |ty: GgufType| row.is_multiple_of(ty.block_len());
        let wanted = self.matrix_type();
        match (fits(wanted), wanted) {
            (true, ty) => ty,
            (false, GgufType::Q4_K) if fits(GgufType::Q5_0) => GgufType::Q5_0,
            (false, _) => GgufType::F16,
        }
    }
}

impl fmt::Display for GgufQuant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for GgufQuant {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let lower = text.to_ascii_lowercase();
        Self::ALL
            .into_iter()
            .find(|q| q.name() == lower)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|q| q.name()).collect();
                format!("{text} is not one of {}", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_and_norms_stay_f32_and_odd_rows_fall_back() {
        use GgufType as T;
        for quant in GgufQuant::ALL {
            assert_eq!(quant.tensor_type("blk.0.attn_norm.weight", &[576]), T::F32);
            assert_eq!(quant.tensor_type("blk.0.attn_q.bias", &[576]), T::F32);
            assert_eq!(quant.tensor_type(ROPE_FREQS, &[32]), T::F32);
            assert_eq!(
                quant.tensor_type("blk.0.attn_q_norm.weight", &[1, 64]),
                T::F32
            );
            assert_eq!(quant.name().parse::<GgufQuant>(), Ok(quant));
        }
        // SmolLM2-135M: width 576 (not whole blocks of 256), MLP width 1536 (6 of them).
        let q4_k = GgufQuant::Q4_K;
        assert_eq!(
            q4_k.tensor_type("blk.0.attn_q.weight", &[576, 576]),
            T::Q5_0
        );
        assert_eq!(
            q4_k.tensor_type("blk.0.ffn_down.weight", &[576, 1536]),
            T::Q4_K
        );
        assert_eq!(
            q4_k.tensor_type("token_embd.weight", &[49152, 576]),
            T::Q5_0
        );
        assert_eq!(q4_k.tensor_type("x.weight", &[2, 48]), T::F16);
        assert_eq!(GgufQuant::Q8_0.tensor_type("x.weight", &[2, 48]), T::F16);
        assert_eq!(GgufQuant::Q4_0.tensor_type("x.weight", &[2, 48]), T::F16);
        assert_eq!(GgufQuant::Q4_0.tensor_type("x.weight", &[2, 64]), T::Q4_0);
        assert_eq!(GgufQuant::BF16.tensor_type("x.weight", &[2, 3]), T::BF16);
        assert_eq!("Q4_K".parse::<GgufQuant>(), Ok(q4_k));
        let err = "q4_k_m".parse::<GgufQuant>().unwrap_err();
        assert_eq!(err, "q4_k_m is not one of f32, f16, bf16, q8_0, q4_0, q4_k");
    }
}
