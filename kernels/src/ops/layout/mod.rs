//! Transposes and permutations into contiguous memory.

mod cpu;
mod meta;

use crate::buffer::{Array, Buffer};
use crate::error::{Error, Result};
use crate::shape::Shape;

/// The kernels of this family that a backend runs.
pub trait LayoutKernels {
    /// Writes `x` (of shape `shape`, any dtype) into `out` with its axes reordered: axis `d` of
    /// the output is axis `axes[d]` of the input.
    fn permute(&self, x: &Buffer, shape: &Shape, axes: &[usize], out: &mut Buffer) -> Result<()>;
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
    let dims: Vec<usize> = axes.iter().map(|&a| x.shape().dims()[a]).collect();
    let mut out = Array::uninit(x.device(), Shape::new(&dims), x.dtype(), OP)?;
    x.device()
        .backend()
        .permute(x.buffer(), x.shape(), axes, out.buffer_mut())?;
    Ok(out)
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
