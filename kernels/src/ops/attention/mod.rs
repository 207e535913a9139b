//! Memory-efficient attention (FlashAttention-2, Dao 2023): `softmax(scale * q k^T) v`, causally
//! masked, within a sliding window and with dropout on the weights when asked, computed block by
//! block with an online softmax. The `len x len` scores and weights never exist in memory: the
//! forward pass keeps the output and one log-sum-exp per row, and the backward pass computes
//! each block's weights again from them. Blocks above the diagonal are skipped when causal, and
//! with a window the blocks wholly before it too, so the work falls with the window.
//!
//! Operands are `[..., len, head]` arrays (every leading axis a batch of independent heads) in
//! one float dtype, the keys and values with fewer heads on the axis before `len` for
//! grouped-query attention (each shared by a group of query heads, read in place); half types
//! compute in f32 (bf16's products on the CPU's AMX tiles where it has them), f64 in f64. The
//! log-sum-exp is f32 (f64 for f64 operands), `[..., len]`.
//!
//! Packed documents ([`attention_in_documents`]): with a row's document starts
//! ([`crate::ops::documents`]) each query sees only the keys of its own document, and the
//! blocks of keys wholly before a block of queries' first document are skipped.

mod blocks;
mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
pub(crate) mod kernels;
mod meta;

pub use kernels::{
    AttentionBackwardOperands, AttentionDropout, AttentionKernels, AttentionOperands, AttentionSpec,
};

use crate::array::Array;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Shape;

/// How an attention is run: its scale, mask and dropout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attention {
    /// The scores' factor, usually `1 / sqrt(head)`.
    pub scale: f64,
    /// Each position attends only to itself and the positions before it.
    pub causal: bool,
    /// A sliding window (with `causal` only): position `i` attends only to positions `j` with
    /// `i - window < j <= i`, so a window of 512 keeps the position itself and the 511 before it
    /// (transformers' sliding-window causal mask, as Gemma 3's local layers use it).
    pub window: Option<usize>,
    /// Dropout on the weights.
    pub dropout: Option<AttentionDropout>,
}

/// The dtype of the log-sum-exp of operands of `dtype`: f64 for f64, f32 otherwise.
pub fn lse_dtype(dtype: DType) -> DType {
    if dtype == DType::F64 {
        DType::F64
    } else {
        DType::F32
    }
}

/// Checks the operands (`q` `[..., heads, len, head]`, `k` and `v` of q's shape but for
/// `kv_heads` on the axis before `len`, which divides q's `heads`; one dtype and device) and
/// `how`, and returns the kernels' geometry.
fn spec_of(
    (q, k, v): (&Array, &Array, &Array),
    how: Attention,
    starts: Option<&Array>,
    op: &'static str,
) -> Result<AttentionSpec> {
    q.check_float(op)?;
    let dims = q.shape().dims();
    let [lead @ .., len, head] = dims else {
        return Err(Error::Shape {
            op,
            detail: format!("q {} must be [..., len, head]", q.shape()),
        });
    };
    let group = group_of((q, k, v), op)?;
    check_window(how, op)?;
    if !how.scale.is_finite() {
        return Err(Error::Argument {
            op,
            detail: format!("scale {} is not finite", how.scale),
        });
    }
    if let Some(drop) = how.dropout
        && !(0.0..1.0).contains(&drop.p)
    {
        return Err(Error::Argument {
            op,
            detail: format!("dropout probability {} is outside [0, 1)", drop.p),
        });
    }
    let documents = match starts {
        Some(starts) => Some(check_documents(q, how, starts, op)?),
        None => None,
    };
    Ok(AttentionSpec {
        heads: lead.iter().product(),
        group,
        len: *len,
        head: *head,
        scale: how.scale,
        causal: how.causal,
        // A window of at least len keeps every causal key: plain causal attention.
        window: how.window.filter(|&w| w < *len),
        dropout: how.dropout.filter(|d| d.p > 0.0),
        documents,
    })
}

/// Checks document starts for queries `q` (`[batch, ..., len, head]`): causal attention, and
/// starts of shape `[batch, len]`, U32, on q's device. Returns the batch.
fn check_documents(q: &Array, how: Attention, starts: &Array, op: &'static str) -> Result<usize> {
    if !how.causal {
        return Err(Error::Argument {
            op,
            detail: "documents need causal attention: a position sees the keys of its own \
                     document up to itself"
                .into(),
        });
    }
    let dims = q.shape().dims();
    let [batch, .., len, _] = dims else {
        return Err(Error::Shape {
            op,
            detail: format!(
                "q {} must be [batch, ..., len, head] beside document starts {}",
                q.shape(),
                starts.shape()
            ),
        });
    };
    starts.check_document_starts((*batch, *len), q, op)?;
    Ok(*batch)
}

/// Fails on a window of 0 (a position that sees nothing) or a window without `causal`.
fn check_window(how: Attention, op: &'static str) -> Result<()> {
    let detail = match how.window {
        Some(0) => "a window of 0 keeps no position: it must be at least 1".to_string(),
        Some(w) if !how.causal => format!(
            "a window of {w} needs causal attention: it keeps the position itself and the {} \
             before it",
            w - 1
        ),
        _ => return Ok(()),
    };
    Err(Error::Argument { op, detail })
}

/// Query heads per key/value head: `k` and `v` match `q` in dtype, device and shape, but for
/// the axis before `len`, which may hold fewer heads that divide q's.
fn group_of((q, k, v): (&Array, &Array, &Array), op: &'static str) -> Result<usize> {
    let mismatch = |name: &str, x: &Array, rule: &str| Error::Shape {
        op,
        detail: format!(
            "{name} is {} of {}, q {} of {}: {rule}",
            x.shape(),
            x.dtype(),
            q.shape(),
            q.dtype()
        ),
    };
    const RULE: &str = "they must match, but for fewer key/value heads (the axis before len) \
                        that divide the query heads";
    let dims = q.shape().dims();
    let rank = dims.len();
    let mut group = 1;
    for (name, x) in [("k", k), ("v", v)] {
        q.device().check_same(x.device(), op)?;
        let kv = x.shape().dims();
        if x.dtype() != q.dtype() || kv.len() != rank {
            return Err(mismatch(name, x, RULE));
        }
        if x.shape() == q.shape() {
            continue;
        }
        // Only the axis before len may differ, and only where there is one.
        let axis = rank.checked_sub(3).ok_or_else(|| mismatch(name, x, RULE))?;
        let same_elsewhere = (0..rank).all(|a| a == axis || kv[a] == dims[a]);
        let (heads, kv_heads) = (dims[axis], kv[axis]);
        if !same_elsewhere || kv_heads == 0 || heads % kv_heads != 0 {
            return Err(mismatch(name, x, RULE));
        }
        group = heads / kv_heads;
    }
    if k.shape() != v.shape() {
        return Err(mismatch("v", v, "k and v must have one shape"));
    }
    Ok(group)
}

/// The shape of the log-sum-exp of operands of `shape` (`[..., len, head]`): `[..., len]`.
fn lse_shape(shape: &Shape) -> Shape {
    let dims = shape.dims();
    Shape::new(&dims[..dims.len() - 1])
}

/// Attention over `q`, `k` and `v` (`[..., len, head]`, one float dtype): the output (q's
/// shape and dtype) and the log-sum-exp of each row of the scaled, masked scores (`[..., len]`,
/// of [`lse_dtype`]), which [`attention_backward`] takes. Grouped-query attention: `k` and `v`
/// may hold fewer heads on the axis before `len` (`[batch, kv_heads, len, head]` beside q's
/// `[batch, heads, len, head]`, `kv_heads` dividing `heads`); query head `h` then reads
/// key/value head `h / (heads / kv_heads)` of its batch element in place, never a copy.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType};
/// use headroom_kernels::ops::attention::{Attention, attention};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let q = Array::from_f64(&cpu, [2, 1], DType::F64, &[0., 0.])?;
/// let v = Array::from_f64(&cpu, [2, 1], DType::F64, &[1., 3.])?;
/// let how = Attention { scale: 1.0, causal: true, window: None, dropout: None };
/// let (out, lse) = attention(&q, &q, &v, how)?;
/// assert_eq!(out.to_f64()?, [1., 2.]); // the first sees only itself, the second both
/// assert_eq!(lse.to_f64()?, [0., 2f64.ln()]);
/// let last = Attention { window: Some(1), ..how }; // each sees only itself
/// assert_eq!(attention(&q, &q, &v, last)?.0.to_f64()?, [1., 3.]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn attention(q: &Array, k: &Array, v: &Array, how: Attention) -> Result<(Array, Array)> {
    run_forward((q, k, v), how, None, "attention")
}

/// [`attention`] over packed documents: `starts` (`[batch, len]`, U32, q `[batch, ..., len,
/// head]`) gives each row's document starts ([`crate::ops::documents`]), and query `i` of row
/// `b` sees only keys `j` with `starts[b][i] <= j <= i` (and within `how.window`, if any).
/// `how.causal` must be set. The CPU checks the starts ([`check_starts`]); CUDA takes them as
/// they are, so that a layout built on the host must be checked there.
///
/// [`check_starts`]: crate::ops::documents::check_starts
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType};
/// use headroom_kernels::ops::attention::{Attention, attention_in_documents};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let q = Array::from_f64(&cpu, [1, 1, 3, 1], DType::F64, &[0., 0., 0.])?;
/// let v = Array::from_f64(&cpu, [1, 1, 3, 1], DType::F64, &[1., 3., 5.])?;
/// let starts = Array::from_host(&cpu, [1, 3], &[0u32, 0, 2])?; // documents [0, 1] and [2]
/// let how = Attention { scale: 1.0, causal: true, window: None, dropout: None };
/// let (out, _) = attention_in_documents(&q, &q, &v, how, &starts)?;
/// assert_eq!(out.to_f64()?, [1., 2., 5.]); // the third sees only itself
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn attention_in_documents(
    q: &Array,
    k: &Array,
    v: &Array,
    how: Attention,
    starts: &Array,
) -> Result<(Array, Array)> {
    run_forward((q, k, v), how, Some(starts), "attention_in_documents")
}

/// [`attention`] or [`attention_in_documents`], as `starts` says.
fn run_forward(
    (q, k, v): (&Array, &Array, &Array),
    how: Attention,
    starts: Option<&Array>,
    op: &'static str,
) -> Result<(Array, Array)> {
    let spec = spec_of((q, k, v), how, starts, op)?;
    let device = q.device();
    let mut out = Array::uninit(device, q.shape().clone(), q.dtype(), op)?;
    let mut lse = Array::uninit(device, lse_shape(q.shape()), lse_dtype(q.dtype()), op)?;
    let operands = AttentionOperands {
        q: q.buffer(),
        k: k.buffer(),
        v: v.buffer(),
        starts: starts.map(Array::buffer),
        out: out.buffer_mut(op)?,
        lse: lse.buffer_mut(op)?,
    };
    device.backend().attention(&spec, operands)?;
    Ok((out, lse))
}

/// The gradients of [`attention`] with respect to `q`, `k` and `v` (each of its operand's
/// shape), from them, its output `out` and log-sum-exp `lse`, and the upstream gradient `dout`
/// (the output's shape), with the same `how`. A grouped key/value head's gradient is the sum
/// over its query heads, in their order: the same bits on every run.
pub fn attention_backward(
    operands: (&Array, &Array, &Array),
    saved: (&Array, &Array),
    dout: &Array,
    how: Attention,
) -> Result<(Array, Array, Array)> {
    run_backward(operands, saved, dout, (how, None), "attention_backward")
}

/// The gradients of [`attention_in_documents`], as [`attention_backward`] gives those of
/// [`attention`], with the same `how` and `starts`.
pub fn attention_in_documents_backward(
    operands: (&Array, &Array, &Array),
    saved: (&Array, &Array),
    dout: &Array,
    how: Attention,
    starts: &Array,
) -> Result<(Array, Array, Array)> {
    let op = "attention_in_documents_backward";
    run_backward(operands, saved, dout, (how, Some(starts)), op)
}

/// [`attention_backward`] or [`attention_in_documents_backward`], as `starts` says.
fn run_backward(
    (q, k, v): (&Array, &Array, &Array),
    (out, lse): (&Array, &Array),
    dout: &Array,
    (how, starts): (Attention, Option<&Array>),
    op: &'static str,
) -> Result<(Array, Array, Array)> {
    let spec = spec_of((q, k, v), how, starts, op)?;
    for (name, x, shape, dtype) in [
        ("out", out, q.shape().clone(), q.dtype()),
        ("dout", dout, q.shape().clone(), q.dtype()),
        ("lse", lse, lse_shape(q.shape()), lse_dtype(q.dtype())),
    ] {
        q.device().check_same(x.device(), op)?;
        if x.shape() != &shape || x.dtype() != dtype {
            return Err(Error::Shape {
                op,
                detail: format!(
                    "{name} is {} of {}, where {shape} of {dtype} is needed",
                    x.shape(),
                    x.dtype()
                ),
            });
        }
    }
    let device = q.device();
    let grad = |x: &Array| Array::uninit(device, x.shape().clone(), x.dtype(), op);
    let (mut dq, mut dk, mut dv) = (grad(q)?, grad(k)?, grad(v)?);
    let operands = AttentionBackwardOperands {
        q: q.buffer(),
        k: k.buffer(),
        v: v.buffer(),
        starts: starts.map(Array::buffer),
        out: out.buffer(),
        lse: lse.buffer(),
        dout: dout.buffer(),
        dq: dq.buffer_mut(op)?,
        dk: dk.buffer_mut(op)?,
        dv: dv.buffer_mut(op)?,
    };
    device.backend().attention_backward(&spec, operands)?;
    Ok((dq, dk, dv))
}
