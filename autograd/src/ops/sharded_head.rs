//! A language model's fused head and loss ([`Tensor::linear_cross_entropy`]) whose weight is
//! sharded over ranks by whole rows of the vocabulary (Megatron's vocabulary-parallel
//! cross-entropy, under FSDP's sharding): each rank forms the logits of every rank's rows
//! against its own slice of the vocabulary, and the softmax's sums over the whole vocabulary
//! come from every slice's, gathered. The whole weight and its whole gradient never exist;
//! beyond its operands a rank holds every rank's hidden rows and one chunk's logits.

use headroom_collectives::{Collective, ReduceOp, SharedWorld};
use headroom_kernels::ops::data::cast_range;
use headroom_kernels::ops::elementwise as ew;
use headroom_kernels::ops::gemm::{matmul, matmul_accumulate};
use headroom_kernels::ops::layout::narrow;
use headroom_kernels::ops::loss::{
    loss_dtype, sliced_cross_entropy_backward, sliced_cross_entropy_parts,
};
use headroom_kernels::ops::reduce::{max, sum};
use headroom_kernels::{Array, DType, DeviceKind, Error as KernelError, Shape};

use super::linear_loss::{products_dtype, summed_in};
use super::sharded::every_rank;
use super::{in_dtype, rule};
use crate::error::Result;
use crate::recording::begin;
use crate::saved::saves;
use crate::tensor::Tensor;

const OP: &str = "sharded_linear_cross_entropy";

/// One chunk of every rank's rows: whose rows, where it starts among them all, how many.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Chunk {
    rank: usize,
    start: usize,
    rows: usize,
}

/// What both passes share.
struct Slice {
    world: SharedWorld,
    /// This rank's rows of the weight, `[vocab / ranks, features]`.
    weight: Array,
    /// The products' dtype: the autocast half type, or the hidden states' own.
    product: DType,
    /// Every rank's targets, numbered within this rank's slice (`u32::MAX` for a target in
    /// another slice or ignored), as the host holds them.
    local_targets: Vec<u32>,
    /// Every rank's rows' weight in its rank's mean: 1 over the rows its rank counts, 0 for an
    /// ignored row.
    shares: Vec<f64>,
    chunks: Vec<Chunk>,
}

impl Slice {
    /// Every rank's rows of `mine` (`[rows, features]`, this rank's), in rank order.
    fn every_ranks(&self, mine: &Array) -> Result<Array> {
        let features = mine.shape().dims().last().copied().unwrap_or(1).max(1);
        let all = every_rank(&self.world, mine)?;
        Ok(all.reshape([all.numel() / features, features])?)
    }

    /// Chunk `c`'s logits against this rank's slice, and its hidden rows in the products'
    /// dtype.
    fn logits(&self, hidden: &Array, weight_p: &Array, c: Chunk) -> Result<(Array, Array)> {
        let rows = in_dtype(&narrow(hidden, 0, c.start, c.rows)?, self.product)?;
        Ok((matmul(&rows, weight_p, false, true)?, rows))
    }

    /// Chunk `c`'s targets within this slice, on the device.
    fn targets(&self, device_of: &Array, c: Chunk) -> Result<Array> {
        let local = &self.local_targets[c.start..c.start + c.rows];
        Ok(Array::from_host(device_of.device(), [c.rows], local)?)
    }

    /// Chunk `c`'s rows' weights, of `dtype`.
    fn shares(&self, device_of: &Array, c: Chunk, dtype: DType) -> Result<Array> {
        let shares = &self.shares[c.start..c.start + c.rows];
        Ok(Array::from_f64(
            device_of.device(),
            [c.rows],
            dtype,
            shares,
        )?)
    }

    /// The loss of this rank's rows (their mean), and every rank's rows' log-sum-exp over the
    /// whole vocabulary, `[ranks * rows]`.
    fn loss(&self, hidden: &Array) -> Result<(Array, Array)> {
        let all = self.every_ranks(hidden)?;
        let weight_p = self.products_weight()?;
        let dtype = loss_dtype(self.product);
        let device = hidden.device();
        let mut total = Array::zeros(device, Shape::new(&[]), dtype)?;
        let mut lse_all = Array::zeros(device, [all.shape().dims()[0]], dtype)?;
        let mine = self.world.rank();
        device.for_each_alike(
            &self.chunks,
            |c| (c.rows, c.rank == mine),
            |&c| -> Result<()> {
                let (logits, _) = self.logits(&all, &weight_p, c)?;
                let parts = sliced_cross_entropy_parts(&logits, &self.targets(&all, c)?)?;
                drop(logits);
                let lse = self.whole_lse(&narrow(&parts, 0, 0, 1)?.reshape([c.rows])?)?;
                cast_range(&lse, 0, &mut lse_all, c.start, c.rows)?;
                // The one slice that holds a row's target gives its logit; the others 0.
                let mut picked = Array::zeros(device, [c.rows], dtype)?;
                cast_range(&parts, c.rows, &mut picked, 0, c.rows)?;
                self.world.clone().all_reduce(&mut picked, ReduceOp::Sum)?;
                if c.rank == mine {
                    let losses = ew::sub(&lse, &picked)?;
                    let weighted = ew::mul(&losses, &self.shares(&all, c, dtype)?)?;
                    ew::add_into(&mut total, &sum(&weighted, 0)?)?;
                }
                Ok(())
            },
        )?;
        Ok((total, lse_all))
    }

    /// The log-sum-exp over the whole vocabulary of each row, from this slice's `lse`: every
    /// slice's gathered and combined, the same on every rank.
    fn whole_lse(&self, lse: &Array) -> Result<Array> {
        let ranks = self.world.world_size();
        let slices = every_rank(&self.world, lse)?.reshape([ranks, lse.numel()])?;
        let most = max(&slices, 0)?;
        let summed = sum(&ew::exp(&ew::sub(&slices, &most)?)?, 0)?;
        Ok(ew::add(&most, &ew::log(&summed)?)?)
    }

    /// The weight as the products take it.
    fn products_weight(&self) -> Result<Array> {
        in_dtype(&self.weight, self.product)
    }

    /// The gradients of this rank's hidden rows and of its slice of the weight, for every
    /// rank's loss gradient (`g_all`, `[ranks]`) and rows' log-sum-exp `lse_all`.
    fn grads(&self, hidden: &Array, g_all: &Array, lse_all: &Array) -> Result<[Array; 2]> {
        let all = self.every_ranks(hidden)?;
        let weight_p = self.products_weight()?;
        let device = hidden.device();
        let features = all.shape().dims()[1];
        let summed = summed_in(self.weight.dtype());
        let mut dweight = Array::zeros(device, self.weight.shape().clone(), summed)?;
        let mut dall = Array::zeros(device, all.shape().clone(), hidden.dtype())?;
        let dtype = loss_dtype(self.product);
        device.for_each_alike(
            &self.chunks,
            |c| c.rows,
            |&c| -> Result<()> {
                let (logits, rows) = self.logits(&all, &weight_p, c)?;
                let scale = ew::mul(&self.shares(&all, c, dtype)?, &narrow(g_all, 0, c.rank, 1)?)?;
                let lse = narrow(lse_all, 0, c.start, c.rows)?;
                let targets = self.targets(&all, c)?;
                let dlogits = sliced_cross_entropy_backward(&logits, &targets, &lse, &scale)?;
                drop(logits);
                matmul_accumulate(&dlogits, &rows, true, false, &mut dweight)?;
                let d = matmul(&dlogits, &weight_p, false, false)?;
                cast_range(&d, 0, &mut dall, c.start * features, c.rows * features)?;
                Ok(())
            },
        )?;
        drop(all);
        // Each rank's rows' gradient summed over every rank's slice.
        let mut dhidden = Array::zeros(device, [hidden.numel()], hidden.dtype())?;
        let dall = dall.reshape([dall.numel()])?;
        self.world
            .clone()
            .reduce_scatter(&dall, &mut dhidden, ReduceOp::Sum)?;
        let dhidden = dhidden.reshape(hidden.shape().clone())?;
        Ok([dhidden, in_dtype(&dweight, self.weight.dtype())?])
    }
}

impl Tensor {
    /// [`Tensor::linear_cross_entropy`] whose `[vocab, features]` weight (`whole`) is sharded
    /// over `world` by whole rows: this tensor is `[rows, features]`, `weight` this rank's
    /// chunk as [`Tensor::gathered`] lays it out, `vocab` a multiple of the ranks so that the
    /// chunk is `vocab / ranks` whole rows. The loss is the mean over this rank's rows; the
    /// gradients are the chunks' of the sum of every rank's loss, as gathering the weight
    /// gives them. Every rank calls it at the same point with as many rows.
    pub fn sharded_linear_cross_entropy(
        &self,
        weight: &Tensor,
        targets: &Tensor,
        ignore: Option<u32>,
        chunk: usize,
        (world, whole): (&SharedWorld, &Shape),
    ) -> Result<Tensor> {
        let ranks = world.world_size();
        let (rows, vocab, features) = match (self.dims(), whole.dims(), targets.dims()) {
            (&[rows, features], &[vocab, f], &[n])
                if f == features
                    && n == rows
                    && vocab.is_multiple_of(ranks)
                    && weight.dims() == [vocab / ranks * features] =>
            {
                (rows, vocab, features)
            }
            _ => {
                return Err(KernelError::Shape {
                    op: OP,
                    detail: format!(
                        "hidden {} must be [rows, features], targets {} [rows], and the \
                         weight {whole} [vocabulary, features] with a vocabulary that {ranks} \
                         ranks share by whole rows, this rank's chunk {} of it",
                        self.shape(),
                        targets.shape(),
                        weight.shape()
                    ),
                }
                .into());
            }
        };
        let product = products_dtype(self.dtype());
        let slice = vocab / ranks;
        let all_targets = every_ranks_targets(world, targets.array())?;
        let first = world.rank() * slice;
        let mut local_targets = Vec::with_capacity(all_targets.len());
        let mut shares = Vec::with_capacity(all_targets.len());
        for (p, mine) in all_targets.chunks(rows.max(1)).enumerate() {
            let counted = mine.iter().filter(|&&t| Some(t) != ignore).count().max(1);
            for (i, &t) in mine.iter().enumerate() {
                let counts = Some(t) != ignore;
                if counts && t as usize >= vocab {
                    return Err(KernelError::Argument {
                        op: OP,
                        detail: format!(
                            "target {t} of rank {p}'s row {i} is out of range for {vocab} classes"
                        ),
                    }
                    .into());
                }
                let within = (t as usize).wrapping_sub(first);
                let local = match counts && within < slice {
                    true => within as u32,
                    false => u32::MAX,
                };
                local_targets.push(local);
                shares.push(if counts { 1.0 / counted as f64 } else { 0.0 });
            }
        }
        let per_chunk = chunk.clamp(1, rows.max(1));
        let chunks = (0..ranks)
            .flat_map(|rank| {
                (0..rows).step_by(per_chunk).map(move |at| Chunk {
                    rank,
                    start: rank * rows + at,
                    rows: per_chunk.min(rows - at),
                })
            })
            .collect();
        let head = Slice {
            world: world.clone(),
            weight: weight.array().reshape([slice, features])?,
            product,
            local_targets,
            shares,
            chunks,
        };
        let (loss, lse_all) = head.loss(self.array())?;
        let y = Tensor::output(loss);
        if let Some(rec) = begin(&[self, weight]) {
            let hidden = self.array().clone();
            rec.finish(
                OP,
                &[&y],
                saves(&[&hidden, &head.weight, &lse_all]),
                rule(move |g, _| {
                    let g_all = every_rank(&head.world, g)?;
                    let [dhidden, dweight] = head.grads(&hidden, &g_all, &lse_all)?;
                    let dweight = dweight.reshape([slice * features])?;
                    Ok(vec![Some(dhidden), Some(dweight)])
                }),
            );
        }
        Ok(y)
    }
}

/// Every rank's `targets` (`[rows]`, U32), in rank order, as the host holds them: zeros on a
/// meta device, which holds none.
fn every_ranks_targets(world: &SharedWorld, targets: &Array) -> Result<Vec<u32>> {
    let all = every_rank(world, targets)?;
    Ok(match targets.device().kind() {
        DeviceKind::Meta => vec![0; all.numel()],
        _ => all.to_host()?,
    })
}
