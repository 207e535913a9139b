//! Gradient clipping by global norm, without touching the gradients' memory. Each parameter's
//! squared norm is added in f64, in the parameters' order: on the host where reading a value
//! costs nothing (the CPU), on the device otherwise, which the host then reads once (a read per
//! parameter would make a GPU wait for the host once a parameter). Both give the same sum.

use headroom_autograd::Gradients;
use headroom_kernels::ops::elementwise::add_into;
use headroom_kernels::ops::reduce::{ReduceOp, reduce};
use headroom_kernels::{Array, DType, DeviceKind, PlanTarget};

use crate::error::Result;
use crate::module::Module;

/// The global norm of a model's gradients and the factor that clips it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GradNorm {
    /// `sqrt(sum of every gradient element squared)` (after the scale), infinite or NaN when a
    /// gradient holds an infinity or a NaN.
    pub norm: f64,
    /// What to multiply every gradient by: `min(1, max_norm / (norm + 1e-6))` (1 when the norm
    /// is not finite: there is nothing sensible to clip to).
    pub factor: f64,
}

impl GradNorm {
    /// The norm `norm` and the factor that brings it down to `max_norm`.
    pub fn clipping(norm: f64, max_norm: f64) -> Self {
        let factor = if norm.is_finite() {
            (max_norm / (norm + 1e-6)).min(1.0)
        } else {
            1.0
        };
        Self { norm, factor }
    }

    /// True when every gradient element is finite.
    pub fn is_finite(&self) -> bool {
        self.norm.is_finite()
    }
}

/// The global L2 norm of the gradients `grads` holds for `model`'s parameters, each multiplied
/// by `grad_scale` first, and the factor that brings it down to `max_norm`
/// (`torch.nn.utils.clip_grad_norm_`). Pass `grad_scale * factor` to the optimizer's step.
/// On a meta device (planning) it allocates what it would and reports a norm of 0.
pub fn clip_grad_norm(
    model: &dyn Module,
    grads: &Gradients,
    grad_scale: f64,
    max_norm: f64,
) -> Result<GradNorm> {
    let mut squares = 0.0f64;
    let mut on_device: Option<Array> = None;
    let mut failure = None;
    model.visit_parameters(&mut |_, param| {
        if failure.is_some() {
            return;
        }
        let Some(grad) = grads.get(param) else {
            return;
        };
        let sum = grad
            .reshape([grad.numel()])
            .and_then(|flat| reduce(ReduceOp::SumSquares, &flat, 0, false));
        let added = sum.and_then(|sum| match sum.device().plan_target() {
            // A planning device makes the same allocations and holds no values to read.
            PlanTarget::Cpu if sum.device().kind() == DeviceKind::Meta => Ok(()),
            PlanTarget::Cpu => {
                squares += sum.to_f64()?[0];
                Ok(())
            }
            PlanTarget::Cuda { .. } => {
                let sum = sum.cast(DType::F64)?;
                match &mut on_device {
                    Some(total) => add_into(total, &sum),
                    None => {
                        on_device = Some(sum);
                        Ok(())
                    }
                }
            }
        });
        if let Err(err) = added {
            failure = Some(err);
        }
    });
    if let Some(err) = failure {
        return Err(err.into());
    }
    if let Some(total) = on_device.filter(|t| t.device().kind() != DeviceKind::Meta) {
        squares += total.to_f64()?[0];
    }
    Ok(GradNorm::clipping(
        squares.sqrt() * grad_scale.abs(),
        max_norm,
    ))
}
