#![doc = include_str!("../README.md")]

// The table of contents: one folder per subsystem, each item at one public path. The folders
// are layers, in the order below: each uses only those before it (and the files at the end),
// never one after it.

// Data and text: datasets, batches, the loader, tokenizers and token shards.
pub mod data;
// Settings: a run's configuration as a file, presets, flags and the builder write it, each
// section checked beside its fields; the task its data section describes.
pub mod config;
// The model a run trains: the trait any model implements and Headroom's own models.
pub mod model;
// Data parallelism: ranks, collectives, what a step's peers agree on, buckets and sharded
// optimizer state.
pub mod data_parallel;
// The step: one optimizer step in micro-batches that adapt to memory, the update in the
// backward pass, mixed precision, the optimizer, and what holds the memory when a step cannot
// fit.
pub mod step;
// Planning: the memory budget, probes on the meta device, the planner and the memory
// policy, the rates steps are priced at, when the micro-batch may grow, and what would fit
// when nothing does.
pub mod planning;
// The run's directory and its files: checkpoints, metrics, records, the summary, plots and
// artifacts, and what a resume may change.
pub mod run_dir;
// Using a trained model: a saved run opened, evaluated, and generating text.
pub mod trained;
// The trainer: a run started, trained step by step, and finished.
pub mod thread_pool;
mod trainer;
pub use trainer::builder::TrainerBuilder;
pub use trainer::{Trainer, callback, interrupt};

// The crate's one error type, which every subsystem returns.
mod error;
pub use error::{Error, Result};

// Files replaced whole, which the run's files, shards, tokenizers and rates are written as.
mod atomic_file;

// The progress bar on the terminal, which a run's steps and `headroom prepare` show, and which
// the log's lines step around.
mod progress;
pub use progress::above_the_bar;
