//! The tape: the ops run on tracked tensors, in the order they ran, each with what its backward
//! rule needs (a Wengert list, as `tf.GradientTape` keeps). Gradients run the list backwards.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use headroom_alloc::Tag;
use headroom_kernels::ops::elementwise as ew;
use headroom_kernels::{Array, DType, Shape};
use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::gradients::Gradients;
use crate::prefetch::OffloadedInputs;
use crate::saved::{OpSaved, Saved, SavedReport};
use crate::tensor::{Tensor, TensorId};

/// Index of a tracked value on a tape.
pub(crate) type SlotId = usize;

/// The gradients of an op's inputs, one per input (`None` where none is needed).
pub(crate) type InputGrads = Vec<Option<Array>>;

/// The rule of an op with one output: from that output's gradient (owned, so that a rule may
/// turn it into its input's gradient in place when nothing else shares it) and, per input,
/// whether it needs a gradient.
pub(crate) type OneRule = Box<dyn FnOnce(Array, &[bool]) -> Result<InputGrads> + Send>;

/// The rule of an op with several outputs: from each output's gradient (`None` where none
/// flowed) and, per input, whether it needs a gradient.
pub(crate) type ManyRule = Box<dyn FnOnce(&[Option<Array>], &[bool]) -> Result<InputGrads> + Send>;

/// An op's backward rule, run once; it returns one entry per input.
pub(crate) enum Backward {
    /// For an op with one output.
    One(OneRule),
    /// For an op with several outputs.
    Many(ManyRule),
}

/// One recorded op.
struct Node {
    op: &'static str,
    /// The slot of each input the tape tracks (`None` for constants).
    inputs: SmallVec<[Option<SlotId>; 4]>,
    /// The slots of its outputs.
    outputs: SmallVec<[SlotId; 1]>,
    /// Owns everything saved for the backward pass; running it (or dropping the node) releases
    /// those tensors.
    backward: Backward,
    /// The account of what `backward` holds.
    saved: Saved,
    /// Whether its rule runs as soon as its output's gradient is complete ([`backward_order`]).
    eager: bool,
}

/// What a gradient for a tracked value must look like.
struct Slot {
    shape: Shape,
    dtype: DType,
}

#[derive(Default)]
struct State {
    /// Recorded ops, in the order they ran.
    nodes: Vec<Node>,
    /// One per tracked value: leaves (variables and watched tensors) and op outputs.
    slots: Vec<Slot>,
    /// The slot of each tracked tensor.
    ids: HashMap<TensorId, SlotId>,
    /// Set once gradients were computed: the nodes are gone.
    used: bool,
    /// The last recomputed segment recorded with its inputs in the host tier.
    last_offloaded: Option<Weak<OffloadedInputs>>,
}

impl State {
    /// The slot of `tensor`, registering it as a leaf when it is a variable (or `watch`ed).
    fn slot(&mut self, tensor: &Tensor, watch: bool) -> Option<SlotId> {
        if let Some(&slot) = self.ids.get(&tensor.id()) {
            return Some(slot);
        }
        (watch || tensor.is_variable()).then(|| self.push(tensor))
    }

    fn push(&mut self, tensor: &Tensor) -> SlotId {
        let slot = self.slots.len();
        self.slots.push(Slot {
            shape: tensor.shape().clone(),
            dtype: tensor.dtype(),
        });
        self.ids.insert(tensor.id(), slot);
        slot
    }
}

/// Records the ops run on tracked tensors while it is recording, and turns them into gradients
/// once: running the backward rules in reverse releases each saved tensor as soon as the last
/// rule that needs it has run, and each intermediate gradient as soon as it has been passed on.
/// Dropping the tape releases everything it still holds. Cheap to clone (a shared handle).
///
/// ```
/// use headroom_autograd::{Tape, Tensor};
/// use headroom_kernels::{Array, DType, Device, DeviceConfig};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let x = Tensor::new(Array::from_f64(&cpu, [1, 2], DType::F64, &[1., 2.])?);
/// let w = Tensor::variable(Array::from_f64(&cpu, [2, 1], DType::F64, &[3., 4.])?);
/// let tape = Tape::new();
/// let y = tape.record(|| x.matmul(&w)?.tanh()?.sum_all())?;
/// let grads = tape.gradient(&y, &[&w])?;
/// let dw = grads.get(&w).unwrap().to_f64()?; // x^T (1 - tanh^2(x w))
/// let t = 11f64.tanh();
/// assert!((dw[0] - (1. - t * t)).abs() < 1e-12 && (dw[1] - 2. * (1. - t * t)).abs() < 1e-12);
/// # Ok::<(), headroom_autograd::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct Tape(Arc<Mutex<State>>);

impl std::fmt::Debug for Tape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.0.lock();
        f.debug_struct("Tape")
            .field("ops", &state.nodes.len())
            .field("tracked", &state.slots.len())
            .field("used", &state.used)
            .finish()
    }
}

impl Tape {
    /// An empty tape, not recording yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tracks `tensor` (a constant, say an input) so that gradients can be asked for it.
    pub fn watch(&self, tensor: &Tensor) {
        self.0.lock().slot(tensor, true);
    }

    /// True when this tape tracks `tensor` (a watched leaf, a used variable, or an op output).
    pub fn tracks(&self, tensor: &Tensor) -> bool {
        self.0.lock().ids.contains_key(&tensor.id())
    }

    /// Number of ops recorded and not yet run backwards.
    pub fn len(&self) -> usize {
        self.0.lock().nodes.len()
    }

    /// True when no op is recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the recorded ops saved for the backward pass, op by op (empty once gradients were
    /// computed: the pass released it all).
    pub fn saved(&self) -> SavedReport {
        let state = self.0.lock();
        SavedReport {
            ops: state
                .nodes
                .iter()
                .map(|node| OpSaved {
                    op: node.op,
                    arrays: node.saved.to_vec(),
                })
                .collect(),
        }
    }

    /// The gradients of `target` (seeded with ones) with respect to each of `sources`. A source
    /// the target does not depend on gets none ([`Gradients::get_or_zeros`] makes zeros). One
    /// call per tape: the pass releases what the tape saved.
    pub fn gradient(&self, target: &Tensor, sources: &[&Tensor]) -> Result<Gradients> {
        let seed = {
            let _tag = target.device().scoped_tag(Tag::GRADIENTS);
            Array::full(target.device(), target.shape().clone(), target.dtype(), 1.0)?
        };
        self.gradient_with(target, seed, sources)
    }

    /// As [`Tape::gradient`], with the target's gradient given (`seed`, of its shape and dtype):
    /// a weight, or a loss scale.
    pub fn gradient_with(
        &self,
        target: &Tensor,
        seed: Array,
        sources: &[&Tensor],
    ) -> Result<Gradients> {
        let ids: Vec<TensorId> = sources.iter().map(|s| s.id()).collect();
        let mut found = HashMap::new();
        self.gradient_each(target, seed, &ids, |index, grad| {
            found.insert(ids[index], grad);
            Ok::<_, Error>(())
        })?;
        Ok(Gradients::new(found))
    }

    /// The backward pass of [`Tape::gradient_with`], handing each source's gradient to
    /// `ready(its index in sources, gradient)` as soon as it is complete, that is once the
    /// earliest recorded op that read the source has run its backward rule, instead of keeping
    /// every gradient to the end. What `ready` does not keep is freed at once, so an optimizer
    /// that updates each parameter in `ready` holds a few gradients at a time instead of all
    /// of them. By then no rule still to run shares the source's array, so a parameter can be
    /// updated in place. Sources are given by identity: a caller that holds no other handle on
    /// a parameter leaves it to be the only one. An error of `ready` ends the pass, and is
    /// returned as it is.
    pub fn gradient_each<E: From<Error>>(
        &self,
        target: &Tensor,
        seed: Array,
        sources: &[TensorId],
        mut ready: impl FnMut(usize, Array) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        if seed.shape() != target.shape() || seed.dtype() != target.dtype() {
            return Err(E::from(Error::Argument {
                op: "gradient",
                detail: format!(
                    "the seed is {} of {}, the target {} of {}",
                    seed.shape(),
                    seed.dtype(),
                    target.shape(),
                    target.dtype()
                ),
            }));
        }
        let (nodes, slots, ids) = {
            let mut state = self.0.lock();
            if state.used {
                return Err(Error::TapeUsed.into());
            }
            state.used = true;
            (
                std::mem::take(&mut state.nodes),
                std::mem::take(&mut state.slots),
                std::mem::take(&mut state.ids),
            )
        };
        let target_slot = *ids.get(&target.id()).ok_or(Error::NotRecorded)?;
        let _tag = target.device().scoped_tag(Tag::GRADIENTS);
        let source_slots: Vec<Option<SlotId>> =
            sources.iter().map(|s| ids.get(s).copied()).collect();
        // A slot needs a gradient if it is a source or an op made it from one that does.
        let mut is_source = vec![false; slots.len()];
        for &slot in source_slots.iter().flatten() {
            is_source[slot] = true;
        }
        let mut needed = is_source.clone();
        // Which slots an op made (their gradients flow on to the op's inputs), and the earliest
        // op that read each slot: once its rule has run, nothing adds to the slot's gradient.
        let mut made = vec![false; slots.len()];
        let mut first_reader: Vec<Option<usize>> = vec![None; slots.len()];
        for (at, node) in nodes.iter().enumerate() {
            if node.inputs.iter().flatten().any(|&s| needed[s]) {
                for &out in &node.outputs {
                    needed[out] = true;
                }
            }
            for &out in &node.outputs {
                made[out] = true;
            }
            for &input in node.inputs.iter().flatten() {
                first_reader[input].get_or_insert(at);
            }
        }
        let order = backward_order(&nodes, &first_reader);
        // The sources complete after the rule of their reader that runs last, by its index.
        let mut position = vec![0; nodes.len()];
        for (pos, &at) in order.iter().enumerate() {
            position[at] = pos;
        }
        let mut last_reader: Vec<Option<usize>> = vec![None; slots.len()];
        for (at, node) in nodes.iter().enumerate() {
            for &input in node.inputs.iter().flatten() {
                let last = &mut last_reader[input];
                if last.is_none_or(|l| position[l] < position[at]) {
                    *last = Some(at);
                }
            }
        }
        let mut completes: HashMap<usize, Vec<usize>> = HashMap::new();
        let mut handed = vec![false; sources.len()];
        for (index, slot) in source_slots.iter().enumerate() {
            if let Some(at) = slot.and_then(|s| last_reader[s]) {
                completes.entry(at).or_default().push(index);
            }
        }
        let mut grads: Vec<Option<Array>> = Vec::new();
        grads.resize_with(slots.len(), || None);
        grads[target_slot] = Some(seed);
        let mut hand = |index: usize, grads: &mut [Option<Array>], handed: &mut [bool]| {
            let Some(slot) = source_slots[index] else {
                return Ok(());
            };
            handed[index] = true;
            // An op's rule still to run may need a made source's gradient; a leaf's is done.
            let grad = if made[slot] {
                grads[slot].clone()
            } else {
                grads[slot].take()
            };
            match grad {
                Some(grad) => ready(index, grad),
                None => Ok(()),
            }
        };
        let mut nodes: Vec<Option<Node>> = nodes.into_iter().map(Some).collect();
        for at in order {
            let Some(node) = nodes[at].take() else {
                continue;
            };
            let mut pass = Pass {
                slots: &slots,
                needed: &needed,
                is_source: &is_source,
                grads: &mut grads,
            };
            run_rule(&mut pass, node)?;
            for &index in completes.get(&at).into_iter().flatten() {
                hand(index, &mut grads, &mut handed)?;
            }
        }
        // Sources no op read: the target itself, if it is one.
        for index in 0..sources.len() {
            if !handed[index] {
                hand(index, &mut grads, &mut handed)?;
            }
        }
        Ok(())
    }

    fn state(&self) -> parking_lot::MutexGuard<'_, State> {
        self.0.lock()
    }
}

/// The order a backward pass runs the rules of `nodes` in: the reverse of the recording, but
/// for an eager rule, which runs right after the rule of its output's first reader (by the
/// recording; `first_reader` by slot), once nothing adds to its output's gradient any more. A
/// gathered weight's gradient is so reduce-scattered as soon as it is whole, not after the
/// rest of its block. An eager rule whose first reader is eager, or that nothing reads, keeps
/// its place.
fn backward_order(nodes: &[Node], first_reader: &[Option<usize>]) -> Vec<usize> {
    let mut after: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut moved = vec![false; nodes.len()];
    for (at, node) in nodes.iter().enumerate().filter(|(_, n)| n.eager) {
        let reader = node.outputs.iter().filter_map(|&o| first_reader[o]).min();
        if let Some(reader) = reader.filter(|&r| !nodes[r].eager) {
            after.entry(reader).or_default().push(at);
            moved[at] = true;
        }
    }
    let mut order = Vec::with_capacity(nodes.len());
    for at in (0..nodes.len()).rev().filter(|&at| !moved[at]) {
        order.push(at);
        order.extend(after.remove(&at).into_iter().flatten().rev());
    }
    order
}

/// What a backward pass knows of the tape's slots while it runs the rules.
struct Pass<'a> {
    /// What each slot's gradient must look like.
    slots: &'a [Slot],
    /// The slots that need a gradient.
    needed: &'a [bool],
    /// The slots asked for.
    is_source: &'a [bool],
    /// Each slot's gradient so far.
    grads: &'a mut [Option<Array>],
}

/// Runs one recorded op's backward rule when an input needs a gradient and a gradient reached
/// an output, adding what it gives into its inputs' gradients; otherwise drops the rule and
/// what it saved.
fn run_rule(pass: &mut Pass<'_>, node: Node) -> Result<()> {
    let Pass {
        slots,
        needed,
        is_source,
        grads,
    } = pass;
    let Node {
        op,
        inputs,
        outputs,
        backward,
        ..
    } = node;
    let needs: SmallVec<[bool; 4]> = inputs
        .iter()
        .map(|s| s.is_some_and(|s| needed[s]))
        .collect();
    if !needs.contains(&true) {
        return Ok(()); // dropping the node releases what it saved
    }
    // A source's gradient stays where it is; every other one is passed on and dropped.
    let mut upstream: SmallVec<[Option<Array>; 1]> = outputs
        .iter()
        .map(|&s| {
            if is_source[s] {
                grads[s].clone()
            } else {
                grads[s].take()
            }
        })
        .collect();
    let input_grads = match backward {
        Backward::One(rule) => match upstream.pop().flatten() {
            Some(g) => rule(g, &needs)?,
            None => return Ok(()),
        },
        Backward::Many(rule) => {
            if upstream.iter().all(Option::is_none) {
                return Ok(());
            }
            rule(&upstream, &needs)?
        }
    };
    drop(upstream);
    for (slot, grad) in inputs.iter().zip(input_grads) {
        let (Some(slot), Some(grad)) = (*slot, grad) else {
            continue;
        };
        if !needed[slot] {
            continue;
        }
        let want = &slots[slot];
        if grad.shape() != &want.shape || grad.dtype() != want.dtype {
            return Err(Error::Argument {
                op,
                detail: format!(
                    "the backward rule gave a gradient of {} {} for an input of {} {}",
                    grad.shape(),
                    grad.dtype(),
                    want.shape,
                    want.dtype
                ),
            });
        }
        grads[slot] = Some(match grads[slot].take() {
            None => grad,
            Some(previous) => sum_gradients(previous, grad)?,
        });
    }
    Ok(())
}

/// `a + b` for two gradients of one tensor (same shape and dtype), summed in place into
/// whichever of the two no other handle shares, as PyTorch's engine sums into a buffer it owns:
/// a tensor used several times then costs no memory beyond its gradients. Only when both are
/// shared (two inputs given one array, as `x + x` gives) is the sum a new array.
fn sum_gradients(mut a: Array, mut b: Array) -> Result<Array> {
    if !a.is_shared() {
        ew::add_into(&mut a, &b)?;
        Ok(a)
    } else if !b.is_shared() {
        // Float addition commutes: `b + a` is bit for bit `a + b`.
        ew::add_into(&mut b, &a)?;
        Ok(b)
    } else {
        Ok(ew::add(&a, &b)?)
    }
}

/// An op about to be recorded on the tape recording on this thread.
pub(crate) struct Recording {
    tape: Tape,
    inputs: SmallVec<[Option<SlotId>; 4]>,
    /// Whether the op's rule runs as soon as its output's gradient is complete.
    eager: bool,
}

impl Tape {
    /// Starts recording an op on `inputs` on this tape: `None` when the tape was used or tracks
    /// none of them (variables count as tracked), so that the op saves nothing.
    pub(crate) fn begin_op(self, inputs: &[&Tensor]) -> Option<Recording> {
        let slots: SmallVec<[Option<SlotId>; 4]> = {
            let mut state = self.state();
            if state.used {
                return None;
            }
            inputs.iter().map(|t| state.slot(t, false)).collect()
        };
        slots.iter().any(Option::is_some).then_some(Recording {
            tape: self,
            inputs: slots,
            eager: false,
        })
    }
}

impl Recording {
    /// The inputs `build` makes from those of the last recomputed segment recorded with its
    /// inputs in the host tier, if any, noted as the last such segment now.
    pub(crate) fn chain_offloaded(
        &self,
        build: impl FnOnce(Option<Weak<OffloadedInputs>>) -> Arc<OffloadedInputs>,
    ) -> Arc<OffloadedInputs> {
        let mut state = self.tape.state();
        let inputs = build(state.last_offloaded.take());
        state.last_offloaded = Some(Arc::downgrade(&inputs));
        inputs
    }

    /// True when input `i` is tracked (so the backward rule may need to produce its gradient).
    pub(crate) fn tracks(&self, i: usize) -> bool {
        self.inputs.get(i).is_some_and(Option::is_some)
    }

    /// Records the op: its outputs become tracked, and `backward` keeps what it saved, which
    /// `saved` accounts for ([`crate::saved::saves`] of the arrays it holds).
    pub(crate) fn finish(
        self,
        op: &'static str,
        outputs: &[&Tensor],
        saved: Saved,
        backward: Backward,
    ) {
        let mut state = self.tape.state();
        let outputs = outputs.iter().map(|t| state.push(t)).collect();
        state.nodes.push(Node {
            op,
            inputs: self.inputs,
            outputs,
            backward,
            saved,
            eager: self.eager,
        });
    }

    /// Makes the op's rule eager: it runs as soon as its output's gradient is complete instead
    /// of in the reverse order of the recording ([`backward_order`]).
    pub(crate) fn eager(mut self) -> Self {
        self.eager = true;
        self
    }
}
