//! CUDA kernels: softmax and log-softmax over the last axis (`softmax.cu`).

use crate::backend::rows::RowSpec;
use crate::backend::softmax::{SoftmaxKernels, SoftmaxKind, SoftmaxSpec};
use crate::buffer::Buffer;
use crate::cuda::rows::{BACKWARD, FORWARD, SOFTMAX};
use crate::cuda::{CudaBackend, Family, float_kernel};
use crate::error::Result;

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
