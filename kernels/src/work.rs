//! What a meta device's kernels would compute and move, and how long a device of given rates
//! would take: the planner's prediction of a step's time.
//!
//! Each kernel is priced as a launch plus the longer of its arithmetic and its memory traffic
//! (a roofline): matrix products at the matrix rate (f32 or half precision) plus, for a CPU's
//! bf16 products, the operands they pack at the packing rate, everything else at the vector
//! rate, and the bytes every operand and result occupies at the memory bandwidth;
//! a copy between a device and its host tier at the transfer rate. The seconds fall on the
//! queues of a timeline shared with the device's host tier (kernels, copies, the host's own
//! work: beside each other on a GPU, in turn on a CPU), and a step takes until the last is
//! done.
//! The rates are fixed per kind of device ([`PlanTarget::rates`](crate::PlanTarget::rates)) so
//! that plans are the same on every machine; measured ones can replace them ([`Rates`] is
//! plain data).

use std::sync::Arc;

use parking_lot::Mutex;

use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::ops::gemm::kernels::GemmSpec;
use crate::timeline::{Lane, Timeline};

/// How fast a device computes and moves data, per second, and what a kernel launch costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    /// Floating-point operations of f32 (and f64) matrix products.
    pub matrix_flops: f64,
    /// Floating-point operations of bf16 and f16 matrix products.
    pub half_matrix_flops: f64,
    /// Pairs of bf16 values per second a CPU's bf16 products pack their operands into, beside
    /// their arithmetic (infinite where products read their operands as stored).
    pub packing: f64,
    /// Other floating-point operations (elementwise, reductions, normalizations).
    pub vector_flops: f64,
    /// Bytes read and written in memory.
    pub bytes: f64,
    /// Seconds a kernel costs beyond its work (launch, synchronization, a thread pool's fork).
    pub launch: f64,
    /// Bytes copied between the device and its host tier (over PCIe for a GPU's pinned host
    /// memory; between two pools of host memory for the CPU).
    pub transfer: f64,
    /// Bytes a rank's collectives send to the other ranks (and receive) per second: the link
    /// between GPUs (NVLink, PCIe, a network such as InfiniBand), or shared memory between the
    /// processes of one machine.
    pub link: f64,
}

impl Rates {
    /// Seconds that `kernel` takes at these rates.
    fn seconds(&self, kernel: &Kernel) -> f64 {
        let matrix = if kernel.half {
            self.half_matrix_flops
        } else {
            self.matrix_flops
        };
        let compute = kernel.matrix_flops / matrix
            + kernel.packed / self.packing
            + kernel.vector_flops / self.vector_flops;
        let moved = kernel.transferred / self.transfer + kernel.communicated / self.link;
        self.launch + compute.max(kernel.bytes / self.bytes) + moved
    }
}

/// What the kernels planned so far compute and move, and the time they take at the device's
/// rates.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Work {
    /// Kernels run.
    pub kernels: u64,
    /// Floating-point operations in matrix products.
    pub matrix_flops: f64,
    /// Pairs of bf16 values the CPU's bf16 products packed.
    pub packed: f64,
    /// Other floating-point operations.
    pub vector_flops: f64,
    /// Bytes read and written.
    pub bytes: f64,
    /// Bytes copied between the device and its host tier.
    pub transferred: f64,
    /// Bytes each rank's collectives send to the other ranks.
    pub communicated: f64,
    /// Predicted seconds, until the last of the device's queues is done: its kernels', its
    /// copies' and its host tier's, beside each other on a GPU, in turn on a CPU.
    pub seconds: f64,
}

/// One kernel's work.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Kernel {
    matrix_flops: f64,
    /// Its matrix product runs in half precision.
    half: bool,
    /// Pairs of bf16 values it packs its operands into.
    packed: f64,
    vector_flops: f64,
    bytes: f64,
    /// Bytes copied between a device and its host tier.
    transferred: f64,
    /// Bytes a collective sends to the other ranks.
    communicated: f64,
}

impl Kernel {
    /// A copy of `bytes` between a device and its host tier.
    pub fn transfer(bytes: usize) -> Self {
        Self {
            transferred: bytes as f64,
            ..Self::default()
        }
    }

    /// A collective that sends `bytes` to the other ranks, in turn with the kernels (the
    /// collectives wait for the kernels before them, and the kernels after wait for them).
    pub fn collective(bytes: f64) -> Self {
        Self {
            communicated: bytes,
            ..Self::default()
        }
    }

    /// A kernel that reads and writes `buffers` whole, with an operation or so per element of
    /// the largest: what elementwise ops, reductions, copies and optimizer updates do.
    pub fn moving(buffers: &[&Buffer]) -> Self {
        Self {
            vector_flops: buffers.iter().map(|b| b.len()).max().unwrap_or(0) as f64,
            bytes: buffers.iter().map(|b| b.bytes() as f64).sum(),
            ..Self::default()
        }
    }

    /// [`Kernel::moving`] with `flops` operations per element of the largest buffer instead of
    /// one (a normalization, a softmax, an exponential).
    pub fn moving_with(buffers: &[&Buffer], flops: f64) -> Self {
        let kernel = Self::moving(buffers);
        Self {
            vector_flops: kernel.vector_flops * flops,
            ..kernel
        }
    }

    /// `len` elements read as `from` and written as `to`.
    pub fn converting(len: usize, from: DType, to: DType) -> Self {
        Self {
            vector_flops: len as f64,
            bytes: (len * (from.size() + to.size())) as f64,
            ..Self::default()
        }
    }

    /// A matrix product of `spec` on operands of `dtype` whose operands and result are
    /// `buffers` (read once, the result written once, and read too when accumulated into).
    pub fn product(spec: &GemmSpec, dtype: DType, buffers: &[&Buffer]) -> Self {
        Self {
            matrix_flops: spec.flops(),
            half: matches!(dtype, DType::BF16 | DType::F16),
            ..Self::moving(buffers)
        }
    }

    /// This kernel, packing `pairs` pairs of bf16 values besides (a CPU's bf16 product).
    pub fn packing(self, pairs: usize) -> Self {
        Self {
            packed: pairs as f64,
            ..self
        }
    }

    /// Attention over `heads` heads of `head` features, each computing `scores` scores (what its
    /// mask keeps, [`AttentionSpec::scores_per_head`]), in `passes` matrix products of the
    /// scores' size (two forward, five backward, the scores recomputed), reading and writing
    /// `buffers`.
    ///
    /// [`AttentionSpec::scores_per_head`]: crate::ops::attention::AttentionSpec::scores_per_head
    pub fn attention(
        (heads, head): (usize, usize),
        scores: f64,
        passes: f64,
        dtype: DType,
        buffers: &[&Buffer],
    ) -> Self {
        let scores = heads as f64 * scores;
        Self {
            matrix_flops: passes * 2.0 * scores * head as f64,
            half: matches!(dtype, DType::BF16 | DType::F16),
            vector_flops: 4.0 * scores,
            ..Self::moving(buffers)
        }
    }
}

/// The running account of a meta device's kernels, priced at its rates, and when they would be
/// done ([`Timeline`]).
#[derive(Debug)]
pub(crate) struct WorkLog {
    rates: Rates,
    /// The sums so far (their `seconds` stay 0, the timeline's clocks being the step's time),
    /// and the kernels recorded since [`WorkLog::capture`] while it captures.
    work: Mutex<(Work, Option<Vec<Kernel>>)>,
    /// The queues' clocks, shared with the device's planned host tier.
    timeline: Arc<Timeline>,
    /// The queue this device's kernels run on.
    lane: Lane,
}

impl WorkLog {
    /// An empty account priced at `rates`, its kernels on `timeline`'s `lane`.
    pub fn new(rates: Rates, timeline: Arc<Timeline>, lane: Lane) -> Arc<Self> {
        Arc::new(Self {
            rates,
            work: Mutex::new((Work::default(), None)),
            timeline,
            lane,
        })
    }

    /// Adds `kernel`, queued on this device's lane (a copy on the copy queue); returns when it
    /// is done.
    pub fn record(&self, kernel: Kernel) -> f64 {
        let seconds = self.rates.seconds(&kernel);
        {
            let (work, captured) = &mut *self.work.lock();
            work.kernels += 1;
            work.matrix_flops += kernel.matrix_flops;
            work.packed += kernel.packed;
            work.vector_flops += kernel.vector_flops;
            work.bytes += kernel.bytes;
            work.transferred += kernel.transferred;
            work.communicated += kernel.communicated;
            if let Some(captured) = captured {
                captured.push(kernel);
            }
        }
        match kernel.transferred > 0.0 {
            true => self.timeline.copy(seconds),
            false => self.timeline.run(self.lane, seconds),
        }
    }

    /// Records `kernels`, in order, `times` over: at once where none is a copy (the kernels'
    /// queue then only adds up their seconds), else one by one.
    pub fn replay(&self, kernels: &[Kernel], times: usize) {
        if times == 0 || kernels.is_empty() {
            return;
        }
        if kernels.iter().any(|k| k.transferred > 0.0) {
            for _ in 0..times {
                kernels.iter().for_each(|&k| _ = self.record(k));
            }
            return;
        }
        let n = times as f64;
        let seconds: f64 = kernels.iter().map(|k| self.rates.seconds(k)).sum();
        {
            let (work, _) = &mut *self.work.lock();
            work.kernels += (kernels.len() * times) as u64;
            for k in kernels {
                work.matrix_flops += n * k.matrix_flops;
                work.packed += n * k.packed;
                work.vector_flops += n * k.vector_flops;
                work.bytes += n * k.bytes;
                work.communicated += n * k.communicated;
            }
        }
        self.timeline.run(self.lane, n * seconds);
    }

    /// Keeps every kernel recorded from now on, until [`WorkLog::captured`].
    pub fn capture(&self) {
        self.work.lock().1 = Some(Vec::new());
    }

    /// The kernels recorded since [`WorkLog::capture`], in order; capturing stops.
    pub fn captured(&self) -> Vec<Kernel> {
        self.work.lock().1.take().unwrap_or_default()
    }

    /// The queue this device's kernels run on.
    pub fn lane(&self) -> Lane {
        self.lane
    }

    /// The queues' clocks.
    pub fn timeline(&self) -> &Arc<Timeline> {
        &self.timeline
    }

    /// The account so far, its seconds until the last queue is done.
    pub fn work(&self) -> Work {
        Work {
            seconds: self.timeline.done(),
            ..self.work.lock().0
        }
    }
}
