//! The shadow model: what must be true after each action.

use std::collections::{BTreeMap, VecDeque};

use super::action::Action;
use crate::allocator::Allocator;
use crate::error::{Error, InvalidFreeReason};
use crate::history::EventKind;
use crate::report::{OomCause, Verdict};
use crate::size::round_size;
use crate::tag::Tag;

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

/// What must be true: the live allocations, and addresses once freed.
#[derive(Default)]
pub(super) struct Shadow {
    /// Live allocations: address to (size, requested, tag).
    live: BTreeMap<u64, (u64, u64, Tag)>,
    /// Addresses freed and not handed out again.
    freed: Vec<u64>,
    /// The last [`RECENT_SIZES`] sizes successfully requested, oldest first.
    recent_sizes: VecDeque<u64>,
}

/// Sizes remembered for [`Action::AllocAgain`].
const RECENT_SIZES: usize = 16;

impl Shadow {
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
        let rounded = round_size(requested).ok_or("rounding overflowed")?;
        match alloc.allocate(requested, tag) {
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

    /// Checks the allocator's totals and every live allocation against the model.
    pub(super) fn check_totals(&self, alloc: &Allocator) -> Result<(), String> {
        let stats = alloc.stats();
        let in_use: u64 = self.live.values().map(|&(size, _, _)| size).sum();
        let requested: u64 = self.live.values().map(|&(_, r, _)| r).sum();
        if (stats.in_use, stats.requested_in_use) != (in_use, requested) {
            return Err(format!(
                "stats say {}/{} in use/requested, model {in_use}/{requested}",
                stats.in_use, stats.requested_in_use
            ));
        }
        for usage in &stats.tags {
            let model: u64 = self
                .live
                .values()
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
/// in time order, every allocation, free and OOM either kept or counted as dropped, and every OOM
/// kept.
pub(super) fn check_history(
    alloc: &Allocator,
    capacity: usize,
    summary: &RunSummary,
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
    if recorded < summary.allocs + summary.frees + summary.ooms {
        return Err(format!(
            "{recorded} events kept or dropped, fewer than the {} allocations, frees and OOMs",
            summary.allocs + summary.frees + summary.ooms
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
