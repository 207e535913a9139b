//! A language model's head and its loss in one op (Liger Kernel's fused linear cross-entropy,
//! Cut Cross-Entropy): the logits `hidden @ weight^T` are formed a chunk of rows at a time,
//! reduced to the chunk's loss and freed. When a tape records, each chunk's share of the hidden
//! state's and the weight's gradients is formed from the same logits in the forward pass, as
//! Liger Kernel does, and the backward pass only scales them by the upstream gradient: the head's
//! products run three times a step, not four. The `[rows, vocabulary]` logits never exist whole:
//! beyond the operands and their gradients, a step holds one chunk's logits and their gradient.
//! Under f16 autocast the gradients wait for the backward pass, whose upstream gradient carries
//! the loss scale that keeps them from underflowing in f16.
//!
//! On CUDA the products' weight carries rows of zeros that round the vocabulary up to a
//! multiple of eight ([`padding`]): cuBLAS runs products whose rows do not start on 16 bytes
//! at a fraction of its speed, and GPT-2's 50257 columns do not. The loss reads each chunk's
//! padded logits as they come (its kernels skip the padding), the padded columns of their
//! gradient are zeros, and the weight's gradient loses its padded rows once, at the end.
//!
//! Under autocast the products run in the half type and the loss in f32, as the unfused head
//! and cross-entropy do (each chunk's share of the weight's gradient too, with f32
//! accumulation inside the product); the weight's gradient adds up over the chunks in the
//! weight's own dtype (f32 master weights), never in half.

use headroom_alloc::Tag;
use headroom_kernels::ops::data::cast_range;
use headroom_kernels::ops::elementwise as ew;
use headroom_kernels::ops::gemm::{matmul, matmul_accumulate};
use headroom_kernels::ops::layout::{concat, narrow};
use headroom_kernels::ops::loss::{
    loss_dtype, padded_cross_entropy, padded_cross_entropy_backward,
};
use headroom_kernels::{Array, DType, Device, DeviceKind, Error as KernelError, PlanTarget, Shape};

use super::{in_dtype, rule, when};
use crate::autocast::autocast_dtype;
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

/// One chunk of rows: where it starts, how many rows, and its share of the mean (the rows it
/// counts over the rows counted in all).
#[derive(Debug, Clone, Copy)]
struct Chunk {
    start: usize,
    rows: usize,
    share: f64,
}

/// The rows of `targets` in as few chunks of at most `chunk` rows as hold them, of equal
/// sizes (the last a little shorter), each with its share of the mean over the rows whose
/// target is not `ignore`. Equal sizes keep every chunk's products as efficient as the others':
/// a short remainder chunk (188 rows of GPT-2's 8192 in chunks of 667) ran its products at a
/// tenth of the speed on a GPU.
fn chunks(targets: &[u32], chunk: usize, ignore: Option<u32>) -> Vec<Chunk> {
    let counts = |t: &[u32]| t.iter().filter(|&&x| Some(x) != ignore).count();
    let total = counts(targets).max(1) as f64;
    let count = targets.len().div_ceil(chunk.max(1)).max(1);
    let size = targets.len().div_ceil(count).max(1);
    targets
        .chunks(size)
        .enumerate()
        .map(|(i, t)| Chunk {
            start: i * size,
            rows: t.len(),
            share: counts(t) as f64 / total,
        })
        .collect()
}

/// The dtype a head's products run in for hidden states of `dtype`: the autocast half type,
/// or their own (f64 never narrows).
pub(super) fn products_dtype(dtype: DType) -> DType {
    match autocast_dtype() {
        Some(half) if dtype != DType::F64 => half,
        _ => dtype,
    }
}

/// The dtype a head's weight gradient of `dtype` is summed in over its chunks: f32 for a half
/// weight (rounded once at the end), its own otherwise.
pub(super) fn summed_in(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        dtype => dtype,
    }
}

/// Rows of zeros that round a vocabulary of `vocab` up to a multiple of eight on `device`'s
/// kind of backend: on CUDA (a GPU, or the meta device planning for one), none elsewhere.
fn padding(device: &Device, vocab: usize) -> usize {
    match device.plan_target() {
        PlanTarget::Cuda { .. } => vocab.next_multiple_of(8) - vocab,
        PlanTarget::Cpu => 0,
    }
}

/// The weight as the products take it: in `dtype`, followed by `pad` rows of zeros.
fn products_weight(weight: &Array, dtype: DType, pad: usize) -> Result<Array> {
    let cast = in_dtype(weight, dtype)?;
    if pad == 0 {
        return Ok(cast);
    }
    let features = cast.shape().dims()[1];
    let zeros = Array::zeros(cast.device(), Shape::new(&[pad, features]), dtype)?;
    Ok(concat(&[&cast, &zeros], 0)?)
}

/// What both passes share: the operands, in their own dtype and in the products' one.
struct Head {
    hidden: Array,
    weight: Array,
    /// The weight as the products take it (the autocast half type, or itself), with `pad`
    /// rows of zeros.
    weight_p: Array,
    pad: usize,
    targets: Array,
    /// The targets as the host read them once: each chunk's loss checks its own, so that no
    /// chunk reads them back from a GPU.
    host_targets: Vec<u32>,
    ignore: Option<u32>,
    chunks: Vec<Chunk>,
}

impl Head {
    /// The vocabulary: the weight's rows without the padding.
    fn vocab(&self) -> usize {
        self.weight.shape().dims()[0]
    }

    /// Chunk `c`'s targets as the host holds them.
    fn host_targets(&self, c: Chunk) -> &[u32] {
        &self.host_targets[c.start..c.start + c.rows]
    }

    /// Chunk `c`'s hidden rows (in the products' dtype), its logits (padded) and its targets.
    fn logits(&self, c: Chunk) -> Result<(Array, Array, Array)> {
        let hidden = narrow(&self.hidden, 0, c.start, c.rows)?;
        let hidden_p = in_dtype(&hidden, self.weight_p.dtype())?;
        let logits = matmul(&hidden_p, &self.weight_p, false, true)?;
        let targets = narrow(&self.targets, 0, c.start, c.rows)?;
        Ok((hidden_p, logits, targets))
    }

    /// The mean loss over the counted rows, chunk by chunk (a meta device plans the chunks
    /// of one size once: each frees what it made).
    fn loss(&self) -> Result<Array> {
        let dtype = loss_dtype(self.weight_p.dtype());
        let device = self.hidden.device();
        let mut total = Array::zeros(device, Shape::new(&[]), dtype)?;
        device.for_each_alike(
            &self.chunks,
            |c| c.rows,
            |&c| -> Result<()> {
                let (_, logits, targets) = self.logits(c)?;
                let host = Some(self.host_targets(c));
                let loss =
                    padded_cross_entropy(&logits, Some(self.vocab()), &targets, self.ignore, host)?;
                drop(logits);
                ew::add_into(&mut total, &ew::scale(&loss, c.share)?)?;
                Ok(())
            },
        )?;
        Ok(total)
    }

    /// The gradients of the hidden states and of the weight (each when asked) for the loss'
    /// gradient `g`, each chunk's rows of the hidden states' written in place (a meta device
    /// plans the chunks of one size once). Without `g` (the forward pass) they are the loss'
    /// own gradients, held under the gradients' tag, and the loss comes with them.
    fn grads(
        &self,
        g: Option<&Array>,
        (hidden, weight): (bool, bool),
    ) -> Result<(Option<Array>, [Option<Array>; 2])> {
        let device = self.hidden.device();
        // The weight's gradient with the padded rows, cut back once all chunks are in; a half
        // weight's (bf16 parameters) is summed over the chunks in f32 and rounded once.
        let summed_in = summed_in(self.weight.dtype());
        let (mut dweight, mut dhidden) = {
            let _tag = g.is_none().then(|| device.scoped_tag(Tag::GRADIENTS));
            let dweight = when(weight, || {
                let features = self.weight.shape().dims()[1];
                let rows = self.vocab() + self.pad;
                Array::zeros(device, [rows, features], summed_in).map_err(Into::into)
            })?;
            let dhidden = when(hidden, || {
                Array::zeros(device, self.hidden.shape().clone(), self.hidden.dtype())
                    .map_err(Into::into)
            })?;
            (dweight, dhidden)
        };
        let loss_dtype = loss_dtype(self.weight_p.dtype());
        let mut total = match g {
            None => Some(Array::zeros(device, Shape::new(&[]), loss_dtype)?),
            Some(_) => None,
        };
        let features = self.hidden.shape().dims()[1];
        device.for_each_alike(
            &self.chunks,
            |c| c.rows,
            |&c| -> Result<()> {
                let (rows, logits, targets) = self.logits(c)?;
                let host = Some(self.host_targets(c));
                if let Some(total) = &mut total {
                    let vocab = Some(self.vocab());
                    let loss = padded_cross_entropy(&logits, vocab, &targets, self.ignore, host)?;
                    ew::add_into(total, &ew::scale(&loss, c.share)?)?;
                }
                let dloss = match g {
                    Some(g) => ew::scale(g, c.share)?,
                    None => Array::full(device, Shape::new(&[]), loss_dtype, c.share)?,
                };
                let dlogits = padded_cross_entropy_backward(
                    &logits,
                    Some(self.vocab()),
                    &targets,
                    &dloss,
                    self.ignore,
                    host,
                )?;
                drop(logits);
                if let Some(dh) = &mut dhidden {
                    let d = matmul(&dlogits, &self.weight_p, false, false)?;
                    cast_range(&d, 0, dh, c.start * features, c.rows * features)?;
                }
                if let Some(dw) = &mut dweight {
                    // Under autocast a half product (half the time of an f32 one, or less on
                    // matrix units) added into the f32 gradient.
                    matmul_accumulate(&dlogits, &rows, true, false, dw)?;
                }
                Ok(())
            },
        )?;
        let dweight = match dweight {
            Some(dw) if self.pad > 0 => Some(narrow(&dw, 0, 0, self.vocab())?),
            dw => dw,
        };
        let dweight = {
            let _tag = g.is_none().then(|| device.scoped_tag(Tag::GRADIENTS));
            dweight
                .map(|dw| in_dtype(&dw, self.weight.dtype()))
                .transpose()?
        };
        Ok((total, [dhidden, dweight]))
    }
}

/// Each gradient formed in the forward pass, scaled in place by the upstream gradient `g`
/// (cast to its dtype first) when its input needs it.
fn scaled_by(g: &Array, grads: [Option<Array>; 2], needs: &[bool]) -> Result<Vec<Option<Array>>> {
    grads
        .into_iter()
        .enumerate()
        .map(|(i, grad)| match grad {
            Some(mut grad) if needs.get(i) == Some(&true) => {
                let factor = in_dtype(g, grad.dtype())?;
                ew::scale_by_into(&mut grad, &factor)?;
                Ok(Some(grad))
            }
            _ => Ok(None),
        })
        .collect()
}

impl Tensor {
    /// The mean cross-entropy of the logits `self @ weight^T` against `targets`, over the rows
    /// whose target is not `ignore`, computed `chunk` rows at a time so that the logits never
    /// exist whole: `self` is `[rows, features]` (a model's last hidden states, f32 or f64, or
    /// a half dtype for half parameters, whose weight gradient is summed over the chunks in
    /// f32), `weight` `[vocabulary, features]` of the same dtype (the head, or a tied embedding),
    /// `targets` `[rows]` (U32). Equal to `self.linear(weight, None)` followed by
    /// [`Tensor::cross_entropy`], to float tolerance, gradients included. Reads the targets
    /// back to count each chunk's rows.
    pub fn linear_cross_entropy(
        &self,
        weight: &Tensor,
        targets: &Tensor,
        ignore: Option<u32>,
        chunk: usize,
    ) -> Result<Tensor> {
        const OP: &str = "linear_cross_entropy";
        match (self.dims(), weight.dims(), targets.dims()) {
            (&[rows, features], &[_, f], &[n]) if f == features && n == rows => {}
            _ => {
                return Err(KernelError::Shape {
                    op: OP,
                    detail: format!(
                        "hidden {} must be [rows, features], weight {} [vocabulary, features] \
                         and targets {} [rows]",
                        self.shape(),
                        weight.shape(),
                        targets.shape()
                    ),
                }
                .into());
            }
        }
        let product = products_dtype(self.dtype());
        // A meta device holds no targets to count: any shares do, it computes nothing.
        let host_targets: Vec<u32> = match targets.device().kind() {
            DeviceKind::Meta => vec![0; targets.array().numel()],
            _ => targets.array().to_host()?,
        };
        let pad = padding(self.device(), weight.dims()[0]);
        let head = Head {
            hidden: self.array().clone(),
            weight: weight.array().clone(),
            weight_p: products_weight(weight.array(), product, pad)?,
            pad,
            targets: targets.array().clone(),
            chunks: chunks(&host_targets, chunk, ignore),
            host_targets,
            ignore,
        };
        let rec = begin(&[self, weight]);
        let Some(rec) = rec else {
            return Ok(Tensor::output(head.loss()?));
        };
        if product != DType::F16 {
            // The gradients from the forward pass's logits; the backward pass scales them.
            let needs = (rec.tracks(0), rec.tracks(1));
            let (loss, grads) = head.grads(None, needs)?;
            let y = Tensor::output(loss.expect("the forward pass forms the loss"));
            let kept: Vec<&Array> = grads.iter().flatten().collect();
            rec.finish(
                OP,
                &[&y],
                saves(&kept),
                rule(move |g, needs| scaled_by(g, grads, needs)),
            );
            return Ok(y);
        }
        let y = Tensor::output(head.loss()?);
        // The half copy of the weight goes: the backward pass casts it again.
        let head = Head {
            weight_p: head.weight.clone(),
            ..head
        };
        rec.finish(
            OP,
            &[&y],
            saves(&[&head.hidden, &head.weight, &head.targets]),
            rule(move |g, needs| {
                let head = Head {
                    weight_p: products_weight(&head.weight, product, head.pad)?,
                    ..head
                };
                let needs = (needs.first() == Some(&true), needs.get(1) == Some(&true));
                Ok(Vec::from(head.grads(Some(g), needs)?.1))
            }),
        );
        Ok(y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_split_the_mean_by_the_rows_they_count() {
        let targets = [1, 9, 2, 3, 9, 4, 5];
        let parts = chunks(&targets, 3, Some(9));
        let layout: Vec<(usize, usize)> = parts.iter().map(|c| (c.start, c.rows)).collect();
        assert_eq!(layout, [(0, 3), (3, 3), (6, 1)]);
        let shares: Vec<f64> = parts.iter().map(|c| c.share).collect();
        assert_eq!(shares, [2.0 / 5.0, 2.0 / 5.0, 1.0 / 5.0]);
        assert!(chunks(&[9, 9], 4, Some(9)).iter().all(|c| c.share == 0.0));
        // GPT-2's 8 x 1024 rows in chunks of at most 667: thirteen of 631 or 620.
        let sizes: Vec<usize> = chunks(&[0; 8192], 667, None)
            .iter()
            .map(|c| c.rows)
            .collect();
        assert_eq!(sizes, [[631; 12].as_slice(), &[620]].concat());
        let sizes: Vec<usize> = chunks(&[0; 10], 4, None).iter().map(|c| c.rows).collect();
        assert_eq!(sizes, [4, 4, 2]);
    }
}
