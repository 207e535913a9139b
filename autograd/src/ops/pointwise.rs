//! Elementwise ops: arithmetic with broadcasting (operands of different float dtypes meet in
//! the wider one), and functions of one tensor.

use headroom_kernels::ops::elementwise::{self as ew, BinaryOp};

use super::{promote, promoted, reduce_to, rule, rule_in_place, when};
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

impl Tensor {
    /// `self + other`, broadcasting (NumPy's rules).
    pub fn add(&self, other: &Tensor) -> Result<Tensor> {
        // Mixed dtypes of one shape: widen the narrower operand into the sum itself.
        let wider = promoted(self.dtype(), other.dtype());
        if self.shape() == other.shape() && self.dtype() != other.dtype() {
            if wider == self.dtype() {
                return other.widening_add(self);
            }
            if wider == other.dtype() {
                return self.widening_add(other);
            }
        }
        let (a, b) = promote(self, other)?;
        let y = Tensor::output(ew::add(a.array(), b.array())?);
        if let Some(rec) = begin(&[&a, &b]) {
            let (sa, sb) = (a.shape().clone(), b.shape().clone());
            let backward = rule(move |g, needs| {
                Ok(vec![
                    when(needs[0], || reduce_to(g, &sa))?,
                    when(needs[1], || reduce_to(g, &sb))?,
                ])
            });
            rec.finish("add", &[&y], saves(&[]), backward);
        }
        Ok(y)
    }

    /// `wide + self` for `self` of a narrower dtype and the same shape (a residual stream in
    /// f32 plus a layer's bf16 output): the widened copy of `self` becomes the sum, in place,
    /// so the op holds one new array where a cast and an add would hold two.
    fn widening_add(&self, wide: &Tensor) -> Result<Tensor> {
        let mut sum = self.array().cast(wide.dtype())?;
        ew::binary_into(BinaryOp::Add, wide.array(), &mut sum)?;
        let y = Tensor::output(sum);
        if let Some(rec) = begin(&[self, wide]) {
            let narrow = self.dtype();
            let backward = rule(move |g, needs| {
                Ok(vec![
                    when(needs[0], || Ok(g.cast(narrow)?))?,
                    when(needs[1], || Ok(g.clone()))?,
                ])
            });
            rec.finish("add", &[&y], saves(&[]), backward);
        }
        Ok(y)
    }

    /// `self - other`, broadcasting.
    pub fn sub(&self, other: &Tensor) -> Result<Tensor> {
        let (a, b) = promote(self, other)?;
        let y = Tensor::output(ew::sub(a.array(), b.array())?);
        if let Some(rec) = begin(&[&a, &b]) {
            let (sa, sb) = (a.shape().clone(), b.shape().clone());
            let backward = rule(move |g, needs| {
                Ok(vec![
                    when(needs[0], || reduce_to(g, &sa))?,
                    when(needs[1], || Ok(ew::neg(&reduce_to(g, &sb)?)?))?,
                ])
            });
            rec.finish("sub", &[&y], saves(&[]), backward);
        }
        Ok(y)
    }

    /// `self * other`, broadcasting. Keeps each operand only if the other needs a gradient.
    pub fn mul(&self, other: &Tensor) -> Result<Tensor> {
        let (a, b) = promote(self, other)?;
        let y = Tensor::output(ew::mul(a.array(), b.array())?);
        if let Some(rec) = begin(&[&a, &b]) {
            let (sa, sb) = (a.shape().clone(), b.shape().clone());
            let keep_b = rec.tracks(0).then(|| b.array().clone());
            let keep_a = rec.tracks(1).then(|| a.array().clone());
            let saved = saves(&keep_a.iter().chain(&keep_b).collect::<Vec<_>>());
            let backward = rule(move |g, needs| {
                let da = match (needs[0], keep_b) {
                    (true, Some(b)) => Some(reduce_to(&ew::mul(g, &b)?, &sa)?),
                    _ => None,
                };
                let db = match (needs[1], keep_a) {
                    (true, Some(a)) => Some(reduce_to(&ew::mul(g, &a)?, &sb)?),
                    _ => None,
                };
                Ok(vec![da, db])
            });
            rec.finish("mul", &[&y], saved, backward);
        }
        Ok(y)
    }

    /// `self / other`, broadcasting.
    pub fn div(&self, other: &Tensor) -> Result<Tensor> {
        let (a, b) = promote(self, other)?;
        let y = Tensor::output(ew::div(a.array(), b.array())?);
        if let Some(rec) = begin(&[&a, &b]) {
            let (sa, sb) = (a.shape().clone(), b.shape().clone());
            let divisor = b.array().clone();
            let quotient = rec.tracks(1).then(|| y.array().clone());
            let saved = saves(&[&divisor].into_iter().chain(&quotient).collect::<Vec<_>>());
            let backward = rule(move |g, needs| {
                // d(a/b)/da = 1/b; d(a/b)/db = -(a/b)/b.
                let g_over_b = ew::div(g, &divisor)?;
                let db = match (needs[1], quotient) {
                    (true, Some(q)) => Some(ew::neg(&reduce_to(&ew::mul(&g_over_b, &q)?, &sb)?)?),
                    _ => None,
                };
                let da = when(needs[0], || reduce_to(&g_over_b, &sa))?;
                Ok(vec![da, db])
            });
            rec.finish("div", &[&y], saved, backward);
        }
        Ok(y)
    }

    /// `-self`.
    pub fn neg(&self) -> Result<Tensor> {
        let y = Tensor::output(ew::neg(self.array())?);
        if let Some(rec) = begin(&[self]) {
            rec.finish(
                "neg",
                &[&y],
                saves(&[]),
                rule(|g, _| Ok(vec![Some(ew::neg(g)?)])),
            );
        }
        Ok(y)
    }

    /// `s * self` for a number `s`.
    pub fn scale(&self, s: f64) -> Result<Tensor> {
        let y = Tensor::output(ew::scale(self.array(), s)?);
        if let Some(rec) = begin(&[self]) {
            rec.finish(
                "scale",
                &[&y],
                saves(&[]),
                rule(move |g, _| Ok(vec![Some(ew::scale(g, s)?)])),
            );
        }
        Ok(y)
    }

    /// `e^self`; keeps its output.
    pub fn exp(&self) -> Result<Tensor> {
        let y = Tensor::output(ew::exp(self.array())?);
        if let Some(rec) = begin(&[self]) {
            let out = y.array().clone();
            rec.finish(
                "exp",
                &[&y],
                saves(&[&out]),
                rule_in_place(BinaryOp::Mul, out),
            );
        }
        Ok(y)
    }

    /// `ln self`; keeps its input.
    pub fn log(&self) -> Result<Tensor> {
        let y = Tensor::output(ew::log(self.array())?);
        if let Some(rec) = begin(&[self]) {
            let x = self.array().clone();
            rec.finish(
                "log",
                &[&y],
                saves(&[&x]),
                rule(move |g, _| Ok(vec![Some(ew::div(g, &x)?)])),
            );
        }
        Ok(y)
    }

    /// `sqrt self`; keeps its output.
    pub fn sqrt(&self) -> Result<Tensor> {
        let y = Tensor::output(ew::sqrt(self.array())?);
        if let Some(rec) = begin(&[self]) {
            let out = y.array().clone();
            rec.finish(
                "sqrt",
                &[&y],
                saves(&[&out]),
                rule_in_place(BinaryOp::SqrtBackward, out),
            );
        }
        Ok(y)
    }

    /// `self^p` for a number `p`; keeps its input.
    pub fn powf(&self, p: f64) -> Result<Tensor> {
        let y = Tensor::output(ew::powf(self.array(), p)?);
        if let Some(rec) = begin(&[self]) {
            let x = self.array().clone();
            rec.finish(
                "powf",
                &[&y],
                saves(&[&x]),
                rule_in_place(BinaryOp::PowfBackward(p), x),
            );
        }
        Ok(y)
    }

    /// `max(self, 0)`; keeps its output (positive exactly where the input is).
    pub fn relu(&self) -> Result<Tensor> {
        let y = Tensor::output(ew::relu(self.array())?);
        if let Some(rec) = begin(&[self]) {
            let out = y.array().clone();
            rec.finish(
                "relu",
                &[&y],
                saves(&[&out]),
                rule_in_place(BinaryOp::ReluBackward, out),
            );
        }
        Ok(y)
    }

    /// GELU, tanh form; keeps its input.
    pub fn gelu(&self) -> Result<Tensor> {
        let y = Tensor::output(ew::gelu(self.array())?);
        if let Some(rec) = begin(&[self]) {
            let x = self.array().clone();
            rec.finish(
                "gelu",
                &[&y],
                saves(&[&x]),
                rule_in_place(BinaryOp::GeluBackward, x),
            );
        }
        Ok(y)
    }

    /// `tanh self`; keeps its output.
    pub fn tanh(&self) -> Result<Tensor> {
        let y = Tensor::output(ew::tanh(self.array())?);
        if let Some(rec) = begin(&[self]) {
            let out = y.array().clone();
            rec.finish(
                "tanh",
                &[&y],
                saves(&[&out]),
                rule_in_place(BinaryOp::TanhBackward, out),
            );
        }
        Ok(y)
    }
}
