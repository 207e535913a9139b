//! CPU kernels for elementwise ops.

use rayon::prelude::*;

use super::isa::{assign_with_best_isa, in_best_isa, zip_with_best_isa};
use super::kernels::{
    BinaryOp, ElementwiseKernels, SwigluBackwardOperands, SwigluOperands, UnaryOp, swiglu_grads_of,
    swiglu_of,
};
use crate::buffer::Buffer;
use crate::cpu::{CHUNK, CpuBackend, par_rows, with_float};
use crate::dtype::Float;
use crate::error::Result;
use crate::shape::Shape;

/// Calls `$run` with a closure applying `$op`, one match arm per variant, so that each closure
/// sees a constant variant: the per-element `match` folds away and the loop vectorizes.
macro_rules! unswitch {
    ($op:expr, $c:ty, $ty:ident, [$($unit:ident),*], [$($param:ident),*], |$f:ident| $call:expr) => {
        match $op {
            $( $ty::$unit => {
                let $f = move |x: $c, y: $c| $ty::$unit.apply2(x, y);
                $call
            } )*
            $( $ty::$param(p) => {
                let $f = move |x: $c, y: $c| $ty::$param(p).apply2(x, y);
                $call
            } )*
        }
    };
}

/// [`unswitch!`] over every [`BinaryOp`], listed once for all the binary kernels.
macro_rules! unswitch_binary {
    ($op:expr, $c:ty, |$f:ident| $call:expr) => {
        unswitch!(
            $op,
            $c,
            BinaryOp,
            [
                Add,
                Sub,
                Mul,
                Div,
                ReluBackward,
                GeluBackward,
                TanhBackward,
                SqrtBackward,
                Equal
            ],
            [PowfBackward],
            |$f| $call
        )
    };
}

/// One signature for both op kinds, so that `unswitch!` serves both (a unary op ignores `y`).
trait Apply2 {
    fn apply2<C: crate::dtype::Compute>(self, x: C, y: C) -> C;
}

impl Apply2 for UnaryOp {
    #[inline(always)]
    fn apply2<C: crate::dtype::Compute>(self, x: C, _: C) -> C {
        self.apply(x)
    }
}

impl Apply2 for BinaryOp {
    #[inline(always)]
    fn apply2<C: crate::dtype::Compute>(self, x: C, y: C) -> C {
        self.apply(x, y)
    }
}

impl ElementwiseKernels for CpuBackend {
    fn unary(&self, op: UnaryOp, x: &Buffer, out: &mut Buffer) -> Result<()> {
        with_float!(x.dtype(), op.name(), |T| {
            let x = x.host::<T>(op.name())?;
            let out = out.host_mut::<T>(op.name())?;
            unswitch!(
                op,
                <T as Float>::C,
                UnaryOp,
                [Neg, Relu, Gelu, Exp, Log, Tanh, Sqrt],
                [Scale, Powf],
                |f| map_unary::<T>(x, out, f)
            );
            Ok(())
        })
    }

    fn binary(
        &self,
        op: BinaryOp,
        (a, a_strides): (&Buffer, &[usize]),
        (b, b_strides): (&Buffer, &[usize]),
        out: &mut Buffer,
        shape: &Shape,
    ) -> Result<()> {
        with_float!(a.dtype(), op.name(), |T| {
            let (a, b) = (a.host::<T>(op.name())?, b.host::<T>(op.name())?);
            let out = out.host_mut::<T>(op.name())?;
            unswitch_binary!(op, <T as Float>::C, |f| binary_strided::<T>(
                f,
                (a, a_strides),
                (b, b_strides),
                out,
                shape
            ));
            Ok(())
        })
    }

    fn binary_assign(&self, op: BinaryOp, a: &Buffer, b: &mut Buffer) -> Result<()> {
        with_float!(a.dtype(), op.name(), |T| {
            let a = a.host::<T>(op.name())?;
            let b = b.host_mut::<T>(op.name())?;
            unswitch_binary!(op, <T as Float>::C, |f| b
                .par_chunks_mut(CHUNK)
                .zip(a.par_chunks(CHUNK))
                .for_each(|(b, a)| assign_with_best_isa(b, a, &f)));
            Ok(())
        })
    }

    fn scale_by(&self, factor: &Buffer, x: &mut Buffer) -> Result<()> {
        const OP: &str = "scale_by";
        with_float!(x.dtype(), OP, |T| {
            let factor = factor.host::<T>(OP)?[0].load();
            x.host_mut::<T>(OP)?
                .par_chunks_mut(CHUNK)
                .for_each(|x| x.iter_mut().for_each(|v| *v = T::store(v.load() * factor)));
            Ok(())
        })
    }

    fn swiglu(&self, operands: SwigluOperands<'_>) -> Result<()> {
        let SwigluOperands { gate, up, out } = operands;
        const OP: &str = "swiglu";
        with_float!(gate.dtype(), OP, |T| {
            let (gate, up) = (gate.host::<T>(OP)?, up.host::<T>(OP)?);
            out.host_mut::<T>(OP)?
                .par_chunks_mut(CHUNK)
                .zip(gate.par_chunks(CHUNK).zip(up.par_chunks(CHUNK)))
                .for_each(|(out, (gate, up))| {
                    in_best_isa(
                        #[inline(always)]
                        || {
                            for (o, (&g, &u)) in out.iter_mut().zip(gate.iter().zip(up)) {
                                *o = swiglu_of(g, u);
                            }
                        },
                    )
                });
            Ok(())
        })
    }

    fn swiglu_backward(&self, operands: SwigluBackwardOperands<'_>) -> Result<()> {
        let SwigluBackwardOperands {
            gate,
            up,
            dy,
            dgate,
            dup,
        } = operands;
        const OP: &str = "swiglu_backward";
        with_float!(gate.dtype(), OP, |T| {
            let (gate, up, dy) = (gate.host::<T>(OP)?, up.host::<T>(OP)?, dy.host::<T>(OP)?);
            let inputs = gate.par_chunks(CHUNK).zip(up.par_chunks(CHUNK));
            let outputs = dgate.host_mut::<T>(OP)?.par_chunks_mut(CHUNK);
            outputs
                .zip(dup.host_mut::<T>(OP)?.par_chunks_mut(CHUNK))
                .zip(inputs.zip(dy.par_chunks(CHUNK)))
                .for_each(|((dgate, dup), ((gate, up), dy))| {
                    let (gate, up, dy) =
                        (&gate[..dgate.len()], &up[..dgate.len()], &dy[..dgate.len()]);
                    in_best_isa(
                        #[inline(always)]
                        || {
                            for (j, (dg, du)) in dgate.iter_mut().zip(dup.iter_mut()).enumerate() {
                                (*dg, *du) = swiglu_grads_of(gate[j], up[j], dy[j]);
                            }
                        },
                    )
                });
            Ok(())
        })
    }
}

/// `out[i] = f(x[i])`, in parallel chunks.
fn map_unary<T: Float>(x: &[T], out: &mut [T], f: impl Fn(T::C, T::C) -> T::C + Sync) {
    out.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(out, x)| zip_with_best_isa(out, x, x, &f));
}

/// `out = op(a, b)` over `shape`, reading `a` and `b` through broadcast strides.
fn binary_strided<T: Float>(
    f: impl Fn(T::C, T::C) -> T::C + Sync,
    (a, a_strides): (&[T], &[usize]),
    (b, b_strides): (&[T], &[usize]),
    out: &mut [T],
    shape: &Shape,
) {
    let contiguous = shape.strides();
    if a_strides == contiguous.as_slice() && b_strides == contiguous.as_slice() {
        out.par_chunks_mut(CHUNK)
            .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
            .for_each(|(out, (a, b))| zip_with_best_isa(out, a, b, &f));
        return;
    }
    let (a_step, b_step) = (
        a_strides.last().copied().unwrap_or(0),
        b_strides.last().copied().unwrap_or(0),
    );
    par_rows(
        out,
        shape.dims(),
        [a_strides, b_strides],
        |out_row, [a_at, b_at]| {
            for (j, o) in out_row.iter_mut().enumerate() {
                let x = a[a_at + j * a_step].load();
                let y = b[b_at + j * b_step].load();
                *o = T::store(f(x, y));
            }
        },
    );
}
