//! The values of one array on the host, in any dtype a device holds.

use half::{bf16, f16};
use headroom_autograd::Tensor;
use headroom_kernels::{DType, Device};

use crate::error::Result;

/// An array's values, in their own dtype.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// 32-bit floats.
    F32(Vec<f32>),
    /// 64-bit floats.
    F64(Vec<f64>),
    /// IEEE half floats.
    F16(Vec<f16>),
    /// bfloat16.
    BF16(Vec<bf16>),
    /// Unsigned 32-bit integers (ids, classes).
    U32(Vec<u32>),
    /// Signed 32-bit integers.
    I32(Vec<i32>),
    /// Bytes (masks, flags).
    U8(Vec<u8>),
}

/// Runs `$body` with `$v` bound to the vector inside `$values`, whatever its dtype.
macro_rules! each_dtype {
    ($values:expr, $v:ident => $body:expr) => {
        match $values {
            Values::F32($v) => $body,
            Values::F64($v) => $body,
            Values::F16($v) => $body,
            Values::BF16($v) => $body,
            Values::U32($v) => $body,
            Values::I32($v) => $body,
            Values::U8($v) => $body,
        }
    };
}

/// Builds the variant of `$values`'s dtype around `$body` (with `$v` the vector inside).
macro_rules! same_dtype {
    ($values:expr, $v:ident => $body:expr) => {
        match $values {
            Values::F32($v) => Values::F32($body),
            Values::F64($v) => Values::F64($body),
            Values::F16($v) => Values::F16($body),
            Values::BF16($v) => Values::BF16($body),
            Values::U32($v) => Values::U32($body),
            Values::I32($v) => Values::I32($body),
            Values::U8($v) => Values::U8($body),
        }
    };
}

impl Values {
    /// No values, of `dtype`.
    pub fn empty(dtype: DType) -> Self {
        match dtype {
            DType::F32 => Values::F32(Vec::new()),
            DType::F64 => Values::F64(Vec::new()),
            DType::F16 => Values::F16(Vec::new()),
            DType::BF16 => Values::BF16(Vec::new()),
            DType::U32 => Values::U32(Vec::new()),
            DType::I32 => Values::I32(Vec::new()),
            DType::U8 => Values::U8(Vec::new()),
        }
    }

    /// Their dtype.
    pub fn dtype(&self) -> DType {
        match self {
            Values::F32(_) => DType::F32,
            Values::F64(_) => DType::F64,
            Values::F16(_) => DType::F16,
            Values::BF16(_) => DType::BF16,
            Values::U32(_) => DType::U32,
            Values::I32(_) => DType::I32,
            Values::U8(_) => DType::U8,
        }
    }

    /// How many.
    pub fn len(&self) -> usize {
        each_dtype!(self, v => v.len())
    }

    /// True without values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as ids or classes, when they are U32.
    pub fn as_u32(&self) -> Option<&[u32]> {
        match self {
            Values::U32(v) => Some(v),
            _ => None,
        }
    }

    /// Values `start..end`.
    pub fn slice(&self, start: usize, end: usize) -> Self {
        same_dtype!(self, v => v[start..end].to_vec())
    }

    /// Appends `other`'s values; false (and nothing appended) when its dtype differs.
    pub(crate) fn append(&mut self, other: &Values) -> bool {
        match (self, other) {
            (Values::F32(a), Values::F32(b)) => a.extend_from_slice(b),
            (Values::F64(a), Values::F64(b)) => a.extend_from_slice(b),
            (Values::F16(a), Values::F16(b)) => a.extend_from_slice(b),
            (Values::BF16(a), Values::BF16(b)) => a.extend_from_slice(b),
            (Values::U32(a), Values::U32(b)) => a.extend_from_slice(b),
            (Values::I32(a), Values::I32(b)) => a.extend_from_slice(b),
            (Values::U8(a), Values::U8(b)) => a.extend_from_slice(b),
            _ => return false,
        }
        true
    }

    /// The values as a tensor of shape `dims` on `device`.
    pub(crate) fn to_tensor(&self, device: &Device, dims: &[usize]) -> Result<Tensor> {
        Ok(each_dtype!(self, v => Tensor::from_host(device, dims, v))?)
    }
}

macro_rules! from_vec {
    ($($t:ty => $variant:ident),*) => {$(
        impl From<Vec<$t>> for Values {
            fn from(values: Vec<$t>) -> Self {
                Values::$variant(values)
            }
        }
    )*};
}

from_vec!(f32 => F32, f64 => F64, f16 => F16, bf16 => BF16, u32 => U32, i32 => I32, u8 => U8);

#[cfg(test)]
mod tests {
    use headroom_kernels::DeviceConfig;

    use super::*;

    #[test]
    fn values_append_slice_and_go_to_the_device_in_their_own_dtype() {
        let mut ids = Values::empty(DType::U32);
        assert!(ids.append(&vec![1u32, 2].into()));
        assert!(ids.append(&vec![3u32].into()));
        assert!(!ids.append(&vec![4.0f32].into()), "another dtype");
        assert_eq!(ids, Values::U32(vec![1, 2, 3]));
        assert_eq!(ids.slice(1, 3).as_u32(), Some(&[2u32, 3][..]));
        let cpu = Device::cpu(DeviceConfig::new(1 << 20)).unwrap();
        let mask = Values::from(vec![1u8, 0, 1, 1]);
        let tensor = mask.to_tensor(&cpu, &[2, 2]).unwrap();
        assert_eq!(tensor.dtype(), DType::U8);
        assert_eq!(tensor.to_f64().unwrap(), [1.0, 0.0, 1.0, 1.0]);
        assert!(mask.to_tensor(&cpu, &[3]).is_err(), "a shape of other size");
    }
}
