//! The run's directory and everything a run writes there: where the directory is and how a
//! start claims and cleans it (`location.rs`), the checkpoint and the trainer's state in it,
//! what a resume may change, `metrics.jsonl` and TensorBoard's event files, the records and the
//! summary, the run's totals, and the plots and the other artifacts.

pub(crate) mod artifacts;
pub(crate) mod checkpoint;
pub(crate) mod event_file;
pub(crate) mod float_json;
pub(crate) mod location;
pub(crate) mod logs;
pub(crate) mod metrics;
#[cfg(feature = "plots")]
pub(crate) mod plots;
pub(crate) mod record;
pub(crate) mod resume;
pub(crate) mod tensorboard;
pub(crate) mod totals;

pub use checkpoint::{TrainerState, checkpoint_path};
pub use location::{CONFIG_FILE, LATEST, RUNS, Start, latest_trace, resolve};
pub use metrics::{METRICS_FILE, read_all};
#[cfg(feature = "plots")]
pub use plots::{loss_curve, memory_timeline};
pub use record::{OomRecord, RankPeak, StepRecord, Summary};
pub use totals::Totals;
