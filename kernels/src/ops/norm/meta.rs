//! Meta kernels: nothing to compute; planning for CUDA, the partial sums of the parameter
//! gradients.

use super::kernels::{
    LayerNormBackwardOperands, LayerNormOperands, NormKernels, RmsNormBackwardOperands,
    RmsNormOperands, parameter_partials,
};
use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::error::Result;
use crate::meta::MetaBackend;
use crate::ops::rows::spec::RowSpec;
use crate::work::Kernel;

impl NormKernels for MetaBackend {
    fn layer_norm(&self, _: RowSpec, _: f64, operands: LayerNormOperands<'_>) -> Result<()> {
        let LayerNormOperands {
            x,
            gamma,
            beta,
            y,
            mean,
            rstd,
        } = operands;
        let buffers = [x, gamma, beta, &*y, &*mean, &*rstd];
        self.record(Kernel::moving_with(&buffers, 8.0));
        Ok(())
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
        let buffers = [x, gamma, mean, rstd, dy, &*dx, &*dgamma, &*dbeta];
        self.record(Kernel::moving_with(&buffers, 12.0));
        if self.plans_cuda() && spec.len > 0 {
            plan_partials(x, spec, 2, "layer_norm_backward")?;
        }
        Ok(())
    }

    fn rms_norm(&self, _: RowSpec, _: f64, operands: RmsNormOperands<'_>) -> Result<()> {
        let RmsNormOperands { x, gamma, y, rstd } = operands;
        self.record(Kernel::moving_with(&[x, gamma, &*y, &*rstd], 5.0));
        Ok(())
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
        let buffers = [x, gamma, rstd, dy, &*dx, &*dgamma];
        self.record(Kernel::moving_with(&buffers, 9.0));
        if self.plans_cuda() && spec.len > 0 {
            plan_partials(x, spec, 1, "rms_norm_backward")?;
        }
        Ok(())
    }
}

/// Takes the workspace of the CUDA backend's partial sums of `params` parameter gradients,
/// released on return as the CUDA backend releases it once its kernels are queued.
fn plan_partials(x: &Buffer, spec: RowSpec, params: usize, op: &'static str) -> Result<()> {
    let (_, partials) = parameter_partials(spec.rows, spec.len, params);
    x.memory().alloc_workspace(DType::F64, partials, op)?;
    Ok(())
}
