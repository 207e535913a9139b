//! Products of half types (bf16, f16): widened to f32, multiplied there, narrowed into the
//! output. Widening whole operands would hold an f32 copy of both operands and of the output at
//! once, twice the memory of the product itself; instead one panel at a time is widened, so the
//! f32 workspace stays near [`PANEL`] elements (or [`MIN_BAND`] rows of a wide product) beyond
//! the operand that is kept whole (the smaller one: a layer's weight, or its gradient). A meta device plans the panels of one size
//! once ([`Device::for_each_alike`](crate::Device::for_each_alike)).

use headroom_alloc::Tag;

use super::{GemmSpec, fill_rows};
use crate::array::Array;
use crate::dtype::DType;
use crate::error::Result;
use crate::shape::Shape;

/// f32 elements widened per panel (1 MiB): big enough that each panel is an efficient product.
const PANEL: usize = 1 << 18;
/// The fewest rows (or inner steps) a band takes, whatever [`PANEL`] allows: a thinner band
/// multiplies below the matrix rate and reads the operand kept whole once more per band (a
/// vocabulary of 49 152 would otherwise cut bands of 5 rows).
const MIN_BAND: usize = 256;

/// `out = op(a) op(b) (+ bias)` for half-type operands, as [`super::product`] laid out in
/// `spec`; every f32 workspace array is tagged as workspace.
pub(super) fn product(
    spec: &GemmSpec,
    a: &Array,
    b: &Array,
    bias: Option<&Array>,
    out: &mut Array,
    op: &'static str,
) -> Result<()> {
    if out.numel() == 0 {
        return Ok(());
    }
    let device = a.device().clone();
    let _workspace = device.scoped_tag(Tag::WORKSPACE);
    let bias = bias
        .map(|bias| bias.cast(DType::F32).map_err(|err| err.in_op(op)))
        .transpose()?;
    let &GemmSpec { m, k, .. } = spec;
    // The whole of the operand that every panel needs: `b` when panels are rows of the output,
    // the output itself when panels run along the inner dimension. Take the smaller.
    let by_rows = spec.batch == 1 && k > 0 && !spec.trans_a;
    let by_depth = spec.batch == 1 && k > 0 && spec.trans_a && !spec.trans_b;
    match (by_rows, by_depth) {
        (true, _) if !by_depth || k <= m => by_row_panels(spec, a, b, bias.as_ref(), out, op),
        (_, true) => by_depth_panels(spec, a, b, bias.as_ref(), out, op),
        _ => by_batch_panels(spec, a, b, bias.as_ref(), out, op),
    }
}

/// `len` elements of `x` from `at`, widened into a new f32 array of `shape`.
fn widen(x: &Array, at: usize, shape: Shape, op: &'static str) -> Result<Array> {
    let len = shape.numel();
    let mut wide = Array::uninit(x.device(), shape, DType::F32, op)?;
    x.device()
        .backend()
        .cast_range(x.buffer(), at, wide.buffer_mut(op)?, 0, len)?;
    Ok(wide)
}

/// Narrows all of `wide` into `out` from element `at`.
fn narrow(wide: &Array, out: &mut Array, at: usize, op: &'static str) -> Result<()> {
    let device = out.device().clone();
    device
        .backend()
        .cast_range(wide.buffer(), 0, out.buffer_mut(op)?, at, wide.numel())
}

/// `out32 (+)= op(a32) op(b32)` on f32 panels, laid out as `panel` says.
fn multiply(
    panel: &GemmSpec,
    a32: &Array,
    b32: &Array,
    out32: &mut Array,
    op: &'static str,
) -> Result<()> {
    let device = out32.device().clone();
    device
        .backend()
        .gemm(panel, a32.buffer(), b32.buffer(), out32.buffer_mut(op)?)
}

/// An f32 output panel of `shape`, starting as the bias or unspecified.
fn output_panel(
    like: &Array,
    shape: Shape,
    bias: Option<&Array>,
    op: &'static str,
) -> Result<Array> {
    let mut panel = Array::uninit(like.device(), shape, DType::F32, op)?;
    if let Some(bias) = bias {
        fill_rows(bias, &mut panel, op)?;
    }
    Ok(panel)
}

/// `op(a)` untransposed: `b` widened whole, then `a` and the output a band of rows at a time
/// (the forward pass of a linear layer, and its input's gradient).
fn by_row_panels(
    spec: &GemmSpec,
    a: &Array,
    b: &Array,
    bias: Option<&Array>,
    out: &mut Array,
    op: &'static str,
) -> Result<()> {
    let &GemmSpec { m, n, k, .. } = spec;
    let b32 = widen(b, 0, Shape::new(&[k * n]), op)?;
    let rows = (PANEL / (k + n)).clamp(MIN_BAND.min(m), m);
    let panels = bands(m, rows);
    let device = a.device().clone();
    device.for_each_alike(
        &panels,
        |&(_, rows)| rows,
        |&(first, rows)| {
            let a32 = widen(a, first * k, Shape::new(&[rows, k]), op)?;
            let mut out32 = output_panel(a, Shape::new(&[rows, n]), bias, op)?;
            let panel = GemmSpec {
                m: rows,
                a_batch_stride: 0,
                b_batch_stride: 0,
                ..*spec
            };
            multiply(&panel, &a32, &b32, &mut out32, op)?;
            narrow(&out32, out, first * n, op)
        },
    )
}

/// `len` cut into bands of `size` (the last shorter): each band's start and length.
fn bands(len: usize, size: usize) -> Vec<(usize, usize)> {
    (0..len)
        .step_by(size.max(1))
        .map(|first| (first, size.min(len - first)))
        .collect()
}

/// `a` stored `[k, m]` and `b` `[k, n]`: the output accumulated whole in f32 over bands of
/// the inner dimension (a weight's gradient, summed over many rows of activations).
fn by_depth_panels(
    spec: &GemmSpec,
    a: &Array,
    b: &Array,
    bias: Option<&Array>,
    out: &mut Array,
    op: &'static str,
) -> Result<()> {
    let &GemmSpec { m, n, k, .. } = spec;
    let mut out32 = output_panel(a, Shape::new(&[m, n]), bias, op)?;
    let depth = (PANEL / (m + n)).clamp(MIN_BAND.min(k), k);
    let device = a.device().clone();
    let alike = |&(first, depth): &(usize, usize)| (depth, first > 0);
    device.for_each_alike(&bands(k, depth), alike, |&(first, depth)| {
        let a32 = widen(a, first * m, Shape::new(&[depth, m]), op)?;
        let b32 = widen(b, first * n, Shape::new(&[depth, n]), op)?;
        let panel = GemmSpec {
            k: depth,
            a_batch_stride: 0,
            b_batch_stride: 0,
            accumulate: bias.is_some() || first > 0,
            ..*spec
        };
        multiply(&panel, &a32, &b32, &mut out32, op)
    })?;
    narrow(&out32, out, 0, op)
}

/// Any layout: a group of whole products at a time (one product when a single one is larger
/// than a panel), an operand shared by the batch widened once.
fn by_batch_panels(
    spec: &GemmSpec,
    a: &Array,
    b: &Array,
    bias: Option<&Array>,
    out: &mut Array,
    op: &'static str,
) -> Result<()> {
    let &GemmSpec { batch, m, n, k, .. } = spec;
    let group = (PANEL / (m * k + k * n + m * n)).clamp(1, batch);
    let shared = |x: &Array, stride: usize, size: usize| -> Result<Option<Array>> {
        (stride == 0)
            .then(|| widen(x, 0, Shape::new(&[size]), op))
            .transpose()
    };
    let a_shared = shared(a, spec.a_batch_stride, m * k)?;
    let b_shared = shared(b, spec.b_batch_stride, k * n)?;
    let device = a.device().clone();
    device.for_each_alike(
        &bands(batch, group),
        |&(_, group)| group,
        |&(first, group)| {
            let operand = |x: &Array, shared: &Option<Array>, stride: usize| -> Result<Array> {
                match shared {
                    Some(whole) => Ok(whole.clone()),
                    None => widen(x, first * stride, Shape::new(&[group * stride]), op),
                }
            };
            let a32 = operand(a, &a_shared, spec.a_batch_stride)?;
            let b32 = operand(b, &b_shared, spec.b_batch_stride)?;
            let mut out32 = output_panel(a, Shape::new(&[group, m, n]), bias, op)?;
            let panel = GemmSpec {
                batch: group,
                ..*spec
            };
            multiply(&panel, &a32, &b32, &mut out32, op)?;
            narrow(&out32, out, first * m * n, op)
        },
    )
}
