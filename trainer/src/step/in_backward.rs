//! The optimizer step inside the backward pass (`optimizer.in_backward`): a step that is one
//! micro-batch updates each parameter as soon as its gradient is complete and frees that
//! gradient at once, so a few gradients exist at any moment instead of all of them.
//!
//! The contract, because an update cannot be undone:
//! - memory that runs out before the first update (in the forward pass, or in the backward
//!   pass before any gradient completes) is an ordinary out-of-memory of the micro-batch: the
//!   step drops it, halves and redoes the batch in micro-batches that accumulate as usual;
//! - memory that runs out after an update ends the run with [`Error::UpdateInterrupted`] and
//!   the allocator's report; no checkpoint is written, so the last one holds the weights from
//!   before the step;
//! - a gradient holding a NaN or an infinity ends the run with [`Error::NonFiniteGradient`]
//!   naming the parameter, before that parameter is updated: the step cannot be skipped.
//!   Where the optimizer is offloaded, the host tier's thread checks each gradient on its
//!   copy instead (reading it here would wait for the device) and leaves that parameter, and
//!   those whose updates started after it, as they were.
//!
//! Each parameter's update is the one [`Optimizer::step`](headroom_nn::Optimizer::step) makes
//! from the same gradient, so the step equals the ordinary one bit for bit. Clipping by the
//! global norm and f16 loss scaling need every gradient first; the configuration refuses them.

use headroom_autograd::{SavedReport, Tensor, TensorId};
use headroom_kernels::ops::reduce::{ReduceOp, reduce};
use headroom_kernels::{Array, DeviceKind};

use crate::data::HostBatch;
use crate::error::{Error, Result};
use crate::step::context::{Forward, StepContext};

/// What a step updated in its backward pass did.
pub(crate) struct Updated {
    /// The batch's mean loss.
    pub loss: f64,
    /// The gradients' global norm (after unscaling).
    pub grad_norm: f64,
    /// What the forward pass saved for the backward pass.
    pub saved: SavedReport,
}

/// Step number `step` (from 0) on `batch` as one micro-batch, each parameter updated in the
/// backward pass as its gradient completes.
pub(crate) fn step_in_backward(
    ctx: &mut StepContext<'_>,
    batch: &HostBatch,
    step: u64,
) -> Result<Updated> {
    // The parameters by identity and name only: a handle kept here would share each one and
    // forbid its update in place.
    let mut ids: Vec<TensorId> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    ctx.model.module().visit_parameters(&mut |name, t| {
        ids.push(t.id());
        names.push(name.to_owned());
    });
    let Forward {
        tape,
        loss,
        saved,
        seed,
    } = ctx.forward(batch, 1.0)?;
    let meta = ctx.device.kind() == DeviceKind::Meta;
    let unscale = 1.0 / ctx.scaler.scale;
    let host = ctx.optimizer.buffers().host().cloned();
    let (mut updated, mut squares) = (0, 0.0);
    let outcome = tape.gradient_each(&loss, seed, &ids, |index, grad| {
        // A gradient headed for the host tier's thread is checked there, on its copy: reading
        // it here would wait for the device. One already in the host tier (a streamed
        // weight's), or with no host tier, is checked here.
        if host.as_ref().is_none_or(|host| grad.device().same(host)) {
            let sum = square_sum(&grad, meta)?;
            if !sum.is_finite() {
                return Err(non_finite(step, &names[index]));
            }
            squares += sum;
        }
        let optimizer = &mut *ctx.optimizer;
        let mut at = 0;
        ctx.model
            .module_mut()
            .visit_parameters_mut(&mut |name, param| {
                at += 1;
                if at - 1 == index {
                    optimizer.step_parameter(index, name, param, &grad, unscale)?;
                }
                Ok(())
            })?;
        updated += 1;
        Ok(())
    });
    if let Err(err) = outcome {
        // The updates started land, so that each parameter and its state agree; the error
        // says what ended the step.
        let _ = ctx.optimizer.buffers_mut().land(ctx.model.module_mut());
        let after_an_update = (err.is_out_of_memory() && updated > 0)
            .then(|| err.oom_report().cloned())
            .flatten();
        return Err(match after_an_update {
            Some(report) => Error::UpdateInterrupted {
                step: step + 1,
                updated,
                parameters: ids.len(),
                report: Box::new(report),
            },
            None => err,
        });
    }
    let landed = ctx.optimizer.finish_step(ctx.model.module_mut())?;
    if let Some(index) = landed.non_finite {
        return Err(non_finite(step, &names[index]));
    }
    squares += landed.squares;
    let loss = if meta { 0.0 } else { loss_value(&loss)? };
    Ok(Updated {
        loss,
        grad_norm: squares.sqrt() * unscale.abs(),
        saved,
    })
}

/// The error of a gradient of parameter `name` that holds a NaN or an infinity in step `step`
/// (from 0).
fn non_finite(step: u64, name: &str) -> Error {
    Error::NonFiniteGradient {
        step: step + 1,
        parameter: name.to_owned(),
    }
}

/// The sum of a gradient's squared elements (0 on a planning device, which allocates as a
/// real one would and holds no values).
fn square_sum(grad: &Array, meta: bool) -> Result<f64> {
    let flat = grad.reshape([grad.numel()])?;
    let sum = reduce(ReduceOp::SumSquares, &flat, 0, false)?;
    Ok(if meta { 0.0 } else { sum.to_f64()?[0] })
}

/// The loss's value on the host.
fn loss_value(loss: &Tensor) -> Result<f64> {
    Ok(loss.to_f64()?[0])
}
