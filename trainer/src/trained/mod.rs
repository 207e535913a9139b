//! Using a trained model: a run's checkpoint opened for use ([`SavedRun`]), judged on held-out
//! data by its task's metric ([`evaluate_run`]; [`evaluate`] is the metric itself, which the
//! trainer also evaluates as it trains), and text generated from it ([`generate`]).

pub(crate) mod eval;
pub(crate) mod eval_run;
pub(crate) mod generate;
pub(crate) mod gguf_identity;
pub(crate) mod identity;
pub(crate) mod saved_run;

pub use eval::evaluate;
pub use eval_run::{EvalData, EvalReport, evaluate_run};
pub use generate::{GenerateOptions, Generated, Stop, checked_prompt, generate, prompt_ids};
pub use gguf_identity::gguf_identity;
pub use identity::{carry_companions, identity_sources, special_tokens};
pub use saved_run::{SavedRun, UseSettings, pretrained_model};
