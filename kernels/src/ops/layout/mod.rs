//! Layout changes into contiguous memory: permutations, transposes and broadcasts, all one
//! strided gather.

mod cpu;
mod meta;

use crate::buffer::{Array, Buffer};
use crate::error::{Error, Result};
use crate::shape::Shape;

/// The kernels of this family that a backend runs.
pub trait LayoutKernels {
    /// Fills `out`, contiguous of shape `dims`, from `x` (same dtype, any): the element at index
    /// `(i_0, ..., i_n)` of `out` is `x[sum(i_d * strides[d])]`. A permutation reorders `x`'s
    /// strides; a broadcast gives stride 0 to the axes it repeats.
    fn gather_strided(
        &self,
        x: &Buffer,
        dims: &[usize],
        strides: &[usize],
        out: &mut Buffer,
    ) -> Result<()>;
}

/// Runs the strided gather of `x` into a new contiguous array of shape `dims`.
fn gather(x: &Array, dims: &[usize], strides: &[usize], op: &'static str) -> Result<Array> {
    let mut out = Array::uninit(x.device(), Shape::new(dims), x.dtype(), op)?;
    x.device()
        .backend()
        .gather_strided(x.buffer(), dims, strides, out.buffer_mut(op)?)?;
    Ok(out)
}

/// `x` with its axes reordered, in new contiguous memory: axis `d` of the result is axis
/// `axes[d]` of `x` (`torch.permute(...).contiguous()`).
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::layout::permute};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Array::from_f64(&cpu, [2, 3], DType::F32, &[1., 2., 3., 4., 5., 6.])?;
/// let t = permute(&x, &[1, 0])?;
/// assert_eq!(t.shape().dims(), [3, 2]);
/// assert_eq!(t.to_f64()?, [1., 4., 2., 5., 3., 6.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn permute(x: &Array, axes: &[usize]) -> Result<Array> {
    const OP: &str = "permute";
    let rank = x.shape().rank();
    let mut seen = vec![false; rank];
    for &axis in axes {
        if axis >= rank || std::mem::replace(&mut seen[axis], true) {
            break;
        }
    }
    if axes.len() != rank || seen.iter().any(|&s| !s) {
        return Err(Error::Argument {
            op: OP,
            detail: format!("{axes:?} is not a permutation of the axes of {}", x.shape()),
        });
    }
    // Output axis d walks input axis axes[d].
    let in_strides = x.shape().strides();
    let dims: Vec<usize> = axes.iter().map(|&a| x.shape().dims()[a]).collect();
    let strides: Vec<usize> = axes.iter().map(|&a| in_strides[a]).collect();
    gather(x, &dims, &strides, OP)
}

/// `x` with axes `a` and `b` swapped, in new contiguous memory.
pub fn transpose(x: &Array, a: usize, b: usize) -> Result<Array> {
    let rank = x.shape().rank();
    if a >= rank || b >= rank {
        return Err(Error::Argument {
            op: "transpose",
            detail: format!("axes {a} and {b} for shape {}", x.shape()),
        });
    }
    let mut axes: Vec<usize> = (0..rank).collect();
    axes.swap(a, b);
    permute(x, &axes).map_err(|err| err.in_op("transpose"))
}

/// `x` repeated along its 1-sized (or missing leading) axes to `shape`, NumPy's broadcasting
/// rules, in new contiguous memory (`torch.broadcast_to(...).contiguous()`). The gradient of a
/// broadcast is a sum over the repeated axes ([`crate::ops::reduce::sum_to`]).
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::layout::broadcast_to};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Array::from_f64(&cpu, [2, 1], DType::F32, &[1., 2.])?;
/// assert_eq!(broadcast_to(&x, [2, 3])?.to_f64()?, [1., 1., 1., 2., 2., 2.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn broadcast_to(x: &Array, shape: impl Into<Shape>) -> Result<Array> {
    const OP: &str = "broadcast_to";
    let shape = shape.into();
    if x.shape().broadcast(&shape, OP)? != shape {
        return Err(Error::Shape {
            op: OP,
            detail: format!("{} does not broadcast to {shape}", x.shape()),
        });
    }
    gather(x, shape.dims(), &x.shape().broadcast_strides(&shape), OP)
}
