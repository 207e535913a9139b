//! Meta kernels: nothing to compute; planning for CUDA, the partial sums of the layer-norm
//! parameter gradients.

use crate::backend::norm::{NormKernels, parameter_partials};
use crate::backend::rows::RowSpec;
use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::error::Result;
use crate::meta::MetaBackend;

impl NormKernels for MetaBackend {
    fn layer_norm(
        &self,
        _: RowSpec,
        _: f64,
        _: &Buffer,
        _: &Buffer,
        _: &Buffer,
        _: &mut Buffer,
        _: &mut Buffer,
        _: &mut Buffer,
    ) -> Result<()> {
        Ok(())
    }

    fn layer_norm_backward(
        &self,
        spec: RowSpec,
        x: &Buffer,
        _: &Buffer,
        _: &Buffer,
        _: &Buffer,
        _: &Buffer,
        _: &mut Buffer,
        _: &mut Buffer,
        _: &mut Buffer,
    ) -> Result<()> {
        if self.plans_cuda() && spec.len > 0 {
            let (_, partials) = parameter_partials(spec.rows, spec.len);
            x.memory()
                .alloc_workspace(DType::F64, partials, "layer_norm_backward")?;
        }
        Ok(())
    }
}
