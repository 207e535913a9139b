//! Meta kernels: nothing to compute; planning for CUDA, the partial sums of the layer-norm
//! parameter gradients.

use super::kernels::{NormKernels, parameter_partials};
use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::error::Result;
use crate::meta::MetaBackend;
use crate::ops::rows::spec::RowSpec;
use crate::work::Kernel;

impl NormKernels for MetaBackend {
    fn layer_norm(
        &self,
        _: RowSpec,
        _: f64,
        x: &Buffer,
        gamma: &Buffer,
        beta: &Buffer,
        y: &mut Buffer,
        mean: &mut Buffer,
        rstd: &mut Buffer,
    ) -> Result<()> {
        let buffers = [x, gamma, beta, &*y, &*mean, &*rstd];
        self.record(Kernel::moving_with(&buffers, 8.0));
        Ok(())
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
