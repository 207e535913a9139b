//! CPU kernels: FlashAttention-2, each block product one of [`Blocks`] (bf16 on AMX tiles
//! where the CPU has them; on `VDPBF16PS` alone such small products run faster widened). The
//! forward pass runs one task per head and block of 64 queries (its output rows are its own),
//! over blocks of 512 keys from the first its first row sees to the last its last row sees;
//! the backward pass one task per head, which walks the blocks of 64 keys and, for each, the
//! blocks of 256 queries that see them, accumulating the keys' and values' gradients for the
//! block and the queries' gradients for the head. Masked weights inside a block (the diagonal,
//! a window's start) are zeros. Grouped-query attention reads each key/value head once for its
//! group; the backward pass runs one task per key/value head, which sums its query heads'
//! shares of the keys' and values' gradients in their order. Half types compute in f32, f64 in
//! f64; every product accumulates in the compute type, and bf16 products on AMX take the
//! weights and their gradients rounded to bf16.

use std::ops::Range;

use half::{bf16, f16};
use rayon::prelude::*;

use super::blocks::{Bf16Units, Blocks, Mat, Widened};
use super::kernels::{
    AttentionBackwardOperands, AttentionKernels, AttentionOperands, AttentionSpec,
};
use crate::cpu::CpuBackend;
use crate::dtype::{Compute, DType, Element, Float};
use crate::error::{Error, Result};
use crate::ops::documents::{check_starts, document_ends};
use crate::ops::elementwise::isa::in_best_isa;
use crate::ops::gemm::bf16 as bf16_products;
use crate::ops::random::kernels::keeps;
use crate::ops::rows::lanes::{map_and_sum, max_by};

/// Queries per block of the forward pass (one task each).
const QUERIES: usize = 64;
/// Queries per block of the backward pass: tall, so that each block of keys and values is
/// packed for its products once for many queries.
const BACKWARD_QUERIES: usize = 256;
/// Keys per block of the backward pass.
const KEYS: usize = 64;
/// Keys per block of the forward pass: wide, so that each row's rescaling and the loops of
/// its online softmax run over many keys at once.
const FORWARD_KEYS: usize = 512;

impl AttentionKernels for CpuBackend {
    fn attention(&self, spec: &AttentionSpec, operands: AttentionOperands<'_>) -> Result<()> {
        let AttentionOperands {
            q,
            k,
            v,
            starts,
            out,
            lse,
        } = operands;
        const OP: &str = "attention";
        let starts = checked_starts(spec, starts, OP)?;
        macro_rules! run {
            ($t:ty, $blocks:ty) => {{
                let (q, k, v) = (q.host::<$t>(OP)?, k.host::<$t>(OP)?, v.host::<$t>(OP)?);
                let operands = ((q, k, v), starts);
                forward::<$t, $blocks>(spec, operands, out.host_mut(OP)?, lse.host_mut(OP)?);
                Ok(())
            }};
        }
        match q.dtype() {
            DType::F32 => run!(f32, Widened<f32>),
            DType::F64 => run!(f64, Widened<f64>),
            DType::F16 => run!(f16, Widened<f16>),
            DType::BF16 if bf16_products::on_tiles() => run!(bf16, Bf16Units),
            DType::BF16 => run!(bf16, Widened<bf16>),
            other => Err(not_float(other, OP)),
        }
    }

    fn attention_backward(
        &self,
        spec: &AttentionSpec,
        operands: AttentionBackwardOperands<'_>,
    ) -> Result<()> {
        let AttentionBackwardOperands {
            q,
            k,
            v,
            starts,
            out,
            lse,
            dout,
            dq,
            dk,
            dv,
        } = operands;
        const OP: &str = "attention_backward";
        let starts = checked_starts(spec, starts, OP)?;
        macro_rules! run {
            ($t:ty, $blocks:ty) => {{
                let operands = (q.host::<$t>(OP)?, k.host::<$t>(OP)?, v.host::<$t>(OP)?);
                let saved = (out.host::<$t>(OP)?, lse.host(OP)?, dout.host::<$t>(OP)?);
                let grads = (dq.host_mut(OP)?, dk.host_mut(OP)?, dv.host_mut(OP)?);
                backward::<$t, $blocks>(spec, (operands, starts), saved, grads);
                Ok(())
            }};
        }
        match q.dtype() {
            DType::F32 => run!(f32, Widened<f32>),
            DType::F64 => run!(f64, Widened<f64>),
            DType::F16 => run!(f16, Widened<f16>),
            DType::BF16 if bf16_products::on_tiles() => run!(bf16, Bf16Units),
            DType::BF16 => run!(bf16, Widened<bf16>),
            other => Err(not_float(other, OP)),
        }
    }
}

/// The document starts of `spec` on the host, checked ([`check_starts`]); none without
/// documents.
fn checked_starts<'a>(
    spec: &AttentionSpec,
    starts: Option<&'a crate::buffer::Buffer>,
    op: &'static str,
) -> Result<Option<&'a [u32]>> {
    match (spec.documents, starts) {
        (Some(rows), Some(starts)) => {
            let values = starts.host::<u32>(op)?;
            check_starts(values, (rows, spec.len), op)?;
            Ok(Some(values))
        }
        (None, _) => Ok(None),
        (Some(_), None) => Err(Error::Argument {
            op,
            detail: "documents without their starts".into(),
        }),
    }
}

/// What one query head sees: the spec's mask, narrowed to each position's document where
/// the row has documents.
struct HeadMask<'a> {
    spec: &'a AttentionSpec,
    /// The row's document starts.
    starts: Option<&'a [u32]>,
    /// One past the last position of each position's document (for the backward pass).
    ends: Option<Vec<usize>>,
}

impl<'a> HeadMask<'a> {
    /// The mask of query head `head`, with its documents' ends where `ends`.
    fn of(spec: &'a AttentionSpec, starts: Option<&'a [u32]>, head: usize, ends: bool) -> Self {
        let len = spec.len;
        let starts = starts.map(|s| &s[head / spec.heads_per_row() * len..][..len]);
        let ends = starts.filter(|_| ends).map(document_ends);
        Self { spec, starts, ends }
    }

    /// The keys `query` sees.
    fn keys_of(&self, query: usize) -> Range<usize> {
        let keys = self.spec.keys_of(query);
        match self.starts {
            Some(starts) => keys.start.max(starts[query] as usize)..keys.end,
            None => keys,
        }
    }

    /// The queries that see `key`.
    fn queries_of(&self, key: usize) -> Range<usize> {
        let queries = self.spec.queries_of(key);
        match &self.ends {
            Some(ends) => queries.start..queries.end.min(ends[key]),
            None => queries,
        }
    }
}

fn not_float(got: DType, op: &'static str) -> Error {
    Error::DType {
        op,
        expected: "a float dtype".into(),
        got,
    }
}

/// One head's elements of a `[heads, len, head]` operand, as operands of `B`.
fn head_of<T: Float, B: Blocks<T>>(x: &[T], head: usize, per_head: usize) -> Vec<B::X> {
    x[head * per_head..][..per_head]
        .iter()
        .map(|&v| B::operand(v))
        .collect()
}

/// One key/value head's keys and values, `[len, head]` each, as operands `X`: read once for
/// every query head of its group.
struct KvHead<X> {
    k: Vec<X>,
    v: Vec<X>,
}

impl<X> KvHead<X> {
    /// Key/value head `kv` of operands of `per_head` elements a head.
    fn of<T: Float, B: Blocks<T, X = X>>((k, v): (&[T], &[T]), kv: usize, per_head: usize) -> Self {
        Self {
            k: head_of::<T, B>(k, kv, per_head),
            v: head_of::<T, B>(v, kv, per_head),
        }
    }
}

/// The columns of a block of `cols` keys from `key0` that fall in `keys` (a row's keys).
fn seen_in(keys: Range<usize>, key0: usize, cols: usize) -> Range<usize> {
    let at = |key: usize| key.saturating_sub(key0).min(cols);
    at(keys.start)..at(keys.end)
}

/// The dropout factor of weight (`row`, `col`) of `head`: 0 where dropped, `1 / (1 - p)` where
/// kept, 1 without dropout.
#[inline]
fn keep_factor<C: Compute>(spec: &AttentionSpec, head: usize, row: usize, col: usize) -> C {
    match spec.dropout {
        None => C::ONE,
        Some(drop) => {
            let index = ((head * spec.len + row) * spec.len + col) as u64;
            if keeps(drop.seed, index, drop.p) {
                C::of(1.0 / (1.0 - drop.p))
            } else {
                C::ZERO
            }
        }
    }
}

/// `op(x)`: a stored block operand read as stored.
fn plain<X>(data: &[X]) -> Mat<'_, X> {
    Mat {
        data,
        transposed: false,
    }
}

/// A stored block operand read transposed.
fn transposed<X>(data: &[X]) -> Mat<'_, X> {
    Mat {
        data,
        transposed: true,
    }
}

fn forward<T: Float, B: Blocks<T>>(
    spec: &AttentionSpec,
    ((q, k, v), starts): (Operands<'_, T>, Option<&[u32]>),
    out: &mut [T],
    lse: &mut [T::C],
) where
    T::C: Element,
{
    let per_head = spec.len * spec.head;
    if per_head == 0 {
        return;
    }
    // One task per key/value head, its keys and values read once; within it, one per query
    // head of its group and block of queries.
    let group = spec.group;
    out.par_chunks_mut(group * per_head)
        .zip(lse.par_chunks_mut(group * spec.len))
        .enumerate()
        .for_each(|(kv, (out, lse))| {
            let keys = KvHead::of::<T, B>((k, v), kv, per_head);
            out.par_chunks_mut(per_head)
                .zip(lse.par_chunks_mut(spec.len))
                .enumerate()
                .for_each(|(member, (out, lse))| {
                    let head = kv * group + member;
                    let query = head_of::<T, B>(q, head, per_head);
                    let mask = HeadMask::of(spec, starts, head, false);
                    out.par_chunks_mut(QUERIES * spec.head)
                        .zip(lse.par_chunks_mut(QUERIES))
                        .enumerate()
                        .for_each_init(B::default, |blocks, (block, (out, lse))| {
                            let rows = (block * QUERIES, lse.len());
                            let operands = (query.as_slice(), &keys);
                            in_best_isa(
                                #[inline(always)]
                                || query_block(blocks, &mask, head, rows, operands, out, lse),
                            );
                        });
                });
        });
}

/// The output rows `first..first + rows` of `head` and their log-sum-exps: the online softmax
/// over the blocks of keys they see (inlined into the widest instruction set's version).
#[inline(always)]
fn query_block<T: Float, B: Blocks<T>>(
    blocks: &mut B,
    mask: &HeadMask<'_>,
    head: usize,
    (first, rows): (usize, usize),
    (q, KvHead { k, v }): (&[B::X], &KvHead<B::X>),
    out: &mut [T],
    lse: &mut [T::C],
) {
    let spec = mask.spec;
    let d = spec.head;
    let scale = T::C::of(spec.scale);
    let mut acc = vec![T::C::ZERO; rows * d];
    let mut max = vec![T::C::NEG_INFINITY; rows];
    let mut sum = vec![T::C::ZERO; rows];
    let mut weights = vec![T::C::ZERO; rows * FORWARD_KEYS];
    let mut rounded = Vec::new();
    // From the first key the first row sees to the last the last row sees (a document's
    // start never falls behind an earlier position's).
    let keys = mask.keys_of(first).start..mask.keys_of(first + rows - 1).end;
    for key0 in keys.clone().step_by(FORWARD_KEYS) {
        let cols = FORWARD_KEYS.min(keys.end - key0);
        let w = &mut weights[..rows * cols];
        let (queries, block_keys) = (plain(&q[first * d..]), transposed(&k[key0 * d..]));
        blocks.product((rows, cols, d), queries, block_keys, w, false);
        for r in 0..rows {
            let row = &mut w[r * cols..][..cols];
            let seen = seen_in(mask.keys_of(first + r), key0, cols);
            // The scores are `scale` times the products.
            let block_max = max_by(&row[seen.clone()], |x| x * scale);
            let new_max = max[r].max(block_max);
            if new_max == T::C::NEG_INFINITY {
                row.iter_mut().for_each(|x| *x = T::C::ZERO);
                continue;
            }
            let block_sum = map_and_sum(&mut row[seen.clone()], |x| (x * scale - new_max).exp());
            row[..seen.start].iter_mut().for_each(|x| *x = T::C::ZERO);
            row[seen.end..].iter_mut().for_each(|x| *x = T::C::ZERO);
            if spec.dropout.is_some() {
                for c in seen {
                    row[c] = row[c] * keep_factor(spec, head, first + r, key0 + c);
                }
            }
            let rescale = (max[r] - new_max).exp();
            sum[r] = sum[r] * rescale + block_sum;
            max[r] = new_max;
            acc[r * d..][..d].iter_mut().for_each(|a| *a = *a * rescale);
        }
        let w = B::rounded(w, &mut rounded);
        blocks.product(
            (rows, d, cols),
            plain(w),
            plain(&v[key0 * d..]),
            &mut acc,
            true,
        );
    }
    for r in 0..rows {
        let inverse = T::C::ONE / sum[r];
        for (o, &a) in out[r * d..][..d].iter_mut().zip(&acc[r * d..][..d]) {
            *o = T::store(a * inverse);
        }
        lse[r] = max[r] + sum[r].ln();
    }
}

/// The operands (`q`, `k`, `v`), what the forward pass kept with the upstream gradient (`out`,
/// `lse`, `dout`), and the gradients to write (`dq`, `dk`, `dv`), of [`backward`].
type Operands<'a, T> = (&'a [T], &'a [T], &'a [T]);
type Grads<'a, T> = (&'a mut [T], &'a mut [T], &'a mut [T]);

fn backward<T: Float, B: Blocks<T>>(
    spec: &AttentionSpec,
    ((q, k, v), starts): (Operands<'_, T>, Option<&[u32]>),
    (out, lse, dout): (&[T], &[T::C], &[T]),
    (dq, dk, dv): Grads<'_, T>,
) where
    T::C: Element,
{
    let per_head = spec.len * spec.head;
    if per_head == 0 {
        return;
    }
    // One task per key/value head: its group's query heads in order, each adding its share of
    // the keys' and values' gradients, so that the sums are the same on every run.
    let group = spec.group;
    dq.par_chunks_mut(group * per_head)
        .zip(dk.par_chunks_mut(per_head))
        .zip(dv.par_chunks_mut(per_head))
        .enumerate()
        .for_each(|(kv, ((dq, dk), dv))| {
            let keys = KvHead::of::<T, B>((k, v), kv, per_head);
            let (mut dk_sum, mut dv_sum) = (vec![T::C::ZERO; per_head], vec![T::C::ZERO; per_head]);
            let mut blocks = B::default();
            for (member, dq) in dq.chunks_mut(per_head).enumerate() {
                let head = kv * group + member;
                let query = head_of::<T, B>(q, head, per_head);
                let upstream = head_of::<T, B>(dout, head, per_head);
                let lse = &lse[head * spec.len..][..spec.len];
                let (out, dout) = (&out[head * per_head..], &dout[head * per_head..]);
                let saved = (
                    &out[..per_head],
                    lse,
                    &dout[..per_head],
                    upstream.as_slice(),
                );
                let sums = (dq, dk_sum.as_mut_slice(), dv_sum.as_mut_slice());
                let mask = HeadMask::of(spec, starts, head, true);
                let operands = (query.as_slice(), &keys);
                in_best_isa(
                    #[inline(always)]
                    || head_backward(&mut blocks, &mask, head, operands, saved, sums),
                );
            }
            for (dst, src) in [(dk, &dk_sum), (dv, &dv_sum)] {
                dst.iter_mut().zip(src).for_each(|(x, &a)| *x = T::store(a));
            }
        });
}

/// What one query head's backward pass reads besides its operands: its output, log-sum-exps,
/// upstream gradient as stored, and the upstream gradient as operands.
type Saved<'a, T, C, X> = (&'a [T], &'a [C], &'a [T], &'a [X]);

/// The gradients of one query head: for each block of keys, the blocks of queries that see
/// it. Writes the queries' gradient and adds the keys' and values' to `dk` and `dv` (the key/value
/// head's sums over its group, in the compute type).
#[inline(always)]
fn head_backward<T: Float, B: Blocks<T>>(
    blocks: &mut B,
    mask: &HeadMask<'_>,
    head: usize,
    (q, KvHead { k, v }): (&[B::X], &KvHead<B::X>),
    (out, lse, dout, upstream): Saved<'_, T, T::C, B::X>,
    (dq, dk, dv): (&mut [T], &mut [T::C], &mut [T::C]),
) {
    let spec = mask.spec;
    let (len, d) = (spec.len, spec.head);
    let (zero, scale) = (T::C::ZERO, T::C::of(spec.scale));
    // delta[i] = dout[i] . out[i]: the sum over each row of the weights times their gradient.
    let delta: Vec<T::C> = (0..len)
        .map(|i| {
            let (o, g) = (&out[i * d..][..d], &dout[i * d..][..d]);
            o.iter()
                .zip(g)
                .fold(zero, |s, (&a, &b)| s + a.load() * b.load())
        })
        .collect();
    let mut dq_acc = vec![zero; len * d];
    let block = BACKWARD_QUERIES * KEYS;
    let (mut weights, mut grad) = (vec![zero; block], vec![zero; block]);
    let mut dropped = vec![zero; if spec.dropout.is_some() { block } else { 0 }];
    let (mut rounded_weights, mut rounded_grad) = (Vec::new(), Vec::new());
    let (mut dk_acc, mut dv_acc) = (vec![zero; KEYS * d], vec![zero; KEYS * d]);
    for key0 in (0..len).step_by(KEYS) {
        let cols = KEYS.min(len - key0);
        dk_acc.iter_mut().for_each(|x| *x = zero);
        dv_acc.iter_mut().for_each(|x| *x = zero);
        // From the first query that sees the block's first key to the last that sees its last.
        let queries = mask.queries_of(key0).start..mask.queries_of(key0 + cols - 1).end;
        for q0 in queries.clone().step_by(BACKWARD_QUERIES) {
            let rows = BACKWARD_QUERIES.min(queries.end - q0);
            let (p, g) = (&mut weights[..rows * cols], &mut grad[..rows * cols]);
            let (qs, ks, vs) = (&q[q0 * d..], &k[key0 * d..], &v[key0 * d..]);
            let dos = plain(&upstream[q0 * d..]);
            // The weights again: exp(scale q k - lse), 0 where masked.
            blocks.product((rows, cols, d), plain(qs), transposed(ks), p, false);
            for r in 0..rows {
                let seen = seen_in(mask.keys_of(q0 + r), key0, cols);
                let row = &mut p[r * cols..][..cols];
                let l = lse[q0 + r];
                row[seen.clone()]
                    .iter_mut()
                    .for_each(|x| *x = (*x * scale - l).exp());
                row[..seen.start].iter_mut().for_each(|x| *x = zero);
                row[seen.end..].iter_mut().for_each(|x| *x = zero);
            }
            // The gradient of the weights, dout v^T, into `g`.
            blocks.product((rows, cols, d), dos, transposed(vs), g, false);
            // dv += p^T dout (with dropout, the kept weights; the weights' gradient masked the
            // same way).
            let kept: &[T::C] = if spec.dropout.is_some() {
                let kept = &mut dropped[..rows * cols];
                for r in 0..rows {
                    for c in 0..cols {
                        let factor: T::C = keep_factor(spec, head, q0 + r, key0 + c);
                        g[r * cols + c] = g[r * cols + c] * factor;
                        kept[r * cols + c] = p[r * cols + c] * factor;
                    }
                }
                kept
            } else {
                p
            };
            let kept = transposed(B::rounded(kept, &mut rounded_weights));
            blocks.product((cols, d, rows), kept, dos, &mut dv_acc, true);
            // The scores' gradient with the scale: scale p * (g - delta), into `g`.
            for r in 0..rows {
                let dr = delta[q0 + r];
                let (pr, gr) = (&p[r * cols..][..cols], &mut g[r * cols..][..cols]);
                gr.iter_mut()
                    .zip(pr)
                    .for_each(|(x, &w)| *x = w * (*x - dr) * scale);
            }
            // dq += g k; dk += g^T q.
            let g = B::rounded(g, &mut rounded_grad);
            let dq_rows = &mut dq_acc[q0 * d..];
            blocks.product((rows, d, cols), plain(g), plain(ks), dq_rows, true);
            blocks.product((cols, d, rows), transposed(g), plain(qs), &mut dk_acc, true);
        }
        for (dst, src) in [(&mut *dk, &dk_acc), (&mut *dv, &dv_acc)] {
            for (x, &a) in dst[key0 * d..][..cols * d].iter_mut().zip(src.iter()) {
                *x = *x + a;
            }
        }
    }
    for (x, &a) in dq.iter_mut().zip(&dq_acc) {
        *x = T::store(a);
    }
}
