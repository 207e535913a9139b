//! What a backend runs for elementwise arithmetic: the functions of one and two elements, maps
//! of them with broadcasting, and the fused SwiGLU gate.

use crate::buffer::Buffer;
use crate::dtype::{Compute, Float};
use crate::error::Result;
use crate::shape::Shape;

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
    /// Every op, those that take a parameter with a sample one: what tests that must cover
    /// each op walk.
    pub const EVERY: [UnaryOp; 9] = [
        UnaryOp::Neg,
        UnaryOp::Relu,
        UnaryOp::Gelu,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Tanh,
        UnaryOp::Sqrt,
        UnaryOp::Scale(0.5),
        UnaryOp::Powf(1.5),
    ];

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
    /// Every op, those that take a parameter with a sample one: what tests that must cover
    /// each op walk.
    pub const EVERY: [BinaryOp; 10] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::ReluBackward,
        BinaryOp::GeluBackward,
        BinaryOp::TanhBackward,
        BinaryOp::SqrtBackward,
        BinaryOp::PowfBackward(1.5),
        BinaryOp::Equal,
    ];

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

/// `round(silu(gate)) * up`, `round` storing in `T` then loading again (nothing for f32 and
/// f64): the rounding of Hugging Face's `act_fn(gate) * up` in a half dtype.
#[inline(always)]
pub(crate) fn swiglu_of<T: Float>(gate: T, up: T) -> T {
    let x = gate.load();
    T::store(T::store(x * sigmoid(x)).load() * up.load())
}

/// The gradients of [`swiglu_of`] for upstream `dy`: `(dgate, dup)`, with
/// `dgate = dy up s (1 + gate (1 - s))` (`s = sigmoid(gate)`) and `dup = dy round(silu(gate))`.
#[inline(always)]
pub(crate) fn swiglu_grads_of<T: Float>(gate: T, up: T, dy: T) -> (T, T) {
    let (x, d) = (gate.load(), dy.load());
    let s = sigmoid(x);
    let silu = T::store(x * s).load();
    let dgate = d * up.load() * s * (<T::C as Compute>::ONE + x * (<T::C as Compute>::ONE - s));
    (T::store(dgate), T::store(d * silu))
}

/// `1 / (1 + e^-x)` in compute precision.
#[inline(always)]
fn sigmoid<C: Compute>(x: C) -> C {
    C::ONE / (C::ONE + (-x).exp())
}

/// The operands of [`ElementwiseKernels::swiglu`]: three buffers of one float dtype and length.
#[derive(Debug)]
pub struct SwigluOperands<'a> {
    /// The gate, passed through SiLU.
    pub gate: &'a Buffer,
    /// The up projection, which the gate scales.
    pub up: &'a Buffer,
    /// Receives `silu(gate) * up`.
    pub out: &'a mut Buffer,
}

/// The operands of [`ElementwiseKernels::swiglu_backward`]: five buffers of one float dtype and
/// length.
#[derive(Debug)]
pub struct SwigluBackwardOperands<'a> {
    /// The forward pass's gate.
    pub gate: &'a Buffer,
    /// The forward pass's up projection.
    pub up: &'a Buffer,
    /// The upstream gradient.
    pub dy: &'a Buffer,
    /// Receives the gate's gradient.
    pub dgate: &'a mut Buffer,
    /// Receives the up projection's gradient.
    pub dup: &'a mut Buffer,
}

/// Elementwise arithmetic, with broadcasting for two operands.
pub trait ElementwiseKernels {
    /// `out[i] = op(x[i])`; float dtypes, same length.
    fn unary(&self, op: UnaryOp, x: &Buffer, out: &mut Buffer) -> Result<()>;
    /// `out[i] = op(a[ia], b[ib])` over `shape`, where `ia` and `ib` walk `a` and `b` with the
    /// given strides (0 along broadcast dimensions); float dtypes.
    fn binary(
        &self,
        op: BinaryOp,
        a: (&Buffer, &[usize]),
        b: (&Buffer, &[usize]),
        out: &mut Buffer,
        shape: &Shape,
    ) -> Result<()>;

    /// `b[i] = op(a[i], b[i])`, in place; float dtypes, same dtype and length.
    fn binary_assign(&self, op: BinaryOp, a: &Buffer, b: &mut Buffer) -> Result<()>;

    /// `x[i] = x[i] * factor[0]`, in place, the factor read where it lives; float dtypes, the
    /// same for both.
    fn scale_by(&self, factor: &Buffer, x: &mut Buffer) -> Result<()>;

    /// SwiGLU: `out[i] = silu(gate[i]) * up[i]` with `silu(x) = x sigmoid(x)`, the SiLU
    /// rounded to the dtype before the product.
    fn swiglu(&self, operands: SwigluOperands<'_>) -> Result<()>;

    /// The gradients of [`ElementwiseKernels::swiglu`] from its operands and the upstream
    /// `dy`: `dgate` and `dup`, in one pass.
    fn swiglu_backward(&self, operands: SwigluBackwardOperands<'_>) -> Result<()>;
}
