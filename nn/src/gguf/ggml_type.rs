//! The types a GGUF tensor's values are stored in (ggml's `ggml_type`), with the size of each
//! type's blocks, so that every tensor's extent in the file is known whether or not it can be
//! dequantized.

use std::fmt;

/// How a tensor's values are stored: ggml's type, its id in the file, and its blocks: a block
/// holds [`block_len`](Self::block_len) values in [`block_bytes`](Self::block_bytes) bytes.
#[allow(
    non_camel_case_types,
    reason = "ggml's own names, as files and tools spell them"
)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GgufType {
    /// 32-bit floats (id 0).
    F32,
    /// IEEE half floats (id 1).
    F16,
    /// Blocks of 32: a half-float scale, 4-bit codes offset by 8 (id 2).
    Q4_0,
    /// Blocks of 32: a scale and a minimum, 4-bit codes (id 3).
    Q4_1,
    /// Blocks of 32: a scale, 5-bit codes offset by 16 (id 6).
    Q5_0,
    /// Blocks of 32: a scale and a minimum, 5-bit codes (id 7).
    Q5_1,
    /// Blocks of 32: a scale, 8-bit signed codes (id 8).
    Q8_0,
    /// Blocks of 32: a scale and a sum, 8-bit codes (id 9, an intermediate of ggml's products).
    Q8_1,
    /// Super-blocks of 256: 2-bit codes, 4-bit scales and minimums (id 10).
    Q2_K,
    /// Super-blocks of 256: 3-bit codes, 6-bit scales (id 11).
    Q3_K,
    /// Super-blocks of 256: 4-bit codes, 6-bit scales and minimums (id 12).
    Q4_K,
    /// Super-blocks of 256: 5-bit codes, 6-bit scales and minimums (id 13).
    Q5_K,
    /// Super-blocks of 256: 6-bit codes, 8-bit scales (id 14).
    Q6_K,
    /// Super-blocks of 256, 8-bit codes (id 15, an intermediate of ggml's products).
    Q8_K,
    /// id 16.
    IQ2_XXS,
    /// id 17.
    IQ2_XS,
    /// id 18.
    IQ3_XXS,
    /// id 19.
    IQ1_S,
    /// id 20.
    IQ4_NL,
    /// id 21.
    IQ3_S,
    /// id 22.
    IQ2_S,
    /// id 23.
    IQ4_XS,
    /// 8-bit integers (id 24).
    I8,
    /// 16-bit integers (id 25).
    I16,
    /// 32-bit integers (id 26).
    I32,
    /// 64-bit integers (id 27).
    I64,
    /// 64-bit floats (id 28).
    F64,
    /// id 29.
    IQ1_M,
    /// bfloat16 (id 30).
    BF16,
    /// id 34.
    TQ1_0,
    /// id 35.
    TQ2_0,
    /// id 39.
    MXFP4,
    /// id 40.
    NVFP4,
    /// id 41.
    Q1_0,
}

/// Every type, in the order of their ids.
const TYPES: [GgufType; 34] = {
    use GgufType::*;
    [
        F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ2_XXS,
        IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS, I8, I16, I32, I64, F64, IQ1_M, BF16,
        TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0,
    ]
};

impl GgufType {
    /// The type of ggml type id `id`, if ggml has one.
    pub fn from_id(id: u32) -> Option<Self> {
        TYPES.into_iter().find(|t| t.id() == id)
    }

    /// ggml's id of this type, the values of one block and its bytes (ggml's `type_traits`).
    fn traits(self) -> (u32, usize, usize) {
        use GgufType::*;
        const K: usize = 256;
        match self {
            F32 => (0, 1, 4),
            F16 => (1, 1, 2),
            Q4_0 => (2, 32, 2 + 16),
            Q4_1 => (3, 32, 2 + 2 + 16),
            Q5_0 => (6, 32, 2 + 4 + 16),
            Q5_1 => (7, 32, 2 + 2 + 4 + 16),
            Q8_0 => (8, 32, 2 + 32),
            Q8_1 => (9, 32, 4 + 4 + 32),
            Q2_K => (10, K, 2 + 2 + K / 16 + K / 4),
            Q3_K => (11, K, 2 + K / 4 + K / 8 + 12),
            Q4_K => (12, K, 2 + 2 + K / 2 + 12),
            Q5_K => (13, K, 2 + 2 + K / 2 + K / 8 + 12),
            Q6_K => (14, K, 2 + K / 2 + K / 4 + K / 16),
            Q8_K => (15, K, 4 + K + K / 8),
            IQ2_XXS => (16, K, 2 + K / 4),
            IQ2_XS => (17, K, 2 + K / 4 + K / 32),
            IQ3_XXS => (18, K, 2 + K / 4 + K / 8),
            IQ1_S => (19, K, 2 + K / 8 + K / 16),
            IQ4_NL => (20, 32, 2 + 16),
            IQ3_S => (21, K, 2 + K / 4 + K / 8 + K / 32 + 4),
            IQ2_S => (22, K, 2 + K / 4 + K / 16),
            IQ4_XS => (23, K, 2 + 2 + K / 2 + K / 64),
            I8 => (24, 1, 1),
            I16 => (25, 1, 2),
            I32 => (26, 1, 4),
            I64 => (27, 1, 8),
            F64 => (28, 1, 8),
            IQ1_M => (29, K, K / 8 + K / 16 + K / 32),
            BF16 => (30, 1, 2),
            TQ1_0 => (34, K, 2 + 4 * 13),
            TQ2_0 => (35, K, 2 + 64),
            MXFP4 => (39, 32, 1 + 16),
            NVFP4 => (40, 64, 4 + 32),
            Q1_0 => (41, 128, 2 + 16),
        }
    }

    /// ggml's id of this type.
    pub fn id(self) -> u32 {
        self.traits().0
    }

    /// How many values one block holds (1 for the plain types).
    pub fn block_len(self) -> usize {
        self.traits().1
    }

    /// How many bytes one block takes.
    pub fn block_bytes(self) -> usize {
        self.traits().2
    }

    /// True for the types [`GgufFile::read_f32`](super::GgufFile::read_f32) dequantizes.
    pub fn is_dequantized(self) -> bool {
        use GgufType::*;
        matches!(
            self,
            F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q2_K | Q3_K | Q4_K | Q5_K | Q6_K
        )
    }

    /// True for the types [`quantize`](super::quantize) stores f32 values in.
    pub fn is_written(self) -> bool {
        use GgufType::*;
        matches!(self, F32 | F16 | BF16 | Q8_0 | Q4_0 | Q5_0 | Q4_K)
    }
}

impl fmt::Display for GgufType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_has_its_row() {
        for ty in TYPES {
            assert_eq!(GgufType::from_id(ty.id()), Some(ty));
        }
        assert!(TYPES.windows(2).all(|w| w[0].id() < w[1].id()));
        for id in [4, 5, 31, 32, 33, 36, 37, 38, 42, u32::MAX] {
            assert_eq!(GgufType::from_id(id), None, "{id}");
        }
        // ggml-common.h's static asserts on the blocks read here.
        assert_eq!(GgufType::Q4_K.block_bytes(), 144);
        assert_eq!(GgufType::Q5_K.block_bytes(), 176);
        assert_eq!(GgufType::Q6_K.block_bytes(), 210);
        assert_eq!(GgufType::Q2_K.block_bytes(), 84);
        assert_eq!(GgufType::Q3_K.block_bytes(), 110);
    }
}
