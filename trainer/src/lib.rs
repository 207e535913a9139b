#![doc = include_str!("../README.md")]

pub mod config;
pub mod data;
pub mod device;
mod diagnosis;
mod error;
mod eval;
mod micro;
mod model;
mod optim;
mod planner;
mod plots;
mod precision;
mod record;
mod state;
mod step;
mod trainer;

pub use diagnosis::diagnose;
pub use error::{Error, Result};
pub use eval::evaluate;
pub use micro::{Change, MicroBatcher, SizeChange};
pub use model::TrainModel;
pub use planner::{Plan, Probe, device_config, plan};
pub use plots::{loss_curve, memory_timeline};
pub use precision::{LossScaler, ScaleChange};
pub use record::{StepRecord, Summary, TagBytes, read_all};
pub use state::{TrainerState, checkpoint_path};
pub use step::{Oom, Phase, StepReport};
pub use trainer::Trainer;
