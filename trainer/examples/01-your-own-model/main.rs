//! Train a model of your own with Headroom's trainer: a residual MLP (`model.rs` beside this
//! file: a `Module`, a `TrainableModel` and its `ModelFactory`) learns in which quadrant a
//! point lies, in batches of 1024 under a 16 MiB limit that one micro-batch of 1024 does not
//! fit, so the planner cuts each batch (or runs the blocks again, which the factory offers, if
//! that were faster); a callback reports each out-of-memory recovered:
//! `cargo run --release -p headroom-trainer --example 01-your-own-model`. Give a micro-batch
//! size that does not fit (`-- 1024`) to watch a step recover from running out of memory.

mod model;

use headroom_trainer::Trainer;
use headroom_trainer::callback::{Callback, Flow};
use headroom_trainer::data::Metric;
use headroom_trainer::step::Oom;
use model::{ResidualMlpFactory, quadrants};

/// Prints each out-of-memory the trainer recovered from.
struct ReportOoms;

impl Callback for ReportOoms {
    fn on_oom(&mut self, step: u64, oom: &Oom) -> Flow {
        let verdict = oom.report.verdict;
        println!(
            "step {step}: micro-batches of {} ran out of memory ({verdict:?})",
            oom.micro
        );
        Flow::Continue
    }
}

fn main() -> headroom_trainer::Result<()> {
    let micro: Option<usize> = std::env::args().nth(1).and_then(|a| a.parse().ok());
    let mut builder = Trainer::builder()
        .model(ResidualMlpFactory {
            width: 128,
            depth: 3,
            offer_recompute: true,
        })
        .data(quadrants(8192, 1), quadrants(1024, 2), Metric::Accuracy)
        .batch(1024)
        .steps(60)
        .lr(3e-3)
        .memory_limit("16MiB".parse()?)
        .run_dir(std::env::temp_dir().join("headroom-example-01"))
        .overwrite()
        .callback(ReportOoms);
    if let Some(micro) = micro {
        builder = builder.micro_batch(micro);
    }
    let mut trainer = builder.build()?;
    if let Some(plan) = trainer.plan() {
        println!("{plan}");
    }
    let summary = trainer.run(false)?;
    println!("{summary}");
    Ok(())
}
