//! Model-based testing: random action sequences checked against a shadow model.
//!
//! One [`Scenario`] (a configuration and a list of [`Action`]s, both `Arbitrary` with the
//! `arbitrary` feature) drives the proptest suite and the fuzz target alike. [`Scenario::run`]
//! applies each action to a real allocator and to a shadow model of what must be true, and fails
//! with a description of the first disagreement.

use std::collections::BTreeMap;

use crate::allocator::Allocator;
use crate::config::{AllocatorConfig, Growth};
use crate::error::{Error, InvalidFreeReason};
use crate::report::{OomCause, Verdict};
use crate::size::round_size;
use crate::source::{FaultInjecting, VirtualMemory};
use crate::tag::Tag;

/// One step of a scenario.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Action {
    /// Allocate `size << shift % 16` bytes (so sizes span bytes to gigabytes) under built-in
    /// tag `tag % 7`.
    Alloc {
        /// The size before shifting.
        size: u16,
        /// The shift.
        shift: u8,
        /// The tag index.
        tag: u8,
    },
    /// Free the live allocation at `index % live count`.
    Free {
        /// Which live allocation.
        index: u16,
    },
    /// Free an address that must be refused: inside a live allocation, a freed one, or outside.
    FreeInvalid {
        /// Which live or freed allocation to aim near.
        index: u16,
    },
    /// Give entirely free regions back.
    ReleaseCached,
    /// Restart peak statistics.
    ResetPeak,
}

/// A configuration and the actions to run on it.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Scenario {
    /// Limit in MiB is `limit_mib % 64 + 1`.
    pub limit_mib: u8,
    /// Growth policy: on demand, preallocate or expandable, by `growth % 3`.
    pub growth: u8,
    /// Turn off garbage collection.
    pub no_garbage_collection: bool,
    /// The internal-fragmentation cap is `1 << (frag_shift % 28 + 8)` bytes.
    pub frag_shift: u8,
    /// Make the source refuse its reserve number `fail_reserve` (0: never).
    pub fail_reserve: u8,
    /// The actions.
    pub actions: Vec<Action>,
}

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
}

impl Scenario {
    /// The growth policy `growth` selects.
    pub fn growth_policy(&self) -> Growth {
        [Growth::OnDemand, Growth::Preallocate, Growth::Expandable][usize::from(self.growth % 3)]
    }

    /// Runs every action on a real allocator and the shadow model; the error names the first
    /// disagreement.
    pub fn run(&self) -> Result<RunSummary, String> {
        let limit = (u64::from(self.limit_mib) % 64 + 1) << 20;
        let mut source = FaultInjecting::new(VirtualMemory::new(limit));
        if self.fail_reserve > 0 {
            source = source.fail_reserve_number(u64::from(self.fail_reserve));
        }
        let config = AllocatorConfig::default()
            .with_limit_bytes(limit)
            .with_growth(self.growth_policy())
            .with_garbage_collection(!self.no_garbage_collection)
            .with_max_internal_fragmentation(1 << (self.frag_shift % 28 + 8))
            .with_history(64);
        // A refused preallocation backs off to a smaller region, so construction always works.
        let mut alloc =
            Allocator::new(source, config).map_err(|err| format!("construction failed: {err}"))?;
        let mut model = Shadow::default();
        let mut summary = RunSummary::default();
        for (step, action) in self.actions.iter().enumerate() {
            let context = |message: String| format!("step {step} ({action:?}): {message}");
            model
                .apply(&mut alloc, action, &mut summary)
                .map_err(context)?;
            alloc.validate().map_err(|err| context(err.to_string()))?;
            model.check_totals(&alloc).map_err(context)?;
        }
        Ok(summary)
    }
}

/// What must be true: the live allocations, and addresses once freed.
#[derive(Default)]
struct Shadow {
    /// Live allocations: address to (size, requested, tag).
    live: BTreeMap<u64, (u64, u64, Tag)>,
    /// Addresses freed and not handed out again.
    freed: Vec<u64>,
}

impl Shadow {
    fn apply(
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

    fn check_totals(&self, alloc: &Allocator) -> Result<(), String> {
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
