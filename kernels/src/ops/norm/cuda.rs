//! CUDA kernels: layer normalization and RMS normalization over the last axis (`norm.cu`).

use cudarc::driver::LaunchConfig;

use super::kernels::{
    LayerNormBackwardOperands, LayerNormOperands, NormKernels, RmsNormBackwardOperands,
    RmsNormOperands, parameter_partials,
};
use crate::cuda::{Arg, BLOCK, CudaBackend, Family, float_kernel};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::rows::cuda::{BACKWARD, FORWARD, RowKernels};
use crate::ops::rows::spec::RowSpec;

/// Layer normalization's row kernels (`norm.cu`): the forward pass, and the input's gradient.
const LAYER_NORM: RowKernels = RowKernels {
    forward: "layer_norm",
    backward: "layer_norm_dx",
};

/// RMS normalization's row kernels (`norm.cu`): the forward pass, and the input's gradient.
const RMS_NORM: RowKernels = RowKernels {
    forward: "rms_norm",
    backward: "rms_norm_dx",
};

/// Every row kernel of `norm.cu` the backend may launch, without its dtype suffix
/// (`layer_norm_256x16`), for checks that each is in the compiled module.
pub fn row_kernels() -> Vec<String> {
    let mut stems = LAYER_NORM.stems();
    stems.extend(RMS_NORM.stems());
    stems
}

impl NormKernels for CudaBackend {
    fn layer_norm(&self, spec: RowSpec, eps: f64, operands: LayerNormOperands<'_>) -> Result<()> {
        let LayerNormOperands {
            x,
            gamma,
            beta,
            y,
            mean,
            rstd,
        } = operands;
        const OP: &str = "layer_norm";
        float_kernel(OP, x.dtype(), OP)?;
        if spec.rows == 0 {
            return Ok(());
        }
        let (name, grid) = self.row_kernel(LAYER_NORM.forward, x.dtype(), OP, spec, &FORWARD)?;
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
        operands: LayerNormBackwardOperands<'_>,
    ) -> Result<()> {
        let LayerNormBackwardOperands {
            x,
            gamma,
            mean,
            rstd,
            dy,
            dx,
            dgamma,
            dbeta,
        } = operands;
        const OP: &str = "layer_norm_backward";
        let dtype = x.dtype();
        float_kernel(OP, dtype, OP)?;
        let RowSpec { rows, len } = spec;
        if len == 0 {
            return Ok(());
        }
        if rows > 0 {
            let (name, grid) = self.row_kernel(LAYER_NORM.backward, dtype, OP, spec, &BACKWARD)?;
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
        let (slices, partials) = parameter_partials(rows, len, 2);
        let partial = x.memory().alloc_workspace(DType::F64, partials, OP)?;
        let grid = partials_grid(len, slices);
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

    fn rms_norm(&self, spec: RowSpec, eps: f64, operands: RmsNormOperands<'_>) -> Result<()> {
        let RmsNormOperands { x, gamma, y, rstd } = operands;
        const OP: &str = "rms_norm";
        float_kernel(OP, x.dtype(), OP)?;
        if spec.rows == 0 {
            return Ok(());
        }
        let (name, grid) = self.row_kernel(RMS_NORM.forward, x.dtype(), OP, spec, &FORWARD)?;
        let args: [Arg; 7] = [
            eps.into(),
            x.into(),
            gamma.into(),
            y.into(),
            rstd.into(),
            spec.rows.into(),
            spec.len.into(),
        ];
        self.launch(OP, Family::Norm, &name, grid, &args)
    }

    fn rms_norm_backward(
        &self,
        spec: RowSpec,
        operands: RmsNormBackwardOperands<'_>,
    ) -> Result<()> {
        let RmsNormBackwardOperands {
            x,
            gamma,
            rstd,
            dy,
            dx,
            dgamma,
        } = operands;
        const OP: &str = "rms_norm_backward";
        let dtype = x.dtype();
        float_kernel(OP, dtype, OP)?;
        let RowSpec { rows, len } = spec;
        if len == 0 {
            return Ok(());
        }
        if rows > 0 {
            let (name, grid) = self.row_kernel(RMS_NORM.backward, dtype, OP, spec, &BACKWARD)?;
            let args: [Arg; 7] = [
                x.into(),
                gamma.into(),
                rstd.into(),
                dy.into(),
                dx.into(),
                rows.into(),
                len.into(),
            ];
            self.launch(OP, Family::Norm, &name, grid, &args)?;
        }
        // dgamma: per-slice partial sums in f64, then summed in slice order.
        let (slices, partials) = parameter_partials(rows, len, 1);
        let partial = x.memory().alloc_workspace(DType::F64, partials, OP)?;
        let grid = partials_grid(len, slices);
        let name = float_kernel("rms_norm_dgamma_partial", dtype, OP)?;
        let args: [Arg; 6] = [
            x.into(),
            rstd.into(),
            dy.into(),
            (&partial).into(),
            rows.into(),
            len.into(),
        ];
        self.launch(OP, Family::Norm, &name, grid, &args)?;
        let name = float_kernel("rms_norm_dgamma_sum", dtype, OP)?;
        let args = [(&partial).into(), slices.into(), dgamma.into(), len.into()];
        self.launch(OP, Family::Norm, &name, self.grid(len as u64), &args)
    }
}

/// The grid of the parameter gradients' partial sums: a column of blocks over `len` parameters
/// for each of `slices` slices of rows.
fn partials_grid(len: usize, slices: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (len.div_ceil(BLOCK as usize) as u32, slices as u32, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}
