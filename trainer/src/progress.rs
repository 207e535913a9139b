//! What the terminal shows while a run trains: a bar over the steps with the last step's loss,
//! throughput, micro-batch size and memory.

use headroom_alloc::format_bytes;
use indicatif::{ProgressBar, ProgressStyle};

use crate::record::StepRecord;

/// A bar over `total` steps, `done` of them done; hidden unless `shown`.
pub fn bar(shown: bool, total: u64, done: u64) -> ProgressBar {
    let bar = if shown {
        ProgressBar::new(total)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:28}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_position(done);
    bar
}

/// Moves `bar` to `record`'s step, with its figures and the next step's micro-batch size.
pub fn show(bar: &ProgressBar, record: &StepRecord, micro: usize) {
    bar.set_position(record.step);
    bar.set_message(format!(
        "loss {:.4} | {:.0} tok/s | micro {micro} | mem {} (peak {}) of {}",
        record.loss,
        record.tokens_per_s,
        format_bytes(record.in_use),
        format_bytes(record.peak),
        format_bytes(record.limit),
    ));
}
