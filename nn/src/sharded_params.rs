//! Parameters sharded over ranks (ZeRO-3, FSDP): each rank keeps one flat chunk of every
//! tensor of a module, the whole tensor padded with zeros to a multiple of the ranks, and
//! gathers the whole module only to run it ([`Tensor::gathered`](headroom_autograd::Tensor::gathered)); the gradient of each chunk
//! is the sum over the ranks of the whole tensor's, cut to the chunk.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use headroom_alloc::Tag;
use headroom_autograd::{Tensor, autocast_dtype, chunk_of, every_rank, no_grad};
use headroom_collectives::{Collective, SharedWorld};
use headroom_kernels::ops::data::host_window;
use headroom_kernels::{Array, DType, Device, Shape};
use parking_lot::Mutex;

use crate::error::Result;
use crate::module::{Module, join};

/// The cutting of a module's tensors to one rank's chunks, as they are drawn or all at once,
/// and each tensor's whole shape by its name.
#[derive(Debug, Clone, Default)]
pub struct Cut {
    rank: usize,
    ranks: usize,
    /// Invariant: one entry per tensor cut, by its name in the model.
    whole: BTreeMap<String, Shape>,
}

impl Cut {
    /// Cuts to chunk `rank` of `ranks`, nothing cut yet.
    pub fn new(rank: usize, ranks: usize) -> Self {
        Self {
            rank,
            ranks,
            whole: BTreeMap::new(),
        }
    }

    /// Cuts every tensor of `module`, named `prefix` in the model, to this rank's chunk (in
    /// place, each tensor keeping its identity and whether it is a parameter; the chunks tagged
    /// as weights), and each weight stored quantized to its chunk of whole blocks
    /// ([`Quantized::chunk`](headroom_kernels::ops::quant::Quantized::chunk)). What was cut
    /// already is left as it is.
    pub fn take(&mut self, prefix: &str, module: &mut dyn Module) -> Result<()> {
        let (rank, ranks) = (self.rank, self.ranks);
        module.visit_mut(&mut |name, t| {
            let name = join(prefix, name);
            if self.whole.contains_key(&name) {
                return Ok(());
            }
            self.whole.insert(name, t.shape().clone());
            let device = t.device().clone();
            let _weights = device.scoped_tag(Tag::WEIGHTS);
            *t.array_mut() = chunk_of(t.array(), rank, ranks)?;
            Ok(())
        })?;
        module.visit_quantized_mut(&mut |stored| {
            if !stored.is_chunk() {
                let device = stored.device().clone();
                let _weights = device.scoped_tag(Tag::WEIGHTS);
                *stored = stored.chunk(rank, ranks)?;
            }
            Ok(())
        })
    }
}

/// The world a module's tensors are sharded over, and each tensor's whole shape by its name.
#[derive(Debug, Clone)]
pub struct ParamShards {
    world: SharedWorld,
    /// Invariant: cuts to the world's rank of its size; one entry per tensor cut, by its name
    /// in the module that was sharded.
    cut: Cut,
    /// Where gathered copies are kept until the chunks change (ZeRO-2), by name and dtype,
    /// shared by every clone; none where each use gathers again (ZeRO-3).
    kept: Option<Arc<Mutex<Kept>>>,
}

/// Whole copies kept, by tensor name and dtype gathered in.
type Kept = HashMap<(String, DType), Array>;

impl ParamShards {
    /// Cuts every tensor of `module` to this rank's chunk of `world` ([`Cut::take`]).
    pub fn shard(module: &mut dyn Module, world: &SharedWorld) -> Result<Self> {
        let mut cut = Cut::new(world.rank(), world.world_size());
        cut.take("", module)?;
        Ok(Self::of(world, cut))
    }

    /// The shards `cut` made over `world`, its rank's.
    pub fn of(world: &SharedWorld, cut: Cut) -> Self {
        Self {
            world: world.clone(),
            cut,
            kept: None,
        }
    }

    /// Keeps each tensor's gathered copy from its first use until
    /// [`release_gathered`](Self::release_gathered) (ZeRO-2, FSDP2's
    /// `reshard_after_forward=False` held across the step): the gradients and the state stay
    /// sharded, the weights are gathered once a step. Weights stored quantized, the token
    /// embedding's lookup and the sliced head gather where they run as before.
    pub fn keep_gathered(&mut self) {
        self.kept.get_or_insert_with(Default::default);
    }

    /// Lets go of the gathered copies kept: every rank must call it before its chunks change
    /// (an update, a restore), so that the next use gathers the new values.
    pub fn release_gathered(&self) {
        if let Some(kept) = &self.kept {
            kept.lock().clear();
        }
    }

    /// Cuts the tensors of `module`, the module that was sharded, added since (adapters drawn
    /// whole over a base drawn sharded), as the others were.
    pub fn take_added(&mut self, module: &mut dyn Module) -> Result<()> {
        self.cut.take("", module)
    }

    /// The world the tensors are sharded over.
    pub fn world(&self) -> &SharedWorld {
        &self.world
    }

    /// This rank's chunk of the bytes of the whole tensor `name` (`size` bytes an element),
    /// zeros past its end, as [`Cut::take`] cuts it: a loader's values for the chunk alone.
    /// All of them where the tensor is not sharded.
    pub fn own_bytes<'a>(&self, name: &str, size: usize, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        let Some(whole) = self.cut.whole.get(name) else {
            return Cow::Borrowed(bytes);
        };
        let chunk = whole.numel().div_ceil(self.cut.ranks.max(1)) * size;
        host_window(bytes, self.cut.rank * chunk, chunk)
    }

    /// The whole shape of the tensor named `name`, or none where it was not sharded.
    pub fn whole_shape(&self, name: &str) -> Option<&Shape> {
        self.cut.whole.get(name)
    }

    /// A copy of `part` of the sharded module, named `prefix` in it, with every sharded tensor
    /// gathered whole, recorded ([`Tensor::gathered`](headroom_autograd::Tensor::gathered)) where a tape records: every rank must
    /// call it at the same point. Tensors not sharded are shared as they are.
    pub fn gathered<M: Module + Clone>(&self, part: &M, prefix: &str) -> Result<M> {
        self.gathered_holding(part, prefix, true)
    }

    /// [`ParamShards::gathered`], whose whole tensors the backward rules that keep them gather
    /// again when they run instead of holding them
    /// ([`Tensor::gathered_again_in_backward`](headroom_autograd::Tensor::gathered_again_in_backward)):
    /// the tape holds the chunks alone between the
    /// passes, for one more gather of each weight in the backward pass.
    pub fn gathered_again_in_backward<M: Module + Clone>(
        &self,
        part: &M,
        prefix: &str,
    ) -> Result<M> {
        self.gathered_holding(part, prefix, false)
    }

    /// A copy of `module`, the module that was sharded, with every tensor gathered whole (not
    /// recorded) on rank 0 and moved to `host` at once, a checkpoint's copy: every rank takes
    /// part, one tensor at a time, so that no rank's device holds more than one whole tensor
    /// beside its chunks; the others let each whole tensor go at once and get none.
    pub fn whole_on_first_rank<M: Module + Clone>(
        &self,
        module: &M,
        host: &Device,
    ) -> Result<Option<M>> {
        let _off = no_grad();
        let first = self.world.rank() == 0;
        let mut copy = module.clone();
        copy.visit_mut(&mut |name, t| {
            if let Some(whole) = self.cut.whole.get(name) {
                let gathered = t.gathered(&self.world, whole, t.dtype())?;
                if first {
                    *t = gathered.to_device(host)?;
                }
            }
            Ok(())
        })?;
        Ok(first.then_some(copy))
    }

    /// A copy of `part` with its sharded tensors gathered, held by the rules where `hold`.
    fn gathered_holding<M: Module + Clone>(&self, part: &M, prefix: &str, hold: bool) -> Result<M> {
        let mut copy = part.clone();
        copy.visit_mut(&mut |name, t| {
            let name = join(prefix, name);
            if let Some(whole) = self.cut.whole.get(&name) {
                let dtype = gathered_dtype(&name, whole, t.dtype());
                *t = match (&self.kept, hold) {
                    (Some(kept), _) => self.kept_copy(kept, t, (name, whole, dtype))?,
                    (None, true) => t.gathered(&self.world, whole, dtype)?,
                    (None, false) => t.gathered_again_in_backward(&self.world, whole, dtype)?,
                };
            }
            Ok(())
        })?;
        copy.visit_quantized_mut(&mut |stored| {
            let device = stored.device().clone();
            let _weights = device.scoped_tag(Tag::WEIGHTS);
            *stored = stored.gathered(|mine| every_rank(&self.world, mine))?;
            Ok(())
        })?;
        Ok(copy)
    }
}

impl ParamShards {
    /// The chunk `t`'s whole copy from `kept`, gathered (and kept) where it is not there yet.
    fn kept_copy(
        &self,
        kept: &Mutex<Kept>,
        t: &Tensor,
        (name, whole, dtype): (String, &Shape, DType),
    ) -> Result<Tensor> {
        let key = (name, dtype);
        let copy = kept.lock().get(&key).cloned();
        if let Some(full) = copy {
            return Ok(t.gathered_already(&self.world, whole, full)?);
        }
        let gathered = t.gathered(&self.world, whole, dtype)?;
        kept.lock().insert(key, gathered.array().clone());
        Ok(gathered)
    }
}

/// The dtype the tensor `name` of shape `whole` and of `dtype` is gathered in: under autocast
/// a block's matrix (a linear layer's weight, which every product would cast) in the half type,
/// so that half the bytes move and are held, as FSDP's mixed precision gathers them; every
/// other tensor (norms, embeddings, the head) in its own.
fn gathered_dtype(name: &str, whole: &Shape, dtype: DType) -> DType {
    let matrix =
        whole.dims().len() == 2 && name.starts_with("blocks.") && name.ends_with(".weight");
    match autocast_dtype() {
        Some(half) if matrix && dtype == DType::F32 => half,
        _ => dtype,
    }
}
