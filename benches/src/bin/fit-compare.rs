//! How much of GPT-2 small fits a training step with every memory technique of the trainer on
//! (memory-efficient attention, the fused head and loss, the tied head, cheap recomputation), on
//! the CPU, in f32 and under bf16 autocast: the peer of `benches/peers/torch_fit.py` (PyTorch as
//! nanoGPT writes it).
//!
//! For each precision it trains whole steps (forward, backward, AdamW) of GPT-2 small (12
//! layers, width 768, 12 heads, context 1024, vocabulary 50257, tied head) on uniform tokens:
//! - the peak bytes in use of a step at one and at two samples and at the micro-batch, from
//!   the allocator (weights, gradients, optimizer state and activations, every tag), beside the
//!   planner's prediction for the same step on the meta device;
//! - the activation bytes per sample: the peak's growth from one sample to two;
//! - samples per second at the micro-batch (`--micro-batch`, 4), the median of timed steps.
//!
//! Prints a table, then one JSON line per precision with the keys `model, precision,
//! micro_batch, peak_bytes, activation_bytes_per_sample, samples_per_s,
//! predicted_peak_bytes, predicted_exactly` (the peak and prediction at the micro-batch;
//! `predicted_exactly` when the planner's prediction was within one granule of the measured
//! peak at every size measured).

use std::time::Instant;

use headroom_trainer::config::{DataKind, PrecisionKind, Preset, Recompute, TrainConfig};
use headroom_trainer::{Result, Trainer};

/// Timed steps at the micro-batch after one untimed one.
const STEPS: usize = 2;

/// A run of GPT-2 small in `precision` with batches of `samples`, in a directory of its own.
fn config(precision: PrecisionKind, samples: usize) -> TrainConfig {
    let mut config = TrainConfig::over(Some(Preset::Gpt2));
    config.run_dir = Some(std::env::temp_dir().join(format!(
        "headroom-fit-{}-{}-{samples}",
        std::process::id(),
        precision.name()
    )));
    config.precision.dtype = precision;
    config.model.recompute = Recompute::Cheap;
    config.data.kind = DataKind::UniformTokens;
    config.data.train_size = 64;
    config.data.eval_size = 1;
    config.batch.size = samples;
    config.batch.micro = None;
    config.memory.capacity = "64GiB".into();
    config.memory.limit = Some("64GiB".into());
    config.memory.history = 0;
    config.memory.trace = false;
    config.eval_every = 0;
    config
}

/// The measured and the predicted peak of one step at `samples`, and the trainer, for more.
fn measured(precision: PrecisionKind, samples: usize) -> Result<(u64, u64, Trainer)> {
    let mut trainer = Trainer::overwrite(config(precision, samples))?;
    let predicted = trainer.plan().map_or(0, |p| p.predicted_peak);
    trainer.train_step()?;
    let peak = trainer.device().allocator().stats().peak_in_use;
    std::fs::remove_dir_all(trainer.run_dir()).ok();
    Ok((peak, predicted, trainer))
}

fn main() -> Result<()> {
    let micro = std::env::args()
        .skip_while(|a| a != "--micro-batch")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(4usize);
    println!(
        "{:<6} {:>6} {:>14} {:>14} {:>16} {:>10}",
        "prec", "micro", "peak", "predicted", "activation/smp", "samples/s"
    );
    let mut lines = Vec::new();
    for precision in [PrecisionKind::F32, PrecisionKind::Bf16] {
        let (one, one_predicted, _) = measured(precision, 1)?;
        let (two, two_predicted, _) = measured(precision, 2)?;
        let (peak, predicted, mut trainer) = measured(precision, micro)?;
        let exactly = [
            (one, one_predicted),
            (two, two_predicted),
            (peak, predicted),
        ]
        .iter()
        .all(|&(m, p)| m.abs_diff(p) <= headroom_alloc::GRANULE);
        let mut times = Vec::new();
        for _ in 0..STEPS {
            let started = Instant::now();
            trainer.train_step()?;
            times.push(started.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let samples_per_s = micro as f64 / times[times.len() / 2];
        let per_sample = two.saturating_sub(one);
        let name = precision.name();
        println!(
            "{name:<6} {micro:>6} {peak:>14} {predicted:>14} {per_sample:>16} {samples_per_s:>10.3}"
        );
        lines.push(format!(
            "{{\"model\":\"gpt2\",\"precision\":\"{name}\",\"micro_batch\":{micro},\"peak_bytes\":{peak},\"activation_bytes_per_sample\":{per_sample},\"samples_per_s\":{samples_per_s:.4},\"predicted_peak_bytes\":{predicted},\"predicted_exactly\":{exactly}}}"
        ));
    }
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
