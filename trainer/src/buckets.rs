//! Gradients summed over the ranks in buckets, as PyTorch's DistributedDataParallel sums them.
//! Consecutive parameters' gradients (in the model's order, of one dtype) are flattened into one
//! buffer of at most [`BUCKET_BYTES`], summed in one all-reduce and cut back into gradients: a
//! few large all-reduces cost less than many small ones, each of which pays the collective's
//! latency. The price is one bucket of memory while it is formed. A gradient as large as a
//! bucket or larger is summed in place, alone, at no memory cost.
//!
//! A planner's step for one rank of several, on a meta device with no world to sum over, forms
//! and cuts the same buckets, so that the plan counts their memory.

use std::ops::Range;

use headroom_alloc::Tag;
use headroom_autograd::{Gradients, Tensor};
use headroom_dist::{Collective, ReduceOp};
use headroom_kernels::Array;
use headroom_kernels::ops::layout::{concat, split};

use crate::error::Result;

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

/// Sums the gradients of `params` in `total` over the ranks of `world` (zeros stand for those
/// this rank has none of), bucket by bucket; without a world the buckets are formed and cut
/// alone, as a rank forms them.
pub fn sum_in_buckets(
    mut world: Option<&mut (dyn Collective + '_)>,
    params: &[Tensor],
    total: &mut Gradients,
) -> Result<()> {
    for bucket in buckets(params, BUCKET_BYTES) {
        let params = &params[bucket];
        if let [param] = params {
            let mut grad = take(total, param)?;
            if let Some(world) = world.as_deref_mut() {
                world.all_reduce(&mut grad, ReduceOp::Sum)?;
            }
            total.insert(param, grad)?;
            continue;
        }
        let _tag = params[0].device().scoped_tag(Tag::GRADIENTS);
        let mut flat = {
            let pieces = params
                .iter()
                .map(|p| Ok(take(total, p)?.reshape([p.numel()])?))
                .collect::<Result<Vec<Array>>>()?;
            concat(&pieces.iter().collect::<Vec<_>>(), 0)?
        };
        if let Some(world) = world.as_deref_mut() {
            world.all_reduce(&mut flat, ReduceOp::Sum)?;
        }
        let sizes: Vec<usize> = params.iter().map(Tensor::numel).collect();
        let pieces = split(&flat, 0, &sizes)?;
        drop(flat);
        for (param, piece) in params.iter().zip(pieces) {
            total.insert(param, piece.reshape(param.shape().clone())?)?;
        }
    }
    Ok(())
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
