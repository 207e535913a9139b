//! Finding non-finite values (NaN, infinities) in a checkpoint's raw tensor bytes, on the host,
//! before any of them reaches a device.

use headroom_kernels::DType;

/// A tensor's non-finite values: the first one in the file's (row-major) order and how many
/// there are.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NonFinite {
    /// The first one's index, one coordinate per dimension of the stored shape.
    pub index: Vec<usize>,
    /// What it is: `NaN`, `inf` or `-inf`.
    pub value: &'static str,
    /// How many elements are not finite.
    pub count: usize,
}

impl NonFinite {
    /// The finding as a phrase: `holds NaN at [3, 7] (2 non-finite values in all)`.
    pub fn describe(&self) -> String {
        let index: Vec<String> = self.index.iter().map(usize::to_string).collect();
        let mut text = format!("holds {} at [{}]", self.value, index.join(", "));
        if self.count > 1 {
            text.push_str(&format!(" ({} non-finite values in all)", self.count));
        }
        text.push_str("; the weights must be finite numbers");
        text
    }
}

/// The non-finite values of `data`, little-endian elements of `dtype` in a tensor of shape
/// `dims`; `None` when all are finite (or `dtype` is not floating point).
pub(crate) fn non_finite(data: &[u8], dtype: DType, dims: &[usize]) -> Option<NonFinite> {
    let size = dtype.size();
    let classify = |bytes: &[u8]| -> Option<&'static str> {
        // An IEEE float is not finite when its exponent bits are all ones: an infinity when
        // the mantissa is zero (the sign telling which), a NaN otherwise.
        let (bits, exponent, mantissa, sign) = match dtype {
            DType::F16 => (
                u16::from_le_bytes([bytes[0], bytes[1]]) as u64,
                0x7C00,
                0x03FF,
                0x8000,
            ),
            DType::BF16 => (
                u16::from_le_bytes([bytes[0], bytes[1]]) as u64,
                0x7F80,
                0x007F,
                0x8000,
            ),
            DType::F32 => (
                u32::from_le_bytes(bytes.try_into().ok()?) as u64,
                0x7F80_0000,
                0x007F_FFFF,
                0x8000_0000,
            ),
            DType::F64 => (
                u64::from_le_bytes(bytes.try_into().ok()?),
                0x7FF0_0000_0000_0000,
                0x000F_FFFF_FFFF_FFFF,
                0x8000_0000_0000_0000,
            ),
            _ => return None,
        };
        match (
            bits & exponent == exponent,
            bits & mantissa == 0,
            bits & sign != 0,
        ) {
            (false, _, _) => None,
            (true, false, _) => Some("NaN"),
            (true, true, false) => Some("inf"),
            (true, true, true) => Some("-inf"),
        }
    };
    let mut found: Option<NonFinite> = None;
    for (at, element) in data.chunks_exact(size).enumerate() {
        let Some(value) = classify(element) else {
            continue;
        };
        match &mut found {
            Some(found) => found.count += 1,
            None => {
                found = Some(NonFinite {
                    index: unravel(at, dims),
                    value,
                    count: 1,
                })
            }
        }
    }
    found
}

/// The row-major coordinates of the flat index `at` in a tensor of shape `dims`.
fn unravel(mut at: usize, dims: &[usize]) -> Vec<usize> {
    let mut index = vec![0; dims.len()];
    for (coordinate, &dim) in index.iter_mut().zip(dims).rev() {
        if dim > 0 {
            *coordinate = at % dim;
            at /= dim;
        }
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_bytes(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn the_first_non_finite_value_is_found_with_its_coordinates_and_the_count() {
        let data = f32_bytes(&[
            0.0,
            1.0,
            -2.0,
            f32::MAX,
            4.0,
            f32::NEG_INFINITY,
            6.0,
            f32::NAN,
        ]);
        let found = non_finite(&data, DType::F32, &[2, 4]).unwrap();
        assert_eq!(found.index, vec![1, 1]);
        assert_eq!((found.value, found.count), ("-inf", 2));
        assert_eq!(
            found.describe(),
            "holds -inf at [1, 1] (2 non-finite values in all); the weights must be finite numbers"
        );
        assert_eq!(
            non_finite(&f32_bytes(&[1.0, f32::MIN]), DType::F32, &[2]),
            None
        );
    }

    #[test]
    fn half_precision_and_f64_values_are_classified_by_their_exponent() {
        // f16: 0x7C00 is inf, 0x7E00 a NaN, 0x7BFF the largest finite value.
        let f16: Vec<u8> = [0x7BFFu16, 0x7E00, 0xFC00]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect();
        let found = non_finite(&f16, DType::F16, &[3]).unwrap();
        assert_eq!((found.index, found.value, found.count), (vec![1], "NaN", 2));
        // bf16: 0x7F80 is inf, 0x7F7F the largest finite value.
        let bf16: Vec<u8> = [0x7F7Fu16, 0x7F80]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect();
        assert_eq!(non_finite(&bf16, DType::BF16, &[2]).unwrap().value, "inf");
        let f64: Vec<u8> = [1.0f64, f64::NAN]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            non_finite(&f64, DType::F64, &[1, 2]).unwrap().index,
            vec![0, 1]
        );
    }
}
