//! Elementwise arithmetic: unary functions, binary operations with NumPy broadcasting, and the
//! derivatives their backward rules need.

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod isa;
mod meta;

use crate::buffer::Array;
use crate::dtype::Compute;
use crate::error::Result;

/// `sqrt(2 / pi)`, for the tanh form of GELU.
const GELU_K: f64 = 0.797_884_560_802_865_4;
/// The cubic coefficient of the tanh form of GELU.
const GELU_C: f64 = 0.044_715;

/// `tanh u` for GELU's `u = sqrt(2/pi) (x + 0.044715 x^3)`, through the rational tanh (the
/// tanh form is itself an approximation of GELU's erf form, to about 1e-3).
#[inline(always)]
fn gelu_tanh<C: Compute>(x: C) -> C {
    (C::of(GELU_K) * (x + C::of(GELU_C) * x * x * x)).tanh_approx()
}

/// A function of one element.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UnaryOp {
    /// `-x`.
    Neg,
    /// `max(x, 0)`.
    Relu,
    /// GELU, tanh form: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    Gelu,
    /// `e^x`.
    Exp,
    /// `ln x`.
    Log,
    /// `tanh x`.
    Tanh,
    /// `sqrt x`.
    Sqrt,
    /// `s x`.
    Scale(f64),
    /// `x^p`.
    Powf(f64),
}

impl UnaryOp {
    /// Applies the function in compute precision. Always inlined, so that a kernel calling it
    /// with a constant op keeps only that op's arm.
    #[inline(always)]
    pub fn apply<C: Compute>(self, x: C) -> C {
        match self {
            UnaryOp::Neg => -x,
            UnaryOp::Relu => {
                if x > C::ZERO {
                    x
                } else {
                    C::ZERO
                }
            }
            UnaryOp::Gelu => C::of(0.5) * x * (C::ONE + gelu_tanh(x)),
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Scale(s) => C::of(s) * x,
            UnaryOp::Powf(p) => x.powf(C::of(p)),
        }
    }

    /// The op's name, for errors.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Relu => "relu",
            UnaryOp::Gelu => "gelu",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Scale(_) => "scale",
            UnaryOp::Powf(_) => "powf",
        }
    }
}

/// A function of two elements. The `*Backward` ops take the forward input (or output, as
/// named) first and the upstream gradient `dy` second, and return the input's gradient.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// `dy * (x > 0)`, from the input `x`.
    ReluBackward,
    /// `dy * gelu'(x)`, from the input `x`.
    GeluBackward,
    /// `dy * (1 - y^2)`, from the output `y = tanh x`.
    TanhBackward,
    /// `dy / (2 y)`, from the output `y = sqrt x`.
    SqrtBackward,
    /// `dy * p x^(p - 1)`, from the input `x`.
    PowfBackward(f64),
    /// 1 where `a == b`, 0 elsewhere: a mask (the gradient of a maximum flows where the input
    /// equals it); it has no gradient of its own.
    Equal,
}

impl BinaryOp {
    /// Applies the function in compute precision. Always inlined, so that a kernel calling it
    /// with a constant op keeps only that op's arm.
    #[inline(always)]
    pub fn apply<C: Compute>(self, a: C, b: C) -> C {
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::ReluBackward => {
                if a > C::ZERO {
                    b
                } else {
                    C::ZERO
                }
            }
            BinaryOp::GeluBackward => {
                // d/dx [x (1 + t) / 2] with t = tanh u: (1 + t) / 2 + x (1 - t^2) u' / 2.
                let t = gelu_tanh(a);
                let du = C::of(GELU_K) * (C::ONE + C::of(3.0 * GELU_C) * a * a);
                C::of(0.5) * b * (C::ONE + t + a * (C::ONE - t * t) * du)
            }
            BinaryOp::TanhBackward => b * (C::ONE - a * a),
            BinaryOp::SqrtBackward => b / (C::of(2.0) * a),
            BinaryOp::PowfBackward(p) => b * C::of(p) * a.powf(C::of(p - 1.0)),
            BinaryOp::Equal => {
                if a == b {
                    C::ONE
                } else {
                    C::ZERO
                }
            }
        }
    }

    /// The op's name, for errors.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::ReluBackward => "relu_backward",
            BinaryOp::GeluBackward => "gelu_backward",
            BinaryOp::TanhBackward => "tanh_backward",
            BinaryOp::SqrtBackward => "sqrt_backward",
            BinaryOp::PowfBackward(_) => "powf_backward",
            BinaryOp::Equal => "equal",
        }
    }
}

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
