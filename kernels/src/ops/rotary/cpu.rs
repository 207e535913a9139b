//! CPU kernels: rotary embeddings, one task per group of rows.

use rayon::prelude::*;

use super::kernels::{RotaryKernels, RotaryOperands, RotarySpec, Turn};
use crate::cpu::{CpuBackend, min_rows};
use crate::dtype::{Compute, DType, Float};
use crate::error::{Error, Result};
use crate::ops::documents::check_starts;

/// The cosine and sine of a compute type.
trait Trig: Compute {
    /// `(cos self, sin self)`.
    fn cos_sin(self) -> (Self, Self);
}

impl Trig for f32 {
    fn cos_sin(self) -> (Self, Self) {
        (self.cos(), self.sin())
    }
}

impl Trig for f64 {
    fn cos_sin(self) -> (Self, Self) {
        (self.cos(), self.sin())
    }
}

impl RotaryKernels for CpuBackend {
    fn rotary(&self, spec: &RotarySpec, operands: RotaryOperands<'_>) -> Result<()> {
        const OP: &str = "rotary";
        let RotaryOperands {
            x,
            inv_freq,
            starts,
            out,
        } = operands;
        let starts = match (spec.documents, starts) {
            (Some(rows), Some(starts)) => {
                let values = starts.host::<u32>(OP)?;
                check_starts(values, (rows, spec.len), OP)?;
                Some(values)
            }
            _ => None,
        };
        macro_rules! run {
            ($t:ty) => {
                rotate::<$t>(
                    spec,
                    (x.host(OP)?, starts),
                    inv_freq.host(OP)?,
                    out.host_mut(OP)?,
                )
            };
        }
        match x.dtype() {
            DType::F32 => run!(f32),
            DType::F64 => run!(f64),
            DType::F16 => run!(half::f16),
            DType::BF16 => run!(half::bf16),
            other => {
                return Err(Error::DType {
                    op: OP,
                    expected: "a float dtype".into(),
                    got: other,
                });
            }
        }
        Ok(())
    }
}

/// Rotates every row of `x` into `out`, at positions within the documents of `starts` where
/// given; the frequencies are of the compute type.
fn rotate<T: Float>(
    spec: &RotarySpec,
    (x, starts): (&[T], Option<&[u32]>),
    inv_freq: &[T::C],
    out: &mut [T],
) where
    T::C: Trig,
{
    let RotarySpec {
        len,
        head,
        offset,
        turn,
        ..
    } = *spec;
    if head == 0 || len == 0 {
        return;
    }
    let half = head / 2;
    // The angles' cosines and sines, once per position and frequency (every head and sample
    // shares them; a position within a document is below len too).
    let zero = T::C::of(0.0);
    let mut table = vec![(zero, zero); len * half];
    table
        .par_chunks_mut(half)
        .enumerate()
        .with_min_len(min_rows(half))
        .for_each(|(p, angles)| cos_sin_at(T::C::of((offset + p) as f64), inv_freq, angles));
    out.par_chunks_mut(head)
        .zip(x.par_chunks(head))
        .enumerate()
        .with_min_len(min_rows(head))
        .for_each(|(row, (out, x))| {
            let t = row % len;
            let position = match starts {
                Some(starts) => t - starts[row / len / spec.heads_per_row() * len + t] as usize,
                None => t,
            };
            let angles = &table[position * half..][..half];
            let (x1, x2) = x.split_at(half);
            let (o1, o2) = out.split_at_mut(half);
            for i in 0..half {
                let (cos, sin) = angles[i];
                let sin = if turn == Turn::Forward { sin } else { -sin };
                let (a, b) = (x1[i].load(), x2[i].load());
                o1[i] = T::store(a * cos - b * sin);
                o2[i] = T::store(b * cos + a * sin);
            }
        });
}

/// The cosine and sine of each frequency's angle at `position`, into `angles`.
fn cos_sin_at<C: Trig>(position: C, inv_freq: &[C], angles: &mut [(C, C)]) {
    for (angle, &f) in angles.iter_mut().zip(inv_freq) {
        *angle = (position * f).cos_sin();
    }
}
