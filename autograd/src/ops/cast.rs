//! Casts, and the casts autocast inserts.

use headroom_kernels::DType;

use super::rule;
use crate::autocast::autocast_dtype;
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// The values converted to `dtype` (itself, no copy, when it already is); the gradient is
    /// cast back to this tensor's dtype.
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        let y = Tensor::output(self.array().cast(dtype)?);
        if let Some(rec) = begin(&[self]) {
            let from = self.dtype();
            rec.finish(
                "cast",
                &[&y],
                saves(&[]),
                rule(move |g, _| Ok(vec![Some(g.cast(from)?)])),
            );
        }
        Ok(y)
    }

    /// This tensor as a matrix product's operand: cast to the autocast dtype when a policy
    /// applies and it holds f32 (or the other half type), itself otherwise. Products cast their
    /// operands anyway; a model casts early to release the wider tensor sooner (a norm's f32
    /// output that only feeds a sublayer's first product).
    pub fn for_matmul(&self) -> Result<Tensor> {
        match autocast_dtype() {
            Some(half) if self.dtype() != DType::F64 => self.cast(half),
            _ => Ok(self.clone()),
        }
    }

    /// This tensor as the operand of an op that autocast runs in f32 (softmax, norms, losses,
    /// reductions): cast to f32 when a policy applies and it holds a half type.
    pub(crate) fn for_f32_op(&self) -> Result<Tensor> {
        match (autocast_dtype(), self.dtype()) {
            (Some(_), DType::BF16 | DType::F16) => self.cast(DType::F32),
            _ => Ok(self.clone()),
        }
    }
}
