//! Layout changes into contiguous memory: permutations, transposes, broadcasts and slices (one
//! strided gather), and concatenation.

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
pub(crate) mod kernels;
mod meta;

pub use kernels::{LayoutKernels, Strided};

use crate::array::Array;
use crate::buffer::Buffer;
use crate::error::{Error, Result};
use crate::shape::Shape;

/// Runs the strided gather of `x` into a new contiguous array.
fn gather(x: &Array, view: Strided<'_>, op: &'static str) -> Result<Array> {
    let mut out = Array::uninit(x.device(), Shape::new(view.dims), x.dtype(), op)?;
    x.device()
        .backend()
        .gather_strided(x.buffer(), view, out.buffer_mut(op)?)?;
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
    let view = Strided {
        offset: 0,
        dims: &dims,
        strides: &strides,
    };
    gather(x, view, OP)
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
    let strides = x.shape().broadcast_strides(&shape);
    let view = Strided {
        offset: 0,
        dims: shape.dims(),
        strides: &strides,
    };
    gather(x, view, OP)
}

/// The elements `start..start + len` of `x` along `axis`, in new contiguous memory
/// (`torch.narrow(...).contiguous()`).
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::layout::narrow};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Array::from_f64(&cpu, [2, 3], DType::F32, &[1., 2., 3., 4., 5., 6.])?;
/// assert_eq!(narrow(&x, 1, 1, 2)?.to_f64()?, [2., 3., 5., 6.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn narrow(x: &Array, axis: usize, start: usize, len: usize) -> Result<Array> {
    const OP: &str = "narrow";
    let length = x.shape().dim(axis, OP)?;
    if start.checked_add(len).is_none_or(|end| end > length) {
        return Err(Error::Argument {
            op: OP,
            detail: format!(
                "elements {start}..{} of axis {axis} of {}, which has {length}",
                start.saturating_add(len),
                x.shape()
            ),
        });
    }
    let strides = x.shape().strides();
    let mut dims = x.shape().dims().to_vec();
    dims[axis] = len;
    let view = Strided {
        offset: start * strides[axis],
        dims: &dims,
        strides: &strides,
    };
    gather(x, view, OP)
}

/// `x` cut along `axis` into consecutive pieces of the given `sizes` (which sum to the axis'
/// length), each in new contiguous memory (`torch.split` then `contiguous`).
pub fn split(x: &Array, axis: usize, sizes: &[usize]) -> Result<Vec<Array>> {
    const OP: &str = "split";
    let length = x.shape().dim(axis, OP)?;
    if sizes.iter().sum::<usize>() != length {
        return Err(Error::Argument {
            op: OP,
            detail: format!(
                "sizes {sizes:?} do not add up to axis {axis} of {}",
                x.shape()
            ),
        });
    }
    let mut start = 0;
    sizes
        .iter()
        .map(|&len| {
            let piece = narrow(x, axis, start, len).map_err(|err| err.in_op(OP));
            start += len;
            piece
        })
        .collect()
}

/// `pieces` (one dtype and device, equal shapes but along `axis`) joined along `axis`
/// (`torch.cat`).
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::layout::concat};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let a = Array::from_f64(&cpu, [2, 1], DType::F32, &[1., 2.])?;
/// let b = Array::from_f64(&cpu, [2, 2], DType::F32, &[3., 4., 5., 6.])?;
/// assert_eq!(concat(&[&a, &b], 1)?.to_f64()?, [1., 3., 4., 2., 5., 6.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn concat(pieces: &[&Array], axis: usize) -> Result<Array> {
    const OP: &str = "concat";
    let Some(first) = pieces.first() else {
        return Err(Error::Argument {
            op: OP,
            detail: "nothing to concatenate".into(),
        });
    };
    first.shape().dim(axis, OP)?;
    let dims = first.shape().dims();
    let mut total = 0;
    for piece in pieces {
        first.check_peer(piece, OP)?;
        let other = piece.shape().dims();
        let fits =
            other.len() == dims.len() && (0..dims.len()).all(|d| d == axis || other[d] == dims[d]);
        if !fits {
            return Err(Error::Shape {
                op: OP,
                detail: format!(
                    "{} and {} differ outside axis {axis}",
                    first.shape(),
                    piece.shape()
                ),
            });
        }
        total += other[axis];
    }
    let inner: usize = dims[axis + 1..].iter().product();
    let outer: usize = dims[..axis].iter().product();
    let mut out_dims = dims.to_vec();
    out_dims[axis] = total;
    let mut out = Array::uninit(first.device(), Shape::new(&out_dims), first.dtype(), OP)?;
    let buffers: Vec<&Buffer> = pieces.iter().map(|p| p.buffer()).collect();
    let widths: Vec<usize> = pieces
        .iter()
        .map(|p| p.shape().dims()[axis] * inner)
        .collect();
    first
        .device()
        .backend()
        .concat(&buffers, &widths, outer, out.buffer_mut(OP)?)?;
    Ok(out)
}
