//! CUDA kernels: softmax and layer normalization over the last axis (`norm.cu`).

use cudarc::driver::LaunchConfig;

use super::{NormKernels, RowSpec, SoftmaxKind, SoftmaxSpec, parameter_partials};
use crate::buffer::Buffer;
use crate::cuda::{Arg, BLOCK, CudaBackend, Family, float_kernel};
use crate::dtype::DType;
use crate::error::Result;

/// The row caches the forward kernels are instantiated for (`norm.cu`: each thread keeps N
/// elements of its row in registers).
const FORWARD_CACHES: [usize; 3] = [8, 16, 32];

/// The same for the backward kernels, which keep N elements of each of two rows.
const BACKWARD_CACHES: [usize; 3] = [4, 8, 16];

impl CudaBackend {
    /// The name and grid of row kernel `kernel` (`softmax_256x16_f32`) over `spec`'s rows: a
    /// warp per row when the largest of `caches` lets one hold it, else a block; and the least
    /// cache whose group holds the row (the smallest where none does: the row is read again per
    /// pass either way, and the smallest takes the fewest registers).
    fn row_kernel(
        &self,
        kernel: &str,
        dtype: DType,
        op: &'static str,
        spec: RowSpec,
        caches: [usize; 3],
    ) -> Result<(String, LaunchConfig)> {
        let (group, grid) = self.row_grid(spec.rows, spec.len, 32 * caches[2]);
        let cache = caches
            .into_iter()
            .find(|&cache| group as usize * cache >= spec.len)
            .unwrap_or(caches[0]);
        let name = float_kernel(&format!("{kernel}_{group}x{cache}"), dtype, op)?;
        Ok((name, grid))
    }
}

impl NormKernels for CudaBackend {
    fn softmax(
        &self,
        softmax: SoftmaxSpec,
        spec: RowSpec,
        x: &Buffer,
        y: &mut Buffer,
    ) -> Result<()> {
        let op = softmax.kind.name();
        float_kernel("softmax", x.dtype(), op)?;
        if y.is_empty() || spec.len == 0 {
            return Ok(());
        }
        let (name, grid) = self.row_kernel("softmax", x.dtype(), op, spec, FORWARD_CACHES)?;
        let args = [
            (softmax.kind == SoftmaxKind::LogSoftmax).into(),
            softmax.scale.into(),
            softmax.causal.into(),
            x.into(),
            y.into(),
            spec.rows.into(),
            spec.len.into(),
        ];
        self.launch(op, Family::Norm, &name, grid, &args)
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
        float_kernel("softmax_backward", y.dtype(), op)?;
        if dx.is_empty() || spec.len == 0 {
            return Ok(());
        }
        let (name, grid) =
            self.row_kernel("softmax_backward", y.dtype(), op, spec, BACKWARD_CACHES)?;
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
        self.launch(op, Family::Norm, &name, grid, &args)
    }

    fn layer_norm(
        &self,
        spec: RowSpec,
        eps: f64,
        x: &Buffer,
        gamma: &Buffer,
        beta: &Buffer,
        y: &mut Buffer,
        mean: &mut Buffer,
        rstd: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "layer_norm";
        float_kernel(OP, x.dtype(), OP)?;
        if spec.rows == 0 {
            return Ok(());
        }
        let (name, grid) = self.row_kernel(OP, x.dtype(), OP, spec, FORWARD_CACHES)?;
        let args: [Arg; 9] = [
            eps.into(),
            x.into(),
            gamma.into(),
            beta.into(),
            y.into(),
            mean.into(),
            rstd.into(),
            spec.rows.into(),
            spec.len.into(),
        ];
        self.launch(OP, Family::Norm, &name, grid, &args)
    }

    fn layer_norm_backward(
        &self,
        spec: RowSpec,
        x: &Buffer,
        gamma: &Buffer,
        mean: &Buffer,
        rstd: &Buffer,
        dy: &Buffer,
        dx: &mut Buffer,
        dgamma: &mut Buffer,
        dbeta: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "layer_norm_backward";
        let dtype = x.dtype();
        float_kernel(OP, dtype, OP)?;
        let RowSpec { rows, len } = spec;
        if len == 0 {
            return Ok(());
        }
        if rows > 0 {
            let (name, grid) =
                self.row_kernel("layer_norm_dx", dtype, OP, spec, BACKWARD_CACHES)?;
            let args: [Arg; 8] = [
                x.into(),
                gamma.into(),
                mean.into(),
                rstd.into(),
                dy.into(),
                dx.into(),
                rows.into(),
                len.into(),
            ];
            self.launch(OP, Family::Norm, &name, grid, &args)?;
        }
        // dgamma and dbeta: per-slice partial sums in f64, then summed in slice order.
        let (slices, partials) = parameter_partials(rows, len);
        let partial = x.device().alloc_workspace(DType::F64, partials, OP)?;
        let grid = LaunchConfig {
            grid_dim: (len.div_ceil(BLOCK as usize) as u32, slices as u32, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let name = float_kernel("layer_norm_dparams_partial", dtype, OP)?;
        let args: [Arg; 7] = [
            x.into(),
            mean.into(),
            rstd.into(),
            dy.into(),
            (&partial).into(),
            rows.into(),
            len.into(),
        ];
        self.launch(OP, Family::Norm, &name, grid, &args)?;
        let name = float_kernel("layer_norm_dparams_sum", dtype, OP)?;
        let args = [
            (&partial).into(),
            slices.into(),
            dgamma.into(),
            dbeta.into(),
            len.into(),
        ];
        self.launch(OP, Family::Norm, &name, self.grid(len as u64), &args)
    }
}
