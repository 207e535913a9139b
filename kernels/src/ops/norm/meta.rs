//! Meta kernels: nothing to compute; planning for CUDA, the partial sums of the layer-norm
//! parameter gradients.

use super::kernels::{
    LayerNormBackwardOperands, LayerNormOperands, NormKernels, parameter_partials,
};
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
            let (_, partials) = parameter_partials(spec.rows, spec.len);
            x.memory()
                .alloc_workspace(DType::F64, partials, "layer_norm_backward")?;
        }
        Ok(())
    }
}
