//! Replaying traces through any [`TraceAllocator`]: timing, reserved memory, OOMs, fit search.

use std::time::Instant;

use headroom_alloc::trace::TraceOp;

use crate::peers::TraceAllocator;

/// A trace with its ids made dense, so the replay loop indexes a `Vec` instead of hashing.
#[derive(Debug, Clone)]
pub struct CompactTrace {
    ops: Vec<CompactOp>,
    slots: usize,
    allocs: usize,
}

#[derive(Debug, Clone, Copy)]
enum CompactOp {
    Alloc { slot: u32, size: u64 },
    Free { slot: u32 },
}

impl CompactTrace {
    /// Compacts a well-formed trace (every id allocated before it is freed).
    pub fn new(ops: &[TraceOp]) -> Self {
        let mut ids = std::collections::HashMap::new();
        let mut compact = Vec::with_capacity(ops.len());
        let mut allocs = 0;
        for op in ops {
            match *op {
                TraceOp::Alloc { id, size, .. } => {
                    let next = ids.len() as u32;
                    let slot = *ids.entry(id).or_insert(next);
                    compact.push(CompactOp::Alloc { slot, size });
                    allocs += 1;
                }
                TraceOp::Free { id } => {
                    if let Some(&slot) = ids.get(&id) {
                        compact.push(CompactOp::Free { slot });
                    }
                }
                // A request that failed when recorded held nothing.
                TraceOp::Oom { .. } => {}
            }
        }
        Self {
            ops: compact,
            slots: ids.len(),
            allocs,
        }
    }

    /// Allocations in the trace.
    pub fn allocs(&self) -> usize {
        self.allocs
    }
}

/// What one replay measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Replay {
    /// Nanoseconds spent in the replay loop.
    pub nanos: u128,
    /// Failed allocations.
    pub ooms: u64,
    /// Highest sum of requested bytes of live allocations (the same for every allocator when
    /// none fails).
    pub peak_live: u64,
    /// The allocator's peak reserved bytes.
    pub peak_reserved: u64,
}

/// Replays `trace` on `allocator` once.
pub fn replay<A: TraceAllocator>(trace: &CompactTrace, mut allocator: A) -> Replay {
    replay_on(trace, &mut allocator)
}

/// Replays `trace` on `allocator`, which may have served earlier replays.
fn replay_on<A: TraceAllocator>(trace: &CompactTrace, allocator: &mut A) -> Replay {
    let mut handles: Vec<Option<(A::Handle, u64)>> = vec![None; trace.slots];
    let (mut ooms, mut live, mut peak_live) = (0, 0u64, 0u64);
    let start = Instant::now();
    for op in &trace.ops {
        match *op {
            CompactOp::Alloc { slot, size } => match allocator.allocate(size) {
                Some(handle) => {
                    handles[slot as usize] = Some((handle, size));
                    live += size;
                    peak_live = peak_live.max(live);
                }
                None => ooms += 1,
            },
            CompactOp::Free { slot } => {
                if let Some((handle, size)) = handles[slot as usize].take() {
                    allocator.free(handle);
                    live -= size;
                }
            }
        }
    }
    let nanos = start.elapsed().as_nanos();
    // Whatever the trace left live (its failed frees aside) is freed, untimed.
    for (handle, _) in handles.into_iter().flatten() {
        allocator.free(handle);
    }
    Replay {
        nanos,
        ooms,
        peak_live,
        peak_reserved: allocator.peak_reserved(),
    }
}

/// An allocator that has replayed a trace once (cold) and can replay it again, warm.
pub struct Contender<'t> {
    /// The allocator's name.
    pub name: &'static str,
    /// OOMs and peaks of the cold replay.
    pub cold: Replay,
    /// Replays the trace once more and returns the nanoseconds it took.
    warm: Box<dyn FnMut() -> u128 + 't>,
}

impl Contender<'_> {
    /// Replays the trace once more, warm, and returns the nanoseconds it took.
    pub fn replay_warm(&mut self) -> u128 {
        (self.warm)()
    }
}

/// Replays `trace` on `allocator` once, cold, and keeps it for warm replays.
pub fn contender<'t, A: TraceAllocator + 't>(
    trace: &'t CompactTrace,
    mut allocator: A,
) -> Contender<'t> {
    let name = allocator.name();
    let cold = replay_on(trace, &mut allocator);
    Contender {
        name,
        cold,
        warm: Box::new(move || replay_on(trace, &mut allocator).nanos),
    }
}

/// Times `runs` warm replays of every contender, taking turns so that all of them see the same
/// machine noise (the steady state of a training loop). Returns each one's cold OOMs and peaks
/// with the median of its warm times.
pub fn race(contenders: &mut [Contender<'_>], runs: usize) -> Vec<Replay> {
    let mut times: Vec<Vec<u128>> = vec![Vec::with_capacity(runs); contenders.len()];
    for _ in 0..runs.max(1) {
        for (contender, times) in contenders.iter_mut().zip(&mut times) {
            times.push(contender.replay_warm());
        }
    }
    contenders
        .iter()
        .zip(times)
        .map(|(contender, mut times)| {
            times.sort_unstable();
            Replay {
                nanos: times[times.len() / 2],
                ..contender.cold
            }
        })
        .collect()
}

/// The largest scale in `1..=max_scale` such that the trace of every scale up to it replays with
/// no OOM (0 when scale 1 already fails).
pub fn max_fit_scale<A: TraceAllocator>(
    max_scale: u64,
    trace_at: impl Fn(u64) -> Vec<TraceOp>,
    make: impl Fn() -> A,
) -> u64 {
    let mut fit = 0;
    for scale in 1..=max_scale {
        let trace = CompactTrace::new(&trace_at(scale));
        if replay(&trace, make()).ooms > 0 {
            break;
        }
        fit = scale;
    }
    fit
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::{FirstFit, Headroom, OffsetAllocator};
    use headroom_alloc::trace::TransformerTrace;

    #[test]
    fn every_allocator_replays_a_roomy_trace_with_the_same_live_peak() {
        let trace = CompactTrace::new(&TransformerTrace::default().with_batch(2).generate());
        let capacity = 1 << 30;
        let results = [
            replay(&trace, Headroom::new(capacity)),
            replay(&trace, OffsetAllocator::new(capacity)),
            replay(&trace, FirstFit::new(capacity)),
        ];
        for result in &results {
            assert_eq!(result.ooms, 0);
            assert_eq!(result.peak_live, results[0].peak_live);
            assert!(result.peak_reserved >= result.peak_live);
        }
    }

    #[test]
    fn fit_search_stops_at_the_first_failing_scale() {
        let trace_at = |batch| TransformerTrace::default().with_batch(batch).generate();
        let fit = max_fit_scale(64, trace_at, || FirstFit::new(256 << 20));
        assert!((1..64).contains(&fit), "fit {fit}");
        let next = CompactTrace::new(&trace_at(fit + 1));
        assert!(replay(&next, FirstFit::new(256 << 20)).ooms > 0);
    }
}
