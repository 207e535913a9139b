//! The model a run trains. The rule: `trainable.rs` is what any model gives the trainer (the
//! [`TrainableModel`] trait and the [`ModelFactory`] that builds one on any device, the
//! planner's meta devices included); `builtin.rs` is Headroom's own models behind that trait,
//! a GPT or an MLP as the configuration's `[model]` describes ([`BuiltinModel`]).

pub(crate) mod builtin;
pub(crate) mod trainable;

pub use builtin::{BuiltinModel, TrainModel};
pub use trainable::{Knobs, ModelFactory, ModelSettings, Offloads, TrainableModel};
