//! Gradients summed over the ranks in buckets, as PyTorch's DistributedDataParallel sums them.
//! Consecutive parameters' gradients (in the model's order, of one dtype) are copied into one
//! flat buffer of at most [`BUCKET_BYTES`], summed in one all-reduce and copied back: a few
//! large all-reduces cost less than many small ones, each of which pays the collective's
//! latency. The price is one bucket of memory while it is summed, and the one allocation of the
//! phase; the ranks agree that every rank formed it before summing it. A gradient as large as
//! a bucket or larger is summed in place, alone, at no memory cost.
//!
//! A planner's step for one rank of several, on a meta device with no world to sum over, forms
//! and cuts the same buckets, so that the plan counts their memory.

use std::ops::Range;

use headroom_alloc::{OomReport, Tag};
use headroom_autograd::{Gradients, Tensor};
use headroom_collectives::ReduceOp;
use headroom_kernels::Array;
use headroom_kernels::ops::data::copy_range;

use crate::data_parallel::peers::Peers;
use crate::error::{Error, Result};

/// The most bytes of gradients one all-reduce sums (PyTorch DDP's default `bucket_cap_mb`).
pub const BUCKET_BYTES: u64 = 25 << 20;

/// The parameters whose gradients are summed together: runs of consecutive indices of one
/// dtype, each of at most `cap` bytes, or one parameter alone where it has `cap` bytes or more.
pub fn buckets(params: &[Tensor], cap: u64) -> Vec<Range<usize>> {
    let bytes = |p: &Tensor| (p.numel() * p.dtype().size()) as u64;
    let mut out: Vec<Range<usize>> = Vec::new();
    let mut filled = 0;
    for (index, param) in params.iter().enumerate() {
        let size = bytes(param);
        let joins = out.last().is_some_and(|last| {
            params[last.start].dtype() == param.dtype() && filled + size <= cap && size < cap
        });
        match out.last_mut() {
            Some(last) if joins => {
                last.end = index + 1;
                filled += size;
            }
            _ => {
                out.push(index..index + 1);
                filled = size;
            }
        }
    }
    out
}

/// How far a rank got in readying a bucket; the ranks agree on the worst (the largest).
mod readiness {
    /// Its gradients are in the flat buffer (or it is one gradient, summed in place).
    pub const FLAT: f64 = 0.0;
    /// The flat buffer did not fit: the gradients are summed in place, one by one.
    pub const IN_PLACE: f64 = 1.0;
    /// It could not gather its gradients: the step fails on every rank.
    pub const FAILED: f64 = 2.0;
}

/// Sums the gradients of `params` in `total` over the ranks of `peers`' world (zeros stand for
/// those this rank has none of), bucket by bucket. Before each bucket is summed the ranks
/// agree on whether every rank formed it: where one could not (its flat buffer did not fit),
/// every rank sums that bucket's gradients in place instead, to the same values; where one
/// could not even gather its gradients, every rank fails step `step` naming it. Without a
/// world the buckets are formed alone, as a rank of `ranks` forms them, and each sum is priced
/// as a ring all-reduce among them (a planner's rank). Returns the reports of this rank's
/// buckets that did not fit.
pub fn sum_in_buckets(
    peers: &mut Peers<'_>,
    (params, ranks): (&[Tensor], usize),
    total: &mut Gradients,
    step: u64,
) -> Result<Vec<OomReport>> {
    let rank = peers.launch().rank;
    let mut absorbed = Vec::new();
    for bucket in buckets(params, BUCKET_BYTES) {
        let params = &params[bucket];
        let mut grads = Vec::with_capacity(params.len());
        let mut failure = None;
        for param in params {
            match take(total, param) {
                Ok(grad) => grads.push(grad),
                Err(err) => {
                    failure = Some(err);
                    break;
                }
            }
        }
        let mut flat = None;
        if failure.is_none() && params.len() > 1 {
            match flatten(&grads) {
                Ok(formed) => flat = Some(formed),
                Err(err) => match err.oom_report() {
                    Some(report) => absorbed.push(report.clone()),
                    None => failure = Some(err),
                },
            }
        }
        let readiness = match (&failure, &flat) {
            (Some(_), _) => readiness::FAILED,
            (None, None) if params.len() > 1 => readiness::IN_PLACE,
            (None, _) => readiness::FLAT,
        };
        let failed_rank = if failure.is_some() {
            rank as f64 + 1.0
        } else {
            0.0
        };
        let agreed = peers.agree([readiness, failed_rank, 0.0, 0.0], ReduceOp::Max)?;
        if let Some(err) = failure {
            return Err(err);
        }
        if agreed[0] == readiness::FAILED {
            return Err(Error::PeerFailed {
                step: step + 1,
                rank: agreed[1] as usize - 1,
                what: "an error gathering its gradients",
            });
        }
        if agreed[0] == readiness::IN_PLACE {
            flat = None;
        }
        match &mut flat {
            Some(flat) => {
                summed(peers, flat, ranks)?;
                let mut at = 0;
                for grad in &mut grads {
                    let len = grad.numel();
                    copy_range(flat, at, grad, 0, len)?;
                    at += len;
                }
            }
            None => {
                for grad in &mut grads {
                    summed(peers, grad, ranks)?;
                }
            }
        }
        drop(flat);
        for (param, grad) in params.iter().zip(grads) {
            total.insert(param, grad)?;
        }
    }
    Ok(absorbed)
}

/// `array` summed over the ranks of `peers`' world; without one, the ring all-reduce it would
/// take among `ranks` ranks priced on its (meta) device: `2 (N - 1) / N` of its bytes sent.
fn summed(peers: &mut Peers<'_>, array: &mut Array, ranks: usize) -> Result<()> {
    match peers.world.as_deref_mut() {
        Some(world) => world.all_reduce(array, ReduceOp::Sum)?,
        None if ranks > 1 => {
            let bytes = (array.numel() * array.dtype().size()) as f64;
            let share = (ranks - 1) as f64 / ranks as f64;
            array.device().plan_collective(2.0 * share * bytes);
        }
        None => {}
    }
    Ok(())
}

/// `grads` one after the other in one new buffer, tagged as gradients.
fn flatten(grads: &[Array]) -> Result<Array> {
    let first = &grads[0];
    let numel = grads.iter().map(Array::numel).sum::<usize>();
    let mut flat = {
        let _tag = first.device().scoped_tag(Tag::GRADIENTS);
        Array::zeros(first.device(), [numel], first.dtype())?
    };
    let mut at = 0;
    for grad in grads {
        copy_range(grad, 0, &mut flat, at, grad.numel())?;
        at += grad.numel();
    }
    Ok(flat)
}

/// `param`'s gradient out of `total`, in memory of its own (zeros where it has none).
fn take(total: &mut Gradients, param: &Tensor) -> Result<Array> {
    Ok(match total.remove(param) {
        Some(grad) if !grad.is_shared() => grad,
        Some(grad) => grad.deep_copy()?,
        None => total.get_or_zeros(param)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use headroom_kernels::{DType, Device, DeviceConfig};

    #[test]
    fn consecutive_gradients_of_one_dtype_share_a_bucket_up_to_its_size() {
        let device = Device::meta(DeviceConfig::new(1 << 30)).unwrap();
        let param =
            |numel: usize, dtype| Tensor::variable(Array::zeros(&device, [numel], dtype).unwrap());
        // 4-byte elements: 40, 40, 80, 400 and 40 bytes, then 8 bytes of bf16 and 40 of f32.
        let params = [
            param(10, DType::F32),
            param(10, DType::F32),
            param(20, DType::F32),
            param(100, DType::F32),
            param(10, DType::F32),
            param(4, DType::BF16),
            param(10, DType::F32),
        ];
        assert_eq!(buckets(&params, 100), [0..2, 2..3, 3..4, 4..5, 5..6, 6..7]);
        assert_eq!(buckets(&params, 160), [0..3, 3..4, 4..5, 5..6, 6..7]);
        assert_eq!(buckets(&params, 1000), [0..5, 5..6, 6..7]);
        assert!(buckets(&[], 100).is_empty());
    }
}
