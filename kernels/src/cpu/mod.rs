//! The CPU backend: real host memory from headroom-alloc, parallel with rayon, GEMM by `gemm`.
//! Each op's CPU kernels live beside the op (`ops/<op>/cpu.rs`).

use rayon::prelude::*;

/// Runs kernels on the host.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuBackend;

/// Elements per parallel task: big enough to amortize scheduling, small enough to balance.
pub(crate) const CHUNK: usize = 1 << 14;

/// Rows per parallel task at least, so that short rows are not scheduled one by one.
pub(crate) fn min_rows(len: usize) -> usize {
    (CHUNK / len.max(1)).max(1)
}

/// Fills `out`, a contiguous array of shape `dims`, one row of its last dimension at a time, in
/// parallel: `fill(row, starts)` gets the row and, for each operand, the offset of the row's
/// first element, walked through that operand's `strides` (one per dimension; 0 along a
/// broadcast dimension). Along the row an operand advances by its last stride.
pub(crate) fn par_rows<T: Send, const N: usize>(
    out: &mut [T],
    dims: &[usize],
    strides: [&[usize]; N],
    fill: impl Fn(&mut [T], [usize; N]) + Sync,
) {
    let row = dims.last().copied().unwrap_or(1);
    if row == 0 || out.is_empty() {
        return;
    }
    let outer_axes = dims.len().saturating_sub(1);
    let rows_per_task = (CHUNK / row).max(1);
    out.par_chunks_mut(row * rows_per_task)
        .enumerate()
        .for_each(|(task, rows)| {
            for (r, out_row) in rows.chunks_mut(row).enumerate() {
                let mut index = task * rows_per_task + r;
                let mut starts = [0; N];
                for axis in (0..outer_axes).rev() {
                    let i = index % dims[axis];
                    index /= dims[axis];
                    for (start, strides) in starts.iter_mut().zip(strides) {
                        *start += i * strides[axis];
                    }
                }
                fill(out_row, starts);
            }
        });
}

/// Runs `$body` with `$t` bound to the Rust type of a float `$dtype`, or fails naming `$op`.
macro_rules! with_float {
    ($dtype:expr, $op:expr, |$t:ident| $body:expr) => {
        match $dtype {
            $crate::dtype::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::dtype::DType::F64 => {
                type $t = f64;
                $body
            }
            $crate::dtype::DType::F16 => {
                type $t = half::f16;
                $body
            }
            $crate::dtype::DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            other => Err($crate::error::Error::DType {
                op: $op,
                expected: "a float dtype".into(),
                got: other,
            }),
        }
    };
}

/// Runs `$body` with `$t` bound to the Rust type of any `$dtype`.
/// `$t` aliases a concrete type, whose inherent methods win over the traits': convert with
/// `<$t as Element>::from_f64`, since half's own `from_f64` rounds bf16 from a truncated value.
macro_rules! with_element {
    ($dtype:expr, |$t:ident| $body:expr) => {
        match $dtype {
            $crate::dtype::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::dtype::DType::F64 => {
                type $t = f64;
                $body
            }
            $crate::dtype::DType::F16 => {
                type $t = half::f16;
                $body
            }
            $crate::dtype::DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            $crate::dtype::DType::U32 => {
                type $t = u32;
                $body
            }
            $crate::dtype::DType::I32 => {
                type $t = i32;
                $body
            }
            $crate::dtype::DType::U8 => {
                type $t = u8;
                $body
            }
        }
    };
}

pub(crate) use {with_element, with_float};
