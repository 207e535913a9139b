//! Model-based testing: random action sequences checked against a shadow model. Test tooling,
//! behind the `testing` feature.
//!
//! One [`Scenario`] (a whole allocator configuration, a source capacity and a list of
//! [`Action`]s, `Arbitrary` with the `arbitrary` feature) drives the proptest suite and the fuzz
//! target alike. [`Scenario::run`] first predicts whether the configuration can build an
//! allocator ([`Construction`]) and checks that it does exactly that; then it applies each action
//! to the real allocator and to a shadow model of what must be true, and fails with a description
//! of the first disagreement.

mod action;
mod clock;
mod construction;
#[cfg(feature = "arbitrary")]
mod draw;
mod shadow;

pub use action::Action;
pub use clock::ModelClock;
pub use construction::Construction;
pub use shadow::RunSummary;

use crate::allocator::Allocator;
use crate::bookkeeping::error::Error;
use crate::policy::config::AllocatorConfig;
use crate::policy::source::{FaultInjecting, VirtualMemory};
use shadow::{Shadow, check_history};

/// A source capacity, an allocator configuration and the actions to run on them.
///
/// With the `arbitrary` feature, drawing one picks every field of the configuration, edges
/// first (see the `draw` module): zero slack, a one-granule limit, a limit below one granule,
/// a byte limit above the capacity, fractions near 0 and 1 and invalid ones, each growth policy,
/// history rings of 0, 1, a few and many events, sources whose regions grow in place by steps
/// of 2 MiB, 4 KiB, one granule or odd sizes, or not at all.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Bytes the virtual memory source holds (what a fractional limit is a fraction of).
    pub capacity: u64,
    /// The allocator's whole configuration, which may be invalid for this capacity.
    pub config: AllocatorConfig,
    /// Make the source refuse its reserve number `fail_reserve` (0: never).
    pub fail_reserve: u8,
    /// The step the source's regions grow in place by, or `None` for a source whose regions
    /// cannot grow (so that on-demand growth reserves segments).
    pub growth_step: Option<u64>,
    /// Give the allocator a [`ModelClock`], so that [`Action::AllocOn`] uses several streams.
    pub streams: bool,
    /// The actions.
    pub actions: Vec<Action>,
}

impl Scenario {
    /// Constructs the allocator and checks the outcome against [`Construction::expect`]; when
    /// construction succeeds, runs every action on the allocator and the shadow model. A
    /// construction that fails as expected ends the run successfully. The error names the first
    /// disagreement.
    pub fn run(&self) -> Result<RunSummary, String> {
        let space = VirtualMemory::new(self.capacity);
        let space = match self.growth_step {
            Some(step) => space.with_growth_step(step),
            None => space.fixed_regions(),
        };
        let mut source = FaultInjecting::new(space);
        if self.fail_reserve > 0 {
            source = source.fail_reserve_number(u64::from(self.fail_reserve));
        }
        let expected = Construction::expect(self.capacity, &self.config, self.fail_reserve);
        let mut summary = RunSummary::default();
        let mut alloc = match (Allocator::new(source, self.config.clone()), expected) {
            (Ok(alloc), Construction::Builds { limit }) => {
                if alloc.limit() != limit || alloc.capacity() != self.capacity {
                    return Err(format!(
                        "built with limit {} over capacity {}, the model expected {limit} over {}",
                        alloc.limit(),
                        alloc.capacity(),
                        self.capacity
                    ));
                }
                alloc
            }
            (Err(Error::InvalidConfig(message)), Construction::InvalidConfig)
                if !message.is_empty() =>
            {
                summary.refused_construction = true;
                return Ok(summary);
            }
            (Err(Error::Source { op: "reserve", .. }), Construction::SourceRefuses) => {
                summary.refused_construction = true;
                return Ok(summary);
            }
            (built, expected) => {
                return Err(format!(
                    "construction gave {:?}, the model expected {expected:?}",
                    built.map(|alloc| alloc.limit())
                ));
            }
        };
        let clock = self.streams.then(ModelClock::default);
        if let Some(clock) = &clock {
            alloc
                .set_stream_clock(clock.clone())
                .map_err(|err| format!("the model clock was refused: {err}"))?;
        }
        let mut model = Shadow::new(clock);
        for (step, action) in self.actions.iter().enumerate() {
            let context = |message: String| format!("step {step} ({action:?}): {message}");
            model
                .apply(&mut alloc, action, &mut summary)
                .map_err(context)?;
            alloc.validate().map_err(|err| context(err.to_string()))?;
            model.check_totals(&alloc).map_err(context)?;
            summary.actions += 1;
        }
        check_history(
            &alloc,
            self.config.history_capacity,
            &summary,
            model.still_held(),
        )?;
        Ok(summary)
    }
}
