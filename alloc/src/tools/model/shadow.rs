//! The shadow model: what must be true after each action.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::action::Action;
use super::clock::ModelClock;
use crate::allocator::Allocator;
use crate::bookkeeping::error::{Error, InvalidFreeReason};
use crate::bookkeeping::history::EventKind;
use crate::bookkeeping::report::{OomCause, Verdict};
use crate::bookkeeping::size::round_size;
use crate::bookkeeping::tag::Tag;
use crate::policy::stream::StreamId;

/// What a successful run saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Allocations that succeeded.
    pub allocs: u64,
    /// Allocations that failed with an OOM.
    pub ooms: u64,
    /// Frees that succeeded.
    pub frees: u64,
    /// Invalid frees that were refused.
    pub refused_frees: u64,
    /// Actions applied to an allocator (none when construction failed).
    pub actions: u64,
    /// Construction failed, as the model expected for this configuration.
    pub refused_construction: bool,
}

/// A block the scenario freed on a stream whose work may still use it.
#[derive(Debug, Clone, Copy)]
struct Held {
    size: u64,
    requested: u64,
    tag: Tag,
    stream: StreamId,
    /// Items of work queued on `stream` when it was freed: it is safe for other streams once
    /// they have run.
    work: u64,
    /// The allocator no longer holds it (it went back to the heap); kept while its work has not
    /// run, so that no other stream may get it before.
    released: bool,
}

/// What must be true: the live allocations, and addresses once freed.
#[derive(Default)]
pub(super) struct Shadow {
    /// The scenario's stream clock, when it has one.
    clock: Option<ModelClock>,
    /// Live allocations: address to (size, requested, tag).
    live: BTreeMap<u64, (u64, u64, Tag)>,
    /// The stream of each live allocation not on the default stream.
    streams: HashMap<u64, StreamId>,
    /// Blocks freed and maybe still held by the allocator for their stream's work, by address.
    held: BTreeMap<u64, Held>,
    /// Addresses freed and not handed out again.
    freed: Vec<u64>,
    /// The last [`RECENT_SIZES`] sizes successfully requested, oldest first.
    recent_sizes: VecDeque<u64>,
}

/// Sizes remembered for [`Action::AllocAgain`].
const RECENT_SIZES: usize = 16;

/// The streams of [`Action::AllocOn`] and [`Action::RunStream`].
const STREAMS: u8 = 3;

impl Shadow {
    /// A model of an allocator whose stream clock is `clock`, if any.
    pub(super) fn new(clock: Option<ModelClock>) -> Self {
        Self {
            clock,
            ..Self::default()
        }
    }

    /// Applies `action` to `alloc` and checks what it returned against the model.
    pub(super) fn apply(
        &mut self,
        alloc: &mut Allocator,
        action: &Action,
        summary: &mut RunSummary,
    ) -> Result<(), String> {
        match *action {
            Action::Alloc { size, shift, tag } => {
                let requested = u64::from(size) << (shift % 16);
                let tag = Tag::BUILTIN[usize::from(tag) % Tag::BUILTIN.len()];
                self.allocate(alloc, requested, tag, summary)
            }
            Action::AllocOn {
                size,
                shift,
                tag,
                stream,
            } => {
                let requested = u64::from(size) << (shift % 16);
                let tag = Tag::BUILTIN[usize::from(tag) % Tag::BUILTIN.len()];
                let stream = match self.clock {
                    Some(_) => StreamId(u32::from(stream % STREAMS)),
                    None => StreamId::DEFAULT,
                };
                self.allocate_on(alloc, requested, tag, stream, summary)
            }
            Action::RunStream { stream } => {
                if let Some(clock) = &self.clock {
                    clock.run(StreamId(u32::from(stream % STREAMS)));
                }
                Ok(())
            }
            Action::AllocAgain { index, tag } => {
                let Some(&requested) = self
                    .recent_sizes
                    .get(usize::from(index) % self.recent_sizes.len().max(1))
                else {
                    return Ok(());
                };
                let tag = Tag::BUILTIN[usize::from(tag) % Tag::BUILTIN.len()];
                self.allocate(alloc, requested, tag, summary)
            }
            Action::Free { index } => {
                let Some(addr) = self.pick_live(index) else {
                    return Ok(());
                };
                let freed = alloc
                    .free(addr)
                    .map_err(|err| format!("free failed: {err}"))?;
                let (size, requested, tag) = self.live.remove(&addr).unwrap_or_default();
                if (freed.size, freed.requested, freed.tag) != (size, requested, tag) {
                    return Err(format!(
                        "free returned {freed:?}, model had {size}/{requested}"
                    ));
                }
                let stream = self.streams.remove(&addr).unwrap_or(StreamId::DEFAULT);
                if let Some(clock) = &self.clock {
                    let work = clock.queued(stream);
                    let held = Held {
                        size,
                        requested,
                        tag,
                        stream,
                        work,
                        released: false,
                    };
                    self.held.insert(addr, held);
                }
                self.freed.push(addr);
                summary.frees += 1;
                Ok(())
            }
            Action::FreeInvalid { index } => self.free_invalid(alloc, index, summary),
            Action::ReleaseCached => {
                let before = alloc.reserved();
                let released = alloc.release_cached();
                if alloc.reserved() != before - released {
                    return Err("release_cached miscounted".into());
                }
                Ok(())
            }
            Action::ResetPeak => {
                alloc.reset_peak();
                let stats = alloc.stats();
                if stats.peak_in_use != stats.in_use || stats.peak_reserved != stats.reserved {
                    return Err("reset_peak left a peak above its value".into());
                }
                Ok(())
            }
        }
    }

    fn allocate(
        &mut self,
        alloc: &mut Allocator,
        requested: u64,
        tag: Tag,
        summary: &mut RunSummary,
    ) -> Result<(), String> {
        self.allocate_on(alloc, requested, tag, StreamId::DEFAULT, summary)
    }

    /// Checks that a block handed to `stream` at `addr`+`size` overlaps no block freed on
    /// another stream whose work before the free has not run, and forgets the held blocks it
    /// overlaps (the allocator gave them back, or to their own stream again).
    fn take_held(&mut self, addr: u64, size: u64, stream: StreamId) -> Result<(), String> {
        let first = self
            .held
            .range(..addr)
            .next_back()
            .filter(|&(&start, held)| start + held.size > addr)
            .map_or(addr, |(&start, _)| start);
        let overlapped: Vec<(u64, Held)> = self
            .held
            .range(first..addr + size)
            .map(|(&start, &held)| (start, held))
            .collect();
        for (start, held) in overlapped {
            let done = self
                .clock
                .as_ref()
                .is_none_or(|clock| clock.has_run(held.stream, held.work));
            if held.stream != stream && !done {
                return Err(format!(
                    "{addr:#x}+{size} for stream {} overlaps {start:#x}+{}, freed on stream {} \
                     whose work on it has not run",
                    stream.0, held.size, held.stream.0
                ));
            }
            self.held.remove(&start);
        }
        Ok(())
    }

    fn allocate_on(
        &mut self,
        alloc: &mut Allocator,
        requested: u64,
        tag: Tag,
        stream: StreamId,
        summary: &mut RunSummary,
    ) -> Result<(), String> {
        let rounded = round_size(requested).ok_or("rounding overflowed")?;
        match alloc.allocate_on(requested, tag, stream) {
            Ok(a) => {
                if a.addr % 256 != 0 || a.size < rounded || a.requested != requested {
                    return Err(format!("bad allocation {a:?} for {requested}"));
                }
                let below = self.live.range(..a.addr + a.size).next_back();
                if let Some((&addr, &(size, _, _))) = below
                    && addr + size > a.addr
                {
                    return Err(format!("{a:?} overlaps live {addr:#x}+{size}"));
                }
                self.take_held(a.addr, a.size, stream)?;
                if stream != StreamId::DEFAULT {
                    self.streams.insert(a.addr, stream);
                }
                if let Some(clock) = &self.clock {
                    clock.queue(stream);
                }
                self.live.insert(a.addr, (a.size, requested, tag));
                self.freed.retain(|&addr| addr != a.addr);
                if self.recent_sizes.len() == RECENT_SIZES {
                    self.recent_sizes.pop_front();
                }
                self.recent_sizes.push_back(requested);
                summary.allocs += 1;
                Ok(())
            }
            Err(Error::OutOfMemory(report)) => {
                summary.ooms += 1;
                let packed: u64 = self
                    .live
                    .values()
                    .map(|&(_, requested, _)| round_size(requested).unwrap_or(u64::MAX))
                    .sum();
                let packed_room = alloc.limit() - packed;
                if report.cause != OomCause::ExceedsLimit && report.largest_free >= rounded {
                    return Err(format!(
                        "OOM although a {} block was free",
                        report.largest_free
                    ));
                }
                if report.available_if_packed > packed_room {
                    return Err(format!(
                        "claims {} available if packed, at most {packed_room} is",
                        report.available_if_packed
                    ));
                }
                let capacity = rounded > report.available_if_packed;
                if capacity != (report.verdict == Verdict::Capacity) {
                    return Err(format!("verdict {:?} for {rounded} bytes", report.verdict));
                }
                if report.to_string().is_empty() {
                    return Err("empty OOM report".into());
                }
                Ok(())
            }
            Err(err) => Err(format!("allocation failed with a non-OOM error: {err}")),
        }
    }

    fn free_invalid(
        &mut self,
        alloc: &mut Allocator,
        index: u16,
        summary: &mut RunSummary,
    ) -> Result<(), String> {
        let interior = self
            .pick_live(index)
            .and_then(|addr| (self.live[&addr].0 > 256).then_some(addr + 256));
        let stale = self
            .freed
            .get(usize::from(index) % self.freed.len().max(1))
            .copied();
        let (addr, expected): (u64, &[InvalidFreeReason]) = match (index % 3, interior, stale) {
            (0, Some(addr), _) => (addr, &[InvalidFreeReason::InteriorAddress]),
            (1, _, Some(addr)) => (
                addr,
                &[
                    InvalidFreeReason::DoubleFree,
                    InvalidFreeReason::InteriorAddress,
                    InvalidFreeReason::UnknownAddress,
                ],
            ),
            _ => (256, &[InvalidFreeReason::UnknownAddress]),
        };
        let before = alloc.stats();
        match alloc.free(addr) {
            Err(Error::InvalidFree { reason, .. }) if expected.contains(&reason) => {
                summary.refused_frees += 1;
                let after = alloc.stats();
                if (after.in_use, after.frees) != (before.in_use, before.frees) {
                    return Err("a refused free changed the allocator".into());
                }
                Ok(())
            }
            other => Err(format!(
                "free of {addr:#x} gave {other:?}, wanted {expected:?}"
            )),
        }
    }

    fn pick_live(&self, index: u16) -> Option<u64> {
        let n = self.live.len();
        (n > 0).then(|| *self.live.keys().nth(usize::from(index) % n).unwrap_or(&0))
    }

    /// Blocks freed that the allocator still holds for their streams, as of the last
    /// [`check_totals`](Self::check_totals).
    pub(super) fn still_held(&self) -> u64 {
        self.held.values().filter(|held| !held.released).count() as u64
    }

    /// Checks the allocator's totals and every live allocation against the model: blocks it
    /// still holds for their streams count as in use, under their tags.
    pub(super) fn check_totals(&mut self, alloc: &Allocator) -> Result<(), String> {
        let stats = alloc.stats();
        // A held block the allocator no longer reads back as live went back to its heap; the
        // model forgets it once its stream's work has run too.
        for (&addr, held) in &mut self.held {
            let reads_back = alloc
                .allocation(addr)
                .map(|found| (found.size, found.requested));
            held.released |= reads_back != Some((held.size, held.requested));
        }
        let clock = self.clock.as_ref();
        self.held.retain(|_, held| {
            !held.released || clock.is_some_and(|clock| !clock.has_run(held.stream, held.work))
        });
        let still_held = self.held.values().filter(|held| !held.released);
        let still_held: Vec<(u64, u64, Tag)> = still_held
            .map(|held| (held.size, held.requested, held.tag))
            .collect();
        let held: u64 = still_held.iter().map(|&(size, _, _)| size).sum();
        let counted: Vec<(u64, u64, Tag)> = self.live.values().copied().chain(still_held).collect();
        if stats.held_for_streams != held {
            return Err(format!(
                "stats say {} bytes wait for streams, model {held}",
                stats.held_for_streams
            ));
        }
        let in_use: u64 = counted.iter().map(|&(size, _, _)| size).sum();
        let requested: u64 = counted.iter().map(|&(_, r, _)| r).sum();
        if (stats.in_use, stats.requested_in_use) != (in_use, requested) {
            return Err(format!(
                "stats say {}/{} in use/requested, model {in_use}/{requested}",
                stats.in_use, stats.requested_in_use
            ));
        }
        for usage in &stats.tags {
            let model: u64 = counted
                .iter()
                .filter(|&&(_, _, tag)| tag == usage.tag)
                .map(|&(size, _, _)| size)
                .sum();
            if usage.live != model {
                return Err(format!(
                    "tag {} holds {}, model {model}",
                    usage.tag, usage.live
                ));
            }
        }
        if stats.reserved > stats.limit || stats.largest_free > stats.free {
            return Err(format!("inconsistent stats {stats:?}"));
        }
        for (&addr, &(size, requested, tag)) in &self.live {
            let found = alloc.allocation(addr);
            if found.map(|a| (a.size, a.requested, a.tag)) != Some((size, requested, tag)) {
                return Err(format!("allocation at {addr:#x} reads back as {found:?}"));
            }
        }
        Ok(())
    }
}

/// Checks the history recorder at the end of a run: on exactly when its capacity is positive,
/// in time order, every allocation, free and OOM either kept or counted as dropped (a free is
/// recorded when the block goes back to the heap, so not for the `still_held` blocks that wait
/// for their streams), and every OOM kept.
pub(super) fn check_history(
    alloc: &Allocator,
    capacity: usize,
    summary: &RunSummary,
    still_held: u64,
) -> Result<(), String> {
    let Some(history) = alloc.history() else {
        return match capacity {
            0 => Ok(()),
            _ => Err(format!("no history although its capacity is {capacity}")),
        };
    };
    if capacity == 0 {
        return Err("a history although its capacity is 0".into());
    }
    let events: Vec<_> = history.events().collect();
    if events
        .windows(2)
        .any(|pair| pair[0].time_ns > pair[1].time_ns)
    {
        return Err("history events out of time order".into());
    }
    let ooms = events.iter().filter(|e| e.kind == EventKind::Oom).count() as u64;
    if ooms != summary.ooms {
        return Err(format!(
            "the history keeps {ooms} OOMs of the {} that happened",
            summary.ooms
        ));
    }
    if events.len() as u64 > capacity as u64 + ooms {
        return Err(format!(
            "the history keeps {} events, more than its capacity {capacity} and {ooms} OOMs",
            events.len()
        ));
    }
    let recorded = events.len() as u64 + history.dropped();
    let expected = summary.allocs + summary.frees - still_held + summary.ooms;
    if recorded < expected {
        return Err(format!(
            "{recorded} events kept or dropped, fewer than the {expected} allocations, frees and \
             OOMs"
        ));
    }
    match (history.dropped(), history.dropped_until_ns()) {
        (0, None) => Ok(()),
        (0, Some(until)) => Err(format!("nothing dropped, yet dropped until {until} ns")),
        (dropped, None) => Err(format!("{dropped} dropped without a time")),
        (_, Some(until)) => match events.iter().find(|e| e.kind != EventKind::Oom) {
            Some(kept) if kept.time_ns < until => Err(format!(
                "kept event at {} ns is older than a dropped one at {until} ns",
                kept.time_ns
            )),
            _ => Ok(()),
        },
    }
}
