//! A whole run: the steps to the end, each recorded in `metrics.jsonl`, the held-out metric
//! evaluated and a checkpoint written on schedule; then the last checkpoint, the plots, the
//! allocator's trace and the summary of the whole run.
//!
//! A run whose loss stays NaN or infinite for `max_nonfinite_steps` steps in a row stops there
//! with [`Error::Diverged`], after writing every artifact but the checkpoint (the last one
//! written holds the weights before the divergence). A run that fails otherwise writes what
//! artifacts it can before returning its error.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use super::Trainer;
use crate::atomic_file::write_atomically;
use crate::error::{Error, Result};
use crate::metrics::{MetricsLog, read_all};
use crate::record::Summary;

impl Trainer {
    /// Trains to the end: every step recorded in `metrics.jsonl`, the metric evaluated and a
    /// checkpoint written on schedule and at the end, then the plots, the allocator's trace
    /// and the summary of the whole run (over every process that worked on it).
    pub fn run(&mut self, progress: bool) -> Result<Summary> {
        let config_path = self.run_dir.join("config.toml");
        write_atomically(&config_path, self.config.to_toml().as_bytes())?;
        let mut metrics = match self.resumed_from {
            Some(step) => MetricsLog::resume(&self.run_dir, step)?,
            None => MetricsLog::create(&self.run_dir)?,
        };
        let bar = progress_bar(progress, self.total_steps, self.step);
        let outcome = self.train_to_end(&mut metrics, &bar);
        bar.finish_and_clear();
        match outcome {
            Ok(None) => {
                let started = Instant::now();
                self.metric = self.evaluate()?;
                self.totals.seconds += started.elapsed().as_secs_f64();
                self.checkpoint_unless_nonfinite()?;
                self.write_artifacts(None)
            }
            Ok(Some(step)) => {
                self.write_artifacts(Some(step))?;
                Err(Error::Diverged {
                    step,
                    steps: self.config.max_nonfinite_steps,
                    run_dir: self.run_dir.clone(),
                })
            }
            Err(err) => {
                if let Err(also) = self.write_artifacts(None) {
                    tracing::warn!("the run's artifacts could not all be written: {also}");
                }
                Err(err)
            }
        }
    }

    /// The steps up to the last, or up to the step at which the loss has not been finite for
    /// too long (returned).
    fn train_to_end(&mut self, metrics: &mut MetricsLog, bar: &ProgressBar) -> Result<Option<u64>> {
        while self.step < self.total_steps {
            self.train_step()?;
            let metric = if self.config.eval_every > 0
                && self.step.is_multiple_of(self.config.eval_every)
                && self.step < self.total_steps
            {
                let started = Instant::now();
                let metric = self.evaluate()?;
                self.totals.seconds += started.elapsed().as_secs_f64();
                if let Some(m) = metric {
                    tracing::info!(
                        step = self.step,
                        "held-out {}: {m:.4}",
                        self.task.metric.name()
                    );
                }
                metric
            } else {
                None
            };
            let Some(mut record) = self.last.take() else {
                continue;
            };
            record.metric = metric;
            metrics.append(&record)?;
            bar.set_position(self.step);
            bar.set_message(format!(
                "loss {:.4} | {:.0} tok/s | micro {} | mem {} (peak {}) of {}",
                record.loss,
                record.tokens_per_s,
                self.micro.size(),
                headroom_alloc::format_bytes(record.in_use),
                headroom_alloc::format_bytes(record.peak),
                headroom_alloc::format_bytes(record.limit),
            ));
            if self.totals.diverged(self.config.max_nonfinite_steps) {
                return Ok(Some(self.step));
            }
            if self.config.checkpoint.every > 0
                && self.step.is_multiple_of(self.config.checkpoint.every)
            {
                self.checkpoint_unless_nonfinite()?;
            }
        }
        Ok(None)
    }

    /// Writes a checkpoint, unless the last step's loss was not finite: the weights may be
    /// garbage then, and the last checkpoint is worth more than they are.
    fn checkpoint_unless_nonfinite(&self) -> Result<()> {
        if self.totals.nonfinite_streak > 0 {
            tracing::warn!(
                step = self.step,
                "no checkpoint: the loss was not finite; the last one written stays"
            );
            return Ok(());
        }
        self.save_checkpoint()?;
        self.flush_trace();
        tracing::debug!(step = self.step, "checkpoint written");
        Ok(())
    }

    /// The plots, the allocator's Chrome trace and the summary, in the run directory, and the
    /// allocation trace flushed; returns the summary.
    fn write_artifacts(&self, diverged_at: Option<u64>) -> Result<Summary> {
        let dir = &self.run_dir;
        self.flush_trace();
        let summary = self.summary(diverged_at);
        let path = dir.join("summary.json");
        let json =
            serde_json::to_string_pretty(&summary).map_err(|e| Error::io(&path)(e.into()))?;
        write_atomically(&path, json.as_bytes())?;
        let records = read_all(dir)?;
        crate::plots::loss_curve(
            &records,
            &summary.metric_name,
            summary.metric,
            &dir.join("loss.svg"),
        )?;
        crate::plots::memory_timeline(&records, &summary.micro_history, &dir.join("memory.svg"))?;
        let trace = dir.join("memory-trace.json");
        let file = std::fs::File::create(&trace).map_err(Error::io(&trace))?;
        self.device
            .allocator()
            .with(|a| match a.history() {
                Some(history) => history.write_chrome_trace(std::io::BufWriter::new(file)),
                None => Ok(()),
            })
            .map_err(Error::io(&trace))?;
        Ok(summary)
    }

    /// Flushes the allocation trace to its file; a failure to write it is a warning, never
    /// the end of the run.
    fn flush_trace(&self) {
        if let (Some(path), Err(err)) = (
            &self.trace,
            self.device.allocator().with(|a| a.flush_trace()),
        ) {
            tracing::warn!(
                "{}: the allocation trace is incomplete: {err}",
                path.display()
            );
        }
    }

    /// What the run did, over every process that worked on it.
    pub fn summary(&self, diverged_at: Option<u64>) -> Summary {
        let totals = &self.totals;
        let mut peak_by_tag = totals.peak_by_tag.clone();
        peak_by_tag.sort_by_key(|t| std::cmp::Reverse(t.peak));
        let (history_dropped, history_dropped_until_s) =
            self.device.allocator().with(|a| match a.history() {
                Some(history) => (
                    history.dropped(),
                    history.dropped_until_ns().map(|ns| ns as f64 * 1e-9),
                ),
                None => (0, None),
            });
        Summary {
            metric_name: self.task.metric.name().to_owned(),
            metric: self.metric,
            steps: self.step,
            samples: totals.samples,
            elapsed_s: totals.seconds,
            final_loss: totals.last_loss,
            ooms_recovered: totals.ooms,
            micro_history: self.micro.history.clone(),
            plan: self.plan.clone(),
            first_step_peak: totals.first_step_peak,
            peak_by_tag,
            peak: totals.peak,
            peak_reserved: totals.peak_reserved,
            limit: self.budget.limit,
            processes: totals.processes,
            diverged_at,
            history_dropped,
            history_dropped_until_s,
        }
    }
}

/// A progress bar over `total` steps from `done`, or a hidden one.
fn progress_bar(shown: bool, total: u64, done: u64) -> ProgressBar {
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
