//! Matrix products: `op(a) @ op(b)`, batched, with optional transposes; half types accumulate in
//! f32, on the GPU's tensor cores or the CPU's bf16 instructions where there are some, and
//! through workspace casts a panel at a time elsewhere.

pub(crate) mod bf16;
mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
pub(crate) mod few_rows;
mod half;
pub(crate) mod kernels;
mod meta;

pub(crate) use cpu::one_product;
pub use kernels::{GemmKernels, GemmSpec};

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::layout::kernels::Strided;
use crate::shape::Shape;

/// Whether this machine's CPU multiplies operands of the half type `dtype` as they are, with
/// f32 sums (bf16 where it has AMX or AVX512-BF16, unless `HEADROOM_CPU_BF16=widen` is set);
/// otherwise its half products widen to f32 panel by panel, which saves memory but not time.
pub fn cpu_multiplies(dtype: DType) -> bool {
    dtype == DType::BF16 && bf16::available()
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
    product(a, b, None, trans_a, trans_b, "matmul")
}

/// `op(a) @ op(b) + bias`, the bias (`[n]`, the output's last dimension, of the operands'
/// dtype) added to every row by the GEMM itself: the output starts as the bias and the product
/// accumulates into it (`torch.addmm`), with no second pass and no second array.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::gemm::matmul_bias};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Array::from_f64(&cpu, [2, 2], DType::F32, &[1., 2., 3., 4.])?;
/// let w = Array::from_f64(&cpu, [1, 2], DType::F32, &[1., 1.])?; // [out, in]
/// let b = Array::from_f64(&cpu, [1], DType::F32, &[0.5])?;
/// assert_eq!(matmul_bias(&x, &w, &b, false, true)?.to_f64()?, [3.5, 7.5]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn matmul_bias(
    a: &Array,
    b: &Array,
    bias: &Array,
    trans_a: bool,
    trans_b: bool,
) -> Result<Array> {
    product(a, b, Some(bias), trans_a, trans_b, "matmul_bias")
}

/// `out += op(a) @ op(b)` for plain matrices of f32 or f64 (the three of one dtype), or of a
/// half type added into f32, by the GEMM itself where the backend multiplies half types (cuBLAS
/// accumulates into the f32 output) and through a half product otherwise: how a gradient
/// summed over chunks grows in place.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::gemm::matmul_accumulate};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let a = Array::from_f64(&cpu, [1, 2], DType::F32, &[1., 2.])?;
/// let mut out = Array::from_f64(&cpu, [2, 2], DType::F32, &[1., 1., 1., 1.])?;
/// matmul_accumulate(&a, &a, true, false, &mut out)?; // out += a^T a
/// assert_eq!(out.to_f64()?, [2., 3., 3., 5.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn matmul_accumulate(
    a: &Array,
    b: &Array,
    trans_a: bool,
    trans_b: bool,
    out: &mut Array,
) -> Result<()> {
    const OP: &str = "matmul_accumulate";
    a.check_peer(b, OP)?;
    a.device().check_same(out.device(), OP)?;
    let half = matches!(a.dtype(), DType::F16 | DType::BF16);
    // Half operands add into f32; the others into their own dtype.
    let out_dtype = match a.dtype() {
        DType::F32 | DType::F64 => a.dtype(),
        DType::F16 | DType::BF16 => DType::F32,
        got => {
            return Err(Error::DType {
                op: OP,
                expected: "f32, f64, f16 or bf16".into(),
                got,
            });
        }
    };
    if out.dtype() != out_dtype {
        return Err(Error::DType {
            op: OP,
            expected: out_dtype.to_string(),
            got: out.dtype(),
        });
    }
    let (&[ar, ac], &[br, bc], &[or, oc]) =
        (a.shape().dims(), b.shape().dims(), out.shape().dims())
    else {
        return Err(Error::Shape {
            op: OP,
            detail: format!(
                "{}, {} and {} must be matrices",
                a.shape(),
                b.shape(),
                out.shape()
            ),
        });
    };
    let (m, k) = if trans_a { (ac, ar) } else { (ar, ac) };
    let (k2, n) = if trans_b { (bc, br) } else { (br, bc) };
    if k != k2 || (m, n) != (or, oc) {
        return Err(Error::Shape {
            op: OP,
            detail: format!(
                "op(a) is {m}x{k}, op(b) {k2}x{n}: they cannot add into {}",
                out.shape()
            ),
        });
    }
    let spec = GemmSpec {
        batch: 1,
        m,
        n,
        k,
        trans_a,
        trans_b,
        a_batch_stride: 0,
        b_batch_stride: 0,
        accumulate: true,
    };
    let device = a.device().clone();
    if half && !device.backend().gemm_half(a.dtype()) {
        let part = matmul(a, b, trans_a, trans_b)?;
        return crate::ops::elementwise::add_into(out, &part.cast(DType::F32)?);
    }
    device
        .backend()
        .gemm(&spec, a.buffer(), b.buffer(), out.buffer_mut(OP)?)
        .map_err(|err| err.in_op(OP))
}

/// The product behind [`matmul`] and [`matmul_bias`], errors named `op`.
fn product(
    a: &Array,
    b: &Array,
    bias: Option<&Array>,
    trans_a: bool,
    trans_b: bool,
    op: &'static str,
) -> Result<Array> {
    a.check_float(op)?;
    a.check_peer(b, op)?;
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
            op,
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
                op,
                detail: format!("batch dimensions of {} and {} differ", a.shape(), b.shape()),
            });
        }
    };
    let batch: usize = batch_dims.iter().product();
    // A batch of untransposed `a` against one shared matrix is one taller product: the batch's
    // rows are contiguous in `a` and in the output alike (a linear layer over [B, T, C]), as
    // long as the rows stay within the 32-bit dimensions GPU libraries take.
    let tall = batch
        .checked_mul(m)
        .is_some_and(|rows| rows <= i32::MAX as usize);
    let (batch, rows) = if b_batch.is_empty() && !trans_a && tall {
        (1, batch * m)
    } else {
        (batch, m)
    };
    let spec = GemmSpec {
        batch,
        m: rows,
        n,
        k,
        trans_a,
        trans_b,
        a_batch_stride: if a_batch.is_empty() { 0 } else { rows * k },
        b_batch_stride: if b_batch.is_empty() { 0 } else { k * n },
        accumulate: bias.is_some(),
    };
    if let Some(bias) = bias {
        a.check_peer(bias, op)?;
        if bias.shape().dims() != [n] {
            return Err(Error::Shape {
                op,
                detail: format!("bias {} for an output of {n} columns", bias.shape()),
            });
        }
    }
    let mut out_dims = batch_dims.to_vec();
    out_dims.extend([m, n]);
    let out_shape = Shape::new(&out_dims);
    let device = a.device();
    let mut out = Array::uninit(device, out_shape.clone(), a.dtype(), op)?;
    // Half operands go to the backend as they are where it multiplies them (a GPU, a CPU with
    // bf16 instructions), or where the product is a few rows against a transposed weight
    // (generation on a CPU: no f32 workspace, each weight read once as stored); elsewhere
    // they are widened panel by panel.
    let native = matches!(a.dtype(), DType::F32 | DType::F64)
        || device.backend().gemm_half(a.dtype())
        || few_rows::is_few_rows(&spec);
    if native {
        if let Some(bias) = bias {
            fill_rows(bias, &mut out, op)?;
        }
        device
            .backend()
            .gemm(&spec, a.buffer(), b.buffer(), out.buffer_mut(op)?)
            .map_err(|err| err.in_op(op))?;
    } else {
        half::product(&spec, a, b, bias, &mut out, op)?;
    }
    Ok(out)
}

/// Writes `row` (`[n]`) into every row of `out` (`[..., n]`, its dtype).
pub(super) fn fill_rows(row: &Array, out: &mut Array, op: &'static str) -> Result<()> {
    let dims = out.shape().dims().to_vec();
    let mut strides = vec![0; dims.len()];
    if let Some(last) = strides.last_mut() {
        *last = 1;
    }
    let view = Strided {
        offset: 0,
        dims: &dims,
        strides: &strides,
    };
    let device = out.device().clone();
    device
        .backend()
        .gather_strided(row.buffer(), view, out.buffer_mut(op)?)
}
