//! Elementwise arithmetic: unary functions, binary operations with NumPy broadcasting, the
//! derivatives their backward rules need, and the fused SwiGLU gate.

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
pub(crate) mod isa;
pub(crate) mod kernels;
mod meta;
mod swiglu;

pub use kernels::{BinaryOp, ElementwiseKernels, SwigluBackwardOperands, SwigluOperands, UnaryOp};
pub use swiglu::{SwigluGrads, swiglu, swiglu_backward};

use crate::array::Array;
use crate::error::Result;

/// `op(x)` elementwise, into a new array of the same shape and dtype.
pub fn unary(op: UnaryOp, x: &Array) -> Result<Array> {
    x.check_float(op.name())?;
    let mut out = Array::uninit(x.device(), x.shape().clone(), x.dtype(), op.name())?;
    x.device()
        .backend()
        .unary(op, x.buffer(), out.buffer_mut(op.name())?)?;
    Ok(out)
}

/// `op(a, b)` elementwise with NumPy broadcasting, into a new array.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::elementwise::add};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let a = Array::from_f64(&cpu, [2, 3], DType::F32, &[1., 2., 3., 4., 5., 6.])?;
/// let bias = Array::from_f64(&cpu, [3], DType::F32, &[10., 20., 30.])?;
/// assert_eq!(add(&a, &bias)?.to_f64()?, [11., 22., 33., 14., 25., 36.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn binary(op: BinaryOp, a: &Array, b: &Array) -> Result<Array> {
    a.check_float(op.name())?;
    a.check_peer(b, op.name())?;
    let shape = a.shape().broadcast(b.shape(), op.name())?;
    let a_strides = a.shape().broadcast_strides(&shape);
    let b_strides = b.shape().broadcast_strides(&shape);
    let mut out = Array::uninit(a.device(), shape.clone(), a.dtype(), op.name())?;
    a.device().backend().binary(
        op,
        (a.buffer(), &a_strides),
        (b.buffer(), &b_strides),
        out.buffer_mut(op.name())?,
        &shape,
    )?;
    Ok(out)
}

macro_rules! unary_fns {
    ($($(#[$doc:meta])* $name:ident => $op:expr;)*) => {
        $( $(#[$doc])* pub fn $name(x: &Array) -> Result<Array> { unary($op, x) } )*
    };
}

unary_fns! {
    /// `-x`.
    neg => UnaryOp::Neg;
    /// `max(x, 0)`.
    relu => UnaryOp::Relu;
    /// GELU (tanh form).
    gelu => UnaryOp::Gelu;
    /// `e^x`.
    exp => UnaryOp::Exp;
    /// `ln x`.
    log => UnaryOp::Log;
    /// `tanh x`.
    tanh => UnaryOp::Tanh;
    /// `sqrt x`.
    sqrt => UnaryOp::Sqrt;
}

/// `s x`.
pub fn scale(x: &Array, s: f64) -> Result<Array> {
    unary(UnaryOp::Scale(s), x)
}

/// `x^p`.
pub fn powf(x: &Array, p: f64) -> Result<Array> {
    unary(UnaryOp::Powf(p), x)
}

macro_rules! binary_fns {
    ($($(#[$doc:meta])* $name:ident($a:ident, $b:ident) => $op:expr;)*) => {
        $( $(#[$doc])* pub fn $name($a: &Array, $b: &Array) -> Result<Array> { binary($op, $a, $b) } )*
    };
}

binary_fns! {
    /// `a + b`, broadcasting.
    add(a, b) => BinaryOp::Add;
    /// `a - b`, broadcasting.
    sub(a, b) => BinaryOp::Sub;
    /// `a * b`, broadcasting.
    mul(a, b) => BinaryOp::Mul;
    /// `a / b`, broadcasting.
    div(a, b) => BinaryOp::Div;
    /// The gradient of `relu` at `x` for upstream gradient `dy`.
    relu_backward(x, dy) => BinaryOp::ReluBackward;
    /// The gradient of `gelu` at `x` for upstream gradient `dy`.
    gelu_backward(x, dy) => BinaryOp::GeluBackward;
    /// The gradient of `tanh` from its output `y`, for upstream gradient `dy`.
    tanh_backward(y, dy) => BinaryOp::TanhBackward;
    /// The gradient of `sqrt` from its output `y`, for upstream gradient `dy`.
    sqrt_backward(y, dy) => BinaryOp::SqrtBackward;
    /// 1 where `a == b`, 0 elsewhere.
    equal(a, b) => BinaryOp::Equal;
}

/// The gradient of `powf(x, p)` at `x`, for upstream gradient `dy`.
pub fn powf_backward(x: &Array, dy: &Array, p: f64) -> Result<Array> {
    binary(BinaryOp::PowfBackward(p), x, dy)
}

/// `acc += x`, in place (same shape, dtype and device; `acc` must be the only handle to its
/// buffer): accumulates gradients without allocating, so it cannot run out of memory.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::elementwise::add_into};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let mut acc = Array::full(&cpu, [3], DType::F32, 1.0)?;
/// add_into(&mut acc, &Array::full(&cpu, [3], DType::F32, 0.5)?)?;
/// assert_eq!(acc.to_f64()?, [1.5, 1.5, 1.5]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn add_into(acc: &mut Array, x: &Array) -> Result<()> {
    const OP: &str = "add_into";
    acc.check_float(OP)?;
    acc.check_peer(x, OP)?;
    if acc.shape() != x.shape() {
        return Err(crate::error::Error::Shape {
            op: OP,
            detail: format!("accumulator {} against {}", acc.shape(), x.shape()),
        });
    }
    let device = acc.device().clone();
    // `x + acc`, bit for bit `acc + x`: float addition commutes.
    device
        .backend()
        .binary_assign(BinaryOp::Add, x.buffer(), acc.buffer_mut(OP)?)
}

/// `x *= factor`, in place, `factor` one element of `x`'s dtype on its device (a gradient from
/// upstream, read where it lives; `x` must be the only handle to its buffer): rescales an
/// array without a second one.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType, ops::elementwise::scale_by_into};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let mut x = Array::from_f64(&cpu, [3], DType::F32, &[1., -2., 0.5])?;
/// scale_by_into(&mut x, &Array::full(&cpu, [], DType::F32, 4.0)?)?;
/// assert_eq!(x.to_f64()?, [4., -8., 2.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn scale_by_into(x: &mut Array, factor: &Array) -> Result<()> {
    const OP: &str = "scale_by_into";
    x.check_float(OP)?;
    x.check_peer(factor, OP)?;
    if factor.numel() != 1 {
        return Err(crate::error::Error::Shape {
            op: OP,
            detail: format!("factor {}: one element", factor.shape()),
        });
    }
    let device = x.device().clone();
    device
        .backend()
        .scale_by(factor.buffer(), x.buffer_mut(OP)?)
}

/// `b = op(a, b)` elementwise, in place (same shape, dtype and device, no broadcasting; `b`
/// must be the only handle to its buffer): a backward rule turning an upstream gradient it owns
/// into its input's gradient without a second array.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType};
/// use headroom_kernels::ops::elementwise::{BinaryOp, binary_into};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Array::from_f64(&cpu, [3], DType::F32, &[-1., 0.5, 2.])?;
/// let mut dy = Array::full(&cpu, [3], DType::F32, 3.0)?;
/// binary_into(BinaryOp::ReluBackward, &x, &mut dy)?;
/// assert_eq!(dy.to_f64()?, [0., 3., 3.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn binary_into(op: BinaryOp, a: &Array, b: &mut Array) -> Result<()> {
    let name = op.name();
    a.check_float(name)?;
    a.check_peer(b, name)?;
    if a.shape() != b.shape() {
        return Err(crate::error::Error::Shape {
            op: name,
            detail: format!("{} into {} in place", a.shape(), b.shape()),
        });
    }
    let device = a.device().clone();
    device
        .backend()
        .binary_assign(op, a.buffer(), b.buffer_mut(name)?)
}
