//! Matrix products: `op(a) @ op(b)`, batched, with optional transposes; half types accumulate in
//! f32 through workspace casts.

mod cpu;
mod meta;

use headroom_alloc::Tag;

use crate::buffer::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Shape;

/// The geometry of a batched product `out[i] = op(a[i]) * op(b[i])`, all row-major.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmSpec {
    /// Number of products.
    pub batch: usize,
    /// Rows of `op(a)` and of the output.
    pub m: usize,
    /// Columns of `op(b)` and of the output.
    pub n: usize,
    /// Columns of `op(a)`, rows of `op(b)`.
    pub k: usize,
    /// `a` is stored `[k, m]` and used transposed.
    pub trans_a: bool,
    /// `b` is stored `[n, k]` and used transposed.
    pub trans_b: bool,
    /// Elements between consecutive matrices of `a` (0: one matrix for every batch).
    pub a_batch_stride: usize,
    /// Elements between consecutive matrices of `b` (0: one matrix for every batch).
    pub b_batch_stride: usize,
}

impl GemmSpec {
    /// Floating-point operations of the whole product.
    pub fn flops(&self) -> f64 {
        2.0 * self.batch as f64 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

/// Splits a shape into (batch dims, rows, cols).
fn matrix_dims<'s>(shape: &'s Shape, name: &str) -> Result<(&'s [usize], usize, usize)> {
    match shape.dims() {
        [batch @ .., rows, cols] => Ok((batch, *rows, *cols)),
        _ => Err(Error::Shape {
            op: "matmul",
            detail: format!("{name} has shape {shape}; a matrix needs at least 2 dimensions"),
        }),
    }
}

/// `op(a) @ op(b)`, where `op` transposes the last two dimensions when asked. Leading (batch)
/// dimensions must match, or one operand may be a plain matrix shared by every batch.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::gemm::matmul};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let a = Array::from_f64(&cpu, [2, 3], DType::F32, &[1., 2., 3., 4., 5., 6.])?;
/// let b = Array::from_f64(&cpu, [2, 3], DType::F32, &[1., 0., 1., 0., 1., 0.])?;
/// let c = matmul(&a, &b, false, true)?; // a @ b^T
/// assert_eq!(c.to_f64()?, [4., 2., 10., 5.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn matmul(a: &Array, b: &Array, trans_a: bool, trans_b: bool) -> Result<Array> {
    const OP: &str = "matmul";
    a.check_float(OP)?;
    a.check_peer(b, OP)?;
    let (a_batch, a_rows, a_cols) = matrix_dims(a.shape(), "a")?;
    let (b_batch, b_rows, b_cols) = matrix_dims(b.shape(), "b")?;
    let (m, k) = if trans_a {
        (a_cols, a_rows)
    } else {
        (a_rows, a_cols)
    };
    let (k2, n) = if trans_b {
        (b_cols, b_rows)
    } else {
        (b_rows, b_cols)
    };
    if k != k2 {
        return Err(Error::Shape {
            op: OP,
            detail: format!(
                "inner dimensions differ: {} (a{}) against {} (b{})",
                a.shape(),
                if trans_a { "^T" } else { "" },
                b.shape(),
                if trans_b { "^T" } else { "" }
            ),
        });
    }
    let batch_dims = match (a_batch, b_batch) {
        (x, y) if x == y => x,
        (x, []) => x,
        ([], y) => y,
        _ => {
            return Err(Error::Shape {
                op: OP,
                detail: format!("batch dimensions of {} and {} differ", a.shape(), b.shape()),
            });
        }
    };
    let batch: usize = batch_dims.iter().product();
    let spec = GemmSpec {
        batch,
        m,
        n,
        k,
        trans_a,
        trans_b,
        a_batch_stride: if a_batch.is_empty() { 0 } else { m * k },
        b_batch_stride: if b_batch.is_empty() { 0 } else { k * n },
    };
    let mut out_dims = batch_dims.to_vec();
    out_dims.extend([m, n]);
    let out_shape = Shape::new(&out_dims);
    let device = a.device();
    let mut out = Array::uninit(device, out_shape.clone(), a.dtype(), OP)?;
    match a.dtype() {
        DType::F32 | DType::F64 => {
            device
                .backend()
                .gemm(&spec, a.buffer(), b.buffer(), out.buffer_mut(OP)?)?;
        }
        _ => {
            // Half types: widen to f32 workspace, multiply, narrow into the output.
            let _workspace = device.scoped_tag(Tag::WORKSPACE);
            let widen = |x: &Array| x.cast(DType::F32).map_err(|err| err.in_op(OP));
            let (a32, b32) = (widen(a)?, widen(b)?);
            let mut out32 = Array::uninit(device, out_shape, DType::F32, OP)?;
            device
                .backend()
                .gemm(&spec, a32.buffer(), b32.buffer(), out32.buffer_mut(OP)?)?;
            device.backend().cast(out32.buffer(), out.buffer_mut(OP)?)?;
        }
    }
    Ok(out)
}
