//! Planning: what a step will hold and take, known before it runs. The run's memory budget
//! and the device it opens ([`run_device`]); probes of one step on the meta device; the
//! planner's search for the largest micro-batch size, and under the memory policy for the
//! fastest memory techniques, that fit; the rates it prices steps at; the bytes per op and per
//! tag it reports; the fused head's chunk; the host tier offloaded activations wait in; the
//! probe that lets a run's micro-batch grow (`micro_growth.rs`); and what to tell a user when
//! nothing fits: the step's diagnosis of what holds the memory ([`crate::step::diagnose`]),
//! followed by the changes planned that fit (`remedies.rs`).
//!
//! The planner's answer is a [`Plan`]; [`plan`] finds it (`search.rs`). What `headroom plan`
//! prints around it is a [`PlanAdvice`] (`advice.rs`).

pub(crate) mod advice;
pub(crate) mod budget;
pub(crate) mod choice;
pub mod half_on_cpu;
pub mod head_chunk;
pub(crate) mod micro_growth;
pub mod offloads;
pub(crate) mod op_bytes;
pub(crate) mod plan;
pub mod policy;
pub(crate) mod probe;
pub(crate) mod rates;
pub(crate) mod remedies;
pub mod run_device;
pub(crate) mod search;
pub(crate) mod side_by_side;
pub(crate) mod tag_bytes;

pub use advice::PlanAdvice;
pub use budget::{Budget, UNLIMITED};
pub use choice::Choice;
pub use op_bytes::OpBytes;
pub use plan::{ChunkProbe, Plan, Probe};
pub use rates::{Calibrated, PlanRates, calibrate, rates};
pub use remedies::{advise, lighter_recomputations};
pub use search::{fullest_rank, plan};
pub use tag_bytes::TagBytes;
