//! Activation recomputation (gradient checkpointing): a segment of the forward pass that keeps
//! nothing for the backward pass but its inputs, and runs again when its gradient is needed.

use std::sync::Arc;

use headroom_alloc::Tag;
use headroom_kernels::{Array, DType, Device};

use crate::autocast::{autocast, autocast_dtype};
use crate::error::Result;
use crate::prefetch::OffloadedInputs;
use crate::recording::{begin, no_grad};
use crate::saved::saves;
use crate::tape::{Backward, Tape};
use crate::tensor::Tensor;

/// Runs `f` on `inputs` without keeping what its ops would save for the backward pass, and
/// records it on the recording tape as one op whose backward rule runs `f` again, on the same
/// inputs under the same autocast policy, to differentiate it (`torch.utils.checkpoint`,
/// `tf.recompute_grad`). Memory for time: the activations inside the segment live only while
/// the segment runs, forwards and then backwards, at the cost of a second forward pass.
///
/// `variables` are the tensors `f` reads besides its inputs and needs gradients for (a layer's
/// parameters: `Module::parameters`); a tensor `f` reads that is not listed gets no gradient
/// through the segment. `f` must compute the same function both times: a layer that draws
/// random numbers (dropout) must draw the same ones again. Without a recording tape, or when
/// the tape tracks none of the inputs and variables, this is `f(inputs)`.
///
/// ```
/// use headroom_autograd::{Tape, Tensor, recompute};
/// use headroom_kernels::{Array, DType, Device, DeviceConfig};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Tensor::new(Array::from_f64(&cpu, [1, 2], DType::F64, &[1., 2.])?);
/// let w = Tensor::variable(Array::from_f64(&cpu, [2, 2], DType::F64, &[1., 0., 0., 3.])?);
/// let tape = Tape::new();
/// let segment = {
///     let w = w.clone();
///     move |x: &[Tensor]| x[0].matmul(&w)?.tanh()
/// };
/// let y = tape.record(|| recompute(&[&x], &[&w], segment)?.sum_all())?;
/// let dw = tape.gradient(&y, &[&w])?.remove(&w).unwrap().to_f64()?;
/// let (a, b) = (1f64.tanh(), 6f64.tanh()); // d/dw of tanh(x w): x^T (1 - tanh^2)
/// assert!((dw[0] - (1. - a * a)).abs() < 1e-12 && (dw[3] - 2. * (1. - b * b)).abs() < 1e-12);
/// # Ok::<(), headroom_autograd::Error>(())
/// ```
pub fn recompute<F>(inputs: &[&Tensor], variables: &[&Tensor], f: F) -> Result<Tensor>
where
    F: Fn(&[Tensor]) -> Result<Tensor> + Send + 'static,
{
    segment(inputs, variables, None, f)
}

/// [`recompute`], keeping the segment's inputs on `host` (the device's host tier) instead of
/// the device (activation offloading): each is copied there as the forward pass runs the
/// segment, and back to the device when the backward rule runs it again. With `ahead`, one
/// segment ahead: the rule of the segment after it (which runs first) starts the copy, so that
/// it runs beside that rule's kernels, and the device holds two segments' inputs meanwhile;
/// without, as the rule starts, its kernels waiting for the copy. Between the passes the
/// device keeps nothing for the segment; `host` keeps its inputs, tagged as activations.
pub fn recompute_offloaded<F>(
    inputs: &[&Tensor],
    variables: &[&Tensor],
    host: &Device,
    ahead: bool,
    f: F,
) -> Result<Tensor>
where
    F: Fn(&[Tensor]) -> Result<Tensor> + Send + 'static,
{
    segment(inputs, variables, Some((host, ahead)), f)
}

/// [`recompute`] with its inputs kept on a host tier when there is one (fetched ahead or not).
fn segment<F>(
    inputs: &[&Tensor],
    variables: &[&Tensor],
    host: Option<(&Device, bool)>,
    f: F,
) -> Result<Tensor>
where
    F: Fn(&[Tensor]) -> Result<Tensor> + Send + 'static,
{
    let owned: Vec<Tensor> = inputs.iter().map(|&t| t.clone()).collect();
    let operands: Vec<&Tensor> = inputs.iter().chain(variables).copied().collect();
    let Some(recording) = begin(&operands) else {
        return f(&owned);
    };
    // The inputs go to the host before the segment runs, so that on a GPU their copies overlap
    // its kernels.
    let kept: Vec<Array> = match host {
        Some((host, _)) => {
            let _activations = host.scoped_tag(Tag::ACTIVATIONS);
            let kept = owned.iter().map(|t| t.array().to_device(host));
            kept.collect::<Result<_, _>>()?
        }
        None => owned.iter().map(|t| t.array().clone()).collect(),
    };
    let output = {
        let _nothing_saved = no_grad();
        f(&owned)?
    };
    if owned.iter().any(|input| input.id() == output.id()) {
        // The segment handed an input back (an identity, such as dropout in evaluation): its
        // gradient is the output's, with nothing to record.
        return Ok(output);
    }
    let policy = autocast_dtype();
    // What `f` captures itself (a layer's parameters, say) is not in this account, nor are
    // the inputs kept on the host.
    let on_device = match host {
        Some(_) => variables,
        None => &operands[..],
    };
    let saved = saves(&on_device.iter().map(|t| t.array()).collect::<Vec<_>>());
    let variables: Vec<Tensor> = variables.iter().map(|&t| t.clone()).collect();
    drop(owned);
    let kept = match host {
        Some((_, true)) => Inputs::Offloaded(
            recording.chain_offloaded(|earlier| OffloadedInputs::new(kept, earlier)),
        ),
        Some((_, false)) => Inputs::Offloaded(OffloadedInputs::new(kept, None)),
        None => Inputs::Kept(kept),
    };
    let rule = move |dy: Array, needs: &[bool]| {
        // The policy of the forward pass: off is any dtype but the half ones.
        let _policy = autocast(policy.unwrap_or(DType::F32));
        let tape = Tape::new();
        // Fresh handles on the same arrays (or on copies back from the host), so that the
        // inner tape tracks exactly these.
        let inputs: Vec<Tensor> = {
            let device = dy.device();
            let _activations = device.scoped_tag(Tag::ACTIVATIONS);
            let arrays = match &kept {
                Inputs::Kept(arrays) => arrays.clone(),
                Inputs::Offloaded(offloaded) => offloaded.fetch(device)?,
            };
            arrays.into_iter().map(Tensor::new).collect()
        };
        let sources: Vec<&Tensor> = inputs.iter().chain(&variables).collect();
        for (source, &need) in sources.iter().zip(needs) {
            if need {
                tape.watch(source);
            }
        }
        // What the segment allocates again is activations, as in the forward pass (the
        // gradient pass tags its own allocations as gradients).
        let again = {
            let _activations = dy.device().scoped_tag(Tag::ACTIVATIONS);
            tape.record(|| f(&inputs))?
        };
        let wanted: Vec<&Tensor> = sources
            .iter()
            .zip(needs)
            .filter_map(|(&source, &need)| need.then_some(source))
            .collect();
        // (This checks that `dy` fits what the segment gave when run again.)
        let mut grads = tape.gradient_with(&again, dy, &wanted)?;
        Ok(sources
            .iter()
            .zip(needs)
            .map(|(source, &need)| if need { grads.remove(source) } else { None })
            .collect())
    };
    recording.finish(
        "recompute",
        &[&output],
        saved,
        Backward::One(Box::new(rule)),
    );
    Ok(output)
}

/// What a segment keeps of its inputs for its backward rule.
enum Inputs {
    /// The arrays themselves, on the device.
    Kept(Vec<Array>),
    /// Copies in the host tier, brought back one segment ahead ([`OffloadedInputs`]).
    Offloaded(Arc<OffloadedInputs>),
}
