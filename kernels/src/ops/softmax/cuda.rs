//! CUDA kernels: softmax and log-softmax over the last axis (`softmax.cu`).

use super::kernels::{SoftmaxKernels, SoftmaxKind, SoftmaxSpec};
use crate::buffer::Buffer;
use crate::cuda::{CudaBackend, Family, float_kernel};
use crate::error::Result;
use crate::ops::rows::cuda::{BACKWARD, FORWARD, RowKernels};
use crate::ops::rows::spec::RowSpec;

/// Softmax's row kernels (`softmax.cu`).
const SOFTMAX: RowKernels = RowKernels {
    forward: "softmax",
    backward: "softmax_backward",
};

/// Every row kernel of `softmax.cu` the backend may launch, without its dtype suffix
/// (`softmax_256x16`), for checks that each is in the compiled module.
pub fn row_kernels() -> Vec<String> {
    SOFTMAX.stems()
}

impl SoftmaxKernels for CudaBackend {
    fn softmax(
        &self,
        softmax: SoftmaxSpec,
        spec: RowSpec,
        x: &Buffer,
        y: &mut Buffer,
    ) -> Result<()> {
        let op = softmax.kind.name();
        float_kernel(SOFTMAX.forward, x.dtype(), op)?;
        if y.is_empty() || spec.len == 0 {
            return Ok(());
        }
        let (name, grid) = self.row_kernel(SOFTMAX.forward, x.dtype(), op, spec, &FORWARD)?;
        let args = [
            (softmax.kind == SoftmaxKind::LogSoftmax).into(),
            softmax.scale.into(),
            softmax.causal.into(),
            x.into(),
            y.into(),
            spec.rows.into(),
            spec.len.into(),
        ];
        self.launch(op, Family::Softmax, &name, grid, &args)
    }

    fn softmax_backward(
        &self,
        softmax: SoftmaxSpec,
        spec: RowSpec,
        y: &Buffer,
        dy: &Buffer,
        dx: &mut Buffer,
    ) -> Result<()> {
        let op = softmax.kind.backward_name();
        float_kernel(SOFTMAX.backward, y.dtype(), op)?;
        if dx.is_empty() || spec.len == 0 {
            return Ok(());
        }
        let (name, grid) = self.row_kernel(SOFTMAX.backward, y.dtype(), op, spec, &BACKWARD)?;
        let args = [
            (softmax.kind == SoftmaxKind::LogSoftmax).into(),
            softmax.scale.into(),
            softmax.causal.into(),
            y.into(),
            dy.into(),
            dx.into(),
            spec.rows.into(),
            spec.len.into(),
        ];
        self.launch(op, Family::Softmax, &name, grid, &args)
    }
}
