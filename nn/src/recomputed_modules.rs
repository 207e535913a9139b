//! What a model computes again in the backward pass instead of keeping it from the forward
//! pass, and modules run as recomputed segments (gradient checkpointing), with their dropout
//! masks drawn again the same.

use headroom_autograd::Tensor;
use headroom_kernels::Device;

use crate::error::{Error, Result};
use crate::layers::activation::DropoutCounter;
use crate::module::Module;
use crate::sharded_params::ParamShards;
use crate::streamed_pass::Streamed;

/// What a model computes again in the backward pass instead of keeping from the forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recompute {
    /// Nothing: every activation a backward rule needs is kept.
    #[default]
    None,
    /// Cheap elementwise results (selective recomputation, Korthikanti et al. 2022): each
    /// norm's output from its input and statistics, the GELU's output from its input. The
    /// products are not run again; the step is the same, bit for bit.
    Cheap,
    /// [`Cheap`](Self::Cheap), and a SwiGLU MLP's up projection: each Llama block keeps the
    /// gate alone of its MLP's two products and runs the up projection again, one product more
    /// per block ([`Tensor::rms_norm_swiglu`]). A GELU block recomputes as `Cheap`. The step is
    /// the same, bit for bit.
    CheapUp,
    /// Whole blocks (activation checkpointing): each keeps only its input, and runs again.
    Blocks,
    /// Whole blocks, each running its MLP over tiles of at most `rows` rows of tokens, each
    /// tile a recomputed segment of its own (a tiled MLP): the MLP's wide intermediate exists
    /// for one tile at a time, for a third forward pass of each MLP. The step is the same as
    /// with [`Blocks`](Self::Blocks) up to the order of the weights' gradient sums over tiles.
    BlocksTiledMlp {
        /// Rows of tokens per tile, at least 1.
        rows: usize,
    },
}

impl Recompute {
    /// Whether whole blocks run again (with their MLPs tiled or not).
    pub fn whole_blocks(&self) -> bool {
        matches!(self, Self::Blocks | Self::BlocksTiledMlp { .. })
    }
}

/// `module.forward(x)` as one recomputed segment ([`headroom_autograd::recompute`]): it keeps
/// only `x` for the backward pass, which runs the module again. `counter` is the dropout
/// counter the module's dropout layers draw from: the recomputation rewinds it to where the
/// forward pass started, so that it draws the same masks, and then puts it back.
///
/// ```
/// use headroom_autograd::{Tape, Tensor};
/// use headroom_kernels::{Device, DeviceConfig, DType};
/// use headroom_nn::{Block, DropoutCounter, Initializer, Module, recomputed};
/// let cpu = Device::cpu(DeviceConfig::new(64 << 20))?;
/// let counter = DropoutCounter::default();
/// let block = Block::new(&mut Initializer::new(&cpu, DType::F32, 1), 16, 2, 0.02, (0.1, &counter))?;
/// let x = Tensor::from_f64(&cpu, [2, 3, 16], DType::F32, &[0.5; 96])?;
/// let tape = Tape::new();
/// let y = tape.record(|| Ok::<_, headroom_nn::Error>(recomputed(&block, &counter, &x)?.sum_all()?))?;
/// let grads = tape.gradient(&y, &block.parameters().iter().collect::<Vec<_>>())?;
/// assert_eq!(grads.len(), block.parameters().len());
/// # Ok::<(), headroom_nn::Error>(())
/// ```
pub fn recomputed<M>(module: &M, counter: &DropoutCounter, x: &Tensor) -> Result<Tensor>
where
    M: Module + Clone + 'static,
{
    segment(Weights::Resident(module.clone()), counter, x, None)
}

/// [`recomputed`], keeping `x` on `host` (the device's host tier) until the backward pass
/// needs it back, one segment ahead of its rule or not ([`headroom_autograd::recompute_offloaded`]):
/// the device keeps nothing for the segment.
pub fn recomputed_offloaded<M>(
    module: &M,
    counter: &DropoutCounter,
    x: &Tensor,
    host: &Device,
    ahead: bool,
) -> Result<Tensor>
where
    M: Module + Clone + 'static,
{
    let module = Weights::Resident(module.clone());
    segment(module, counter, x, Some((host, ahead)))
}

/// [`recomputed`] for a module whose weights live elsewhere (the host tier: weight streaming),
/// one of a pass of them ([`Streamed::pass`]): each time the segment runs, in the forward
/// pass and again in the backward pass, it takes the module's tensors on `x`'s device
/// ([`Streamed::fetched`], copied there one module ahead) and drops the copies once done, so
/// that the device holds the module's weights only around its run; their gradients go back to
/// where the weights live. Its input waits on `activations` when given
/// ([`recomputed_offloaded`], fetched ahead where the pass fetches weights ahead), on the
/// device otherwise.
pub fn recomputed_streamed<M>(
    module: &Streamed<M>,
    counter: &DropoutCounter,
    x: &Tensor,
    activations: Option<&Device>,
) -> Result<Tensor>
where
    M: Module + Clone + 'static,
{
    let host = activations.map(|host| (host, module.ahead()));
    segment(Weights::Streamed(module.clone()), counter, x, host)
}

/// [`recomputed`] for a module whose tensors are chunks sharded over ranks ([`ParamShards`]),
/// named `prefix` in the sharded module: each time the segment runs, in the forward pass and
/// again in the backward pass, it gathers the whole tensors from every rank and drops them
/// once done, so that the device holds the module whole only around its run; each chunk's
/// gradient is the sum over the ranks'. Its input waits on `activations` when given. Every
/// rank must run it at the same point.
pub fn recomputed_sharded<M>(
    module: &M,
    (shards, prefix): (&ParamShards, &str),
    counter: &DropoutCounter,
    x: &Tensor,
    activations: Option<&Device>,
) -> Result<Tensor>
where
    M: Module + Clone + 'static,
{
    let weights = Weights::Sharded(module.clone(), shards.clone(), prefix.to_owned());
    segment(weights, counter, x, activations.map(|host| (host, false)))
}

/// Where a segment's module finds its weights.
enum Weights<M> {
    /// On the device, in the module.
    Resident(M),
    /// Streamed to the device each run.
    Streamed(Streamed<M>),
    /// Gathered from the ranks each run: the module of chunks, how they are sharded, and its
    /// name in the sharded module.
    Sharded(M, ParamShards, String),
}

/// [`recomputed`], its input kept on a host tier when there is one (fetched ahead or not).
fn segment<M>(
    weights: Weights<M>,
    counter: &DropoutCounter,
    x: &Tensor,
    host: Option<(&Device, bool)>,
) -> Result<Tensor>
where
    M: Module + Clone + 'static,
{
    let parameters = match &weights {
        Weights::Resident(module) | Weights::Sharded(module, ..) => module.parameters(),
        Weights::Streamed(streamed) => streamed.module().parameters(),
    };
    let variables: Vec<&Tensor> = parameters.iter().collect();
    let counter = counter.clone();
    let start = counter.get();
    let run = move |inputs: &[Tensor]| {
        // The forward pass finds the counter at `start` and leaves it past its masks; the
        // recomputation, later, draws from `start` again and puts the counter back.
        let resume = counter.get();
        counter.set(start);
        let out = match &weights {
            Weights::Resident(module) => module.forward(&inputs[0]),
            Weights::Streamed(streamed) => streamed
                .fetched(inputs[0].device())
                .and_then(|m| m.forward(&inputs[0])),
            Weights::Sharded(module, shards, prefix) => shards
                .gathered(module, prefix)
                .and_then(|m| m.forward(&inputs[0])),
        };
        counter.set(resume.max(counter.get()));
        out.map_err(into_autograd)
    };
    Ok(match host {
        Some((host, ahead)) => {
            headroom_autograd::recompute_offloaded(&[x], &variables, host, ahead, run)?
        }
        None => headroom_autograd::recompute(&[x], &variables, run)?,
    })
}

/// An error of a module's forward pass as the tape carries it: an op's error as it is (an
/// out-of-memory keeps its report), any other as an argument error of the segment.
fn into_autograd(err: Error) -> headroom_autograd::Error {
    match err {
        Error::Autograd(err) => err,
        other => headroom_autograd::Error::Argument {
            op: "recompute",
            detail: other.to_string(),
        },
    }
}
