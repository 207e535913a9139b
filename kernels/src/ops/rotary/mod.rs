//! Rotary position embeddings (RoPE) as Llama, Qwen and SmolLM apply them to queries and keys,
//! in Hugging Face's `rotate_half` layout: in a head of `d` features, feature `i < d / 2` pairs
//! with feature `i + d / 2` (not the interleaved pairs of the original paper), and the pair at
//! position `p` turns by the angle `p * inv_freq[i]`.
//!
//! Operands are `[..., len, head]` arrays (every leading axis a batch of independent heads, as
//! [`attention`](crate::ops::attention) takes them) in one float dtype; row `t` of each head is
//! at position `offset + t`, so that generation with a key/value cache rotates its new rows
//! where they belong. The frequencies come from the host ([`inv_freq`]), as a `[head / 2]`
//! array of [`freq_dtype`]: f32, f64 for f64 inputs.
//!
//! The angle `position * inv_freq[i]` (the position converted to the compute type first) and
//! its cosine and sine are computed in the kernel, in f32 (f64 for f64; half types compute in
//! f32 and round once on the store). Hugging Face does the same in f32: its
//! `LlamaRotaryEmbedding` multiplies the f32 frequencies by the positions as f32 (one rounded
//! product, as here) and takes `cos` and `sin` in f32, so that f32 results match it to the
//! rounding of those functions. In bf16 and f16 it rounds `cos` and `sin` to the half type
//! and rotates in it, where these kernels rotate in f32: within a half type's rounding of
//! each other. Positions past 2^24 are not exact in f32, in either.
//!
//! Packed documents ([`rotary_in_documents`]): each row's positions restart at 0 where a
//! document starts, row `t` of a batch row `b` at position `t - starts[b][t]`
//! ([`crate::ops::documents`]).
//!
//! The backward pass is the rotation by the negative angle ([`rotary_backward`]): a rotation's
//! transpose is its inverse. Nothing but the frequencies is kept for it.

mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod frequencies;
pub(crate) mod kernels;
mod meta;

pub use frequencies::{Llama3Scaling, inv_freq};
pub use kernels::{RotaryKernels, RotaryOperands, RotarySpec, Turn, freq_dtype};

use crate::array::Array;
use crate::error::{Error, Result};
use crate::shape::Shape;

/// Checks `x` (`[..., len, head]`, float, `head` even), the frequencies and the offset, and
/// returns the kernels' geometry.
fn spec_of(
    x: &Array,
    inv_freq: &Array,
    offset: usize,
    turn: Turn,
    op: &'static str,
) -> Result<RotarySpec> {
    x.check_float(op)?;
    x.device().check_same(inv_freq.device(), op)?;
    let [lead @ .., len, head] = x.shape().dims() else {
        return Err(Error::Shape {
            op,
            detail: format!("the input {} must be [..., len, head]", x.shape()),
        });
    };
    if !head.is_multiple_of(2) {
        return Err(Error::Shape {
            op,
            detail: format!(
                "the input {} has an odd head of {head} features: they rotate in pairs",
                x.shape()
            ),
        });
    }
    let (want_shape, want_dtype) = (Shape::new(&[head / 2]), freq_dtype(x.dtype()));
    if inv_freq.shape() != &want_shape {
        return Err(Error::Shape {
            op,
            detail: format!(
                "inv_freq has shape {}, the input {} needs {want_shape}",
                inv_freq.shape(),
                x.shape()
            ),
        });
    }
    if inv_freq.dtype() != want_dtype {
        return Err(Error::DType {
            op,
            expected: format!("{want_dtype} for inv_freq (inputs of {})", x.dtype()),
            got: inv_freq.dtype(),
        });
    }
    if offset.checked_add(*len).is_none() {
        return Err(Error::Argument {
            op,
            detail: format!("positions from offset {offset} over {len} rows overflow"),
        });
    }
    Ok(RotarySpec {
        heads: lead.iter().product(),
        len: *len,
        head: *head,
        offset,
        turn,
        documents: None,
    })
}

/// Runs the rotation of `spec` on `x` into a new array of its shape and dtype.
fn rotated(
    (x, inv_freq, starts): (&Array, &Array, Option<&Array>),
    spec: &RotarySpec,
    op: &'static str,
) -> Result<Array> {
    let device = x.device();
    let mut out = Array::uninit(device, x.shape().clone(), x.dtype(), op)?;
    let operands = RotaryOperands {
        x: x.buffer(),
        inv_freq: inv_freq.buffer(),
        starts: starts.map(Array::buffer),
        out: out.buffer_mut(op)?,
    };
    device.backend().rotary(spec, operands)?;
    Ok(out)
}

/// Rotary position embedding of `x` (`[..., len, head]`, `head` even), row `t` of each head at
/// position `offset + t`, with the frequencies `inv_freq` (`[head / 2]` of [`freq_dtype`]).
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType};
/// use headroom_kernels::ops::rotary::{inv_freq, rotary};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Array::from_f64(&cpu, [2, 2], DType::F64, &[1., 0., 1., 0.])?;
/// let freq = Array::from_f64(&cpu, [1], DType::F64, &inv_freq(2, 10_000.0, None)?)?;
/// let out = rotary(&x, &freq, 0)?.to_f64()?; // positions 0 and 1: angles 0 and 1
/// assert_eq!(out[..2], [1., 0.]);
/// assert_eq!(out[2..], [1f64.cos(), 1f64.sin()]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn rotary(x: &Array, inv_freq: &Array, offset: usize) -> Result<Array> {
    const OP: &str = "rotary";
    let spec = spec_of(x, inv_freq, offset, Turn::Forward, OP)?;
    rotated((x, inv_freq, None), &spec, OP)
}

/// The gradient of [`rotary`] with respect to its input, from the upstream gradient `dy`
/// (`[..., len, head]`) and the same frequencies and offset: `dy` rotated by the negative
/// angles.
pub fn rotary_backward(dy: &Array, inv_freq: &Array, offset: usize) -> Result<Array> {
    const OP: &str = "rotary_backward";
    let spec = spec_of(dy, inv_freq, offset, Turn::Backward, OP)?;
    rotated((dy, inv_freq, None), &spec, OP)
}

/// [`rotary`] over packed documents: `x` is `[batch, ..., len, head]` and `starts`
/// (`[batch, len]`, U32) its rows' document starts ([`crate::ops::documents`]); row `t` of
/// batch row `b` is at position `t - starts[b][t]`. The CPU checks the starts; CUDA takes them
/// as they are.
///
/// ```
/// use headroom_kernels::{Array, Device, DeviceConfig, DType};
/// use headroom_kernels::ops::rotary::{inv_freq, rotary, rotary_in_documents};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Array::from_f64(&cpu, [1, 3, 2], DType::F64, &[1., 0., 1., 0., 1., 0.])?;
/// let freq = Array::from_f64(&cpu, [1], DType::F64, &inv_freq(2, 10_000.0, None)?)?;
/// let starts = Array::from_host(&cpu, [1, 3], &[0u32, 0, 2])?; // positions 0, 1 and 0
/// let out = rotary_in_documents(&x, &freq, &starts)?.to_f64()?;
/// assert_eq!(out[4..], [1., 0.]);
/// assert_eq!(out[..4], rotary(&x, &freq, 0)?.to_f64()?[..4]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn rotary_in_documents(x: &Array, inv_freq: &Array, starts: &Array) -> Result<Array> {
    const OP: &str = "rotary_in_documents";
    let spec = documents_spec(x, inv_freq, starts, Turn::Forward, OP)?;
    rotated((x, inv_freq, Some(starts)), &spec, OP)
}

/// The gradient of [`rotary_in_documents`] with respect to its input, from the upstream
/// gradient `dy` and the same frequencies and starts.
pub fn rotary_in_documents_backward(dy: &Array, inv_freq: &Array, starts: &Array) -> Result<Array> {
    const OP: &str = "rotary_in_documents_backward";
    let spec = documents_spec(dy, inv_freq, starts, Turn::Backward, OP)?;
    rotated((dy, inv_freq, Some(starts)), &spec, OP)
}

/// [`spec_of`] at positions within the documents of `starts` (`[batch, len]` for `x`
/// `[batch, ..., len, head]`).
fn documents_spec(
    x: &Array,
    inv_freq: &Array,
    starts: &Array,
    turn: Turn,
    op: &'static str,
) -> Result<RotarySpec> {
    let spec = spec_of(x, inv_freq, 0, turn, op)?;
    let &[batch, .., _, _] = x.shape().dims() else {
        return Err(Error::Shape {
            op,
            detail: format!(
                "the input {} must be [batch, ..., len, head] beside document starts {}",
                x.shape(),
                starts.shape()
            ),
        });
    };
    starts.check_document_starts((batch, spec.len), x, op)?;
    Ok(RotarySpec {
        documents: Some(batch),
        ..spec
    })
}
