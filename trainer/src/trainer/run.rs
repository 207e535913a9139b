//! A whole run: the steps to the end, each recorded in `metrics.jsonl` and the run's
//! TensorBoard event file, the held-out metric evaluated and a checkpoint written on schedule;
//! then the last checkpoint, the artifacts and the summary of the whole run.
//!
//! A run whose loss stays NaN or infinite for `max_nonfinite_steps` steps in a row stops there
//! with [`Error::Diverged`], after writing every artifact but the checkpoint (the last one
//! written holds the weights before the divergence). A run that reaches its end (or a
//! callback's stop) with a loss that is not finite fails the same way, with
//! [`Error::EndedNotFinite`]: no exit that looks like success without a finite loss. A run
//! that fails otherwise writes what artifacts it can before returning its error.

use std::time::Instant;

use headroom_alloc::Tag;
use headroom_collectives::ReduceOp;

use super::Trainer;
use crate::atomic_file::write_atomically;
use crate::data::tokenizer::TextTokenizer;
use crate::error::{Error, Result};
use crate::progress;
use crate::run_dir::artifacts;
use crate::run_dir::checkpoint::checkpoint_path;
use crate::run_dir::logs::RunLogs;
use crate::run_dir::record::{RankPeak, Summary};
use crate::trainer::callback::Flow;

/// How the loop of steps ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// At the last step.
    Finished,
    /// At this step, its loss not finite for too long.
    Diverged(u64),
    /// After this step, at a callback's request.
    Stopped(u64),
}

impl Trainer {
    /// Trains to the end: every step recorded in `metrics.jsonl`, the metric evaluated and a
    /// checkpoint written on schedule and at the end, then the plots, the allocator's trace
    /// and the summary of the whole run (over every process that worked on it). In a
    /// data-parallel run rank 0 writes these files; the other ranks train alongside and write
    /// nothing.
    pub fn run(&mut self, progress: bool) -> Result<Summary> {
        let dir = self.files.dir.clone();
        let writes = self.launch().writes();
        let mut logs = if writes {
            write_atomically(
                &dir.join(crate::run_dir::location::CONFIG_FILE),
                self.config().to_toml().as_bytes(),
            )?;
            // The base's files first: the data's tokenizer, where it has one, is the run's.
            if let Some(base) = self.config.pretrained_dir() {
                keep_identity(&base, &dir)?;
            }
            let tokenizer = dir.join(crate::data::shards::TOKENIZER);
            if let Some(source) = self.config.tokenizer() {
                let bytes = std::fs::read(&source).map_err(Error::io(&source))?;
                write_atomically(&tokenizer, &bytes)?;
            } else if let Some(vocab) = self.task.train.characters() {
                TextTokenizer::characters(vocab, &tokenizer)?;
            }
            let metric_name = self.task.metric.name();
            Some(RunLogs::open(&dir, self.files.resumed_from, metric_name)?)
        } else {
            None
        };
        let bar = progress::Bar::steps(progress && writes, self.total_steps, self.state.step);
        let outcome = self.train_to_end(logs.as_mut(), &bar);
        bar.finish();
        // An end (or a callback's stop) with a loss that is not finite: the weights are not
        // worth evaluating or keeping, and the run fails as a divergence does.
        let ended_not_finite = matches!(outcome, Ok(End::Finished | End::Stopped(_)))
            && self.state.totals.nonfinite_streak > 0;
        let diverged_at = match outcome {
            Ok(End::Diverged(step)) => Some(step),
            Ok(end) => {
                if let End::Stopped(step) = end {
                    tracing::info!(step, "a callback stopped the run");
                    self.stopped_at = Some(step);
                }
                if ended_not_finite {
                    Some(self.state.step)
                } else {
                    self.state.totals.metric = self.timed_evaluation()?;
                    self.log_final_evaluation(logs.as_mut())?;
                    self.checkpoint_unless_nonfinite()?;
                    None
                }
            }
            Err(err) => {
                let summary = self.summary(None);
                let trace = self.files.trace.as_deref();
                if !writes {
                    return Err(err);
                }
                if let Err(also) =
                    artifacts::write(&dir, &summary, (&self.device, self.host.as_ref()), trace)
                {
                    tracing::warn!("the run's artifacts could not all be written: {also}");
                }
                return Err(err);
            }
        };
        let mut summary = self.summary(diverged_at);
        summary.ranks = self.rank_peaks()?;
        if writes {
            let devices = (&self.device, self.host.as_ref());
            artifacts::write(&dir, &summary, devices, self.files.trace.as_deref())?;
        }
        match diverged_at {
            None => Ok(summary),
            Some(step) if ended_not_finite => Err(Error::EndedNotFinite {
                step,
                steps: self.state.totals.nonfinite_streak,
                checkpoint_kept: checkpoint_path(&dir).is_file(),
                run_dir: dir,
            }),
            Some(step) => Err(Error::Diverged {
                step,
                steps: self.config.max_nonfinite_steps,
                run_dir: dir,
            }),
        }
    }

    /// The steps up to the last, up to the step at which the loss has not been finite for
    /// too long, or up to the step after which a callback asked to stop.
    fn train_to_end(&mut self, mut logs: Option<&mut RunLogs>, bar: &progress::Bar) -> Result<End> {
        while self.state.step < self.total_steps {
            let report = self.train_step()?;
            let step = self.state.step;
            let mut flow = self.callbacks.each(|c| {
                report
                    .ooms
                    .iter()
                    .fold(Flow::Continue, |flow, oom| flow.and(c.on_oom(step, oom)))
            });
            let every = self.config.eval_every;
            let metric = if every > 0 && step.is_multiple_of(every) && step < self.total_steps {
                let metric = self.timed_evaluation()?;
                if let Some(m) = metric {
                    tracing::info!(step, "held-out {}: {m:.4}", self.task.metric.name());
                }
                metric
            } else {
                None
            };
            if let Some(mut record) = self.last.take() {
                record.metric = metric;
                if let Some(logs) = logs.as_deref_mut() {
                    logs.append(&record)?;
                }
                bar.show(record.step, record.bar_message(self.state.micro.size()));
                flow = flow.and(self.callbacks.each(|c| c.after_step(&record)));
            }
            if self.state.totals.diverged(self.config.max_nonfinite_steps) {
                return Ok(End::Diverged(step));
            }
            // The last step's checkpoint is the end's, after its evaluation.
            let every = self.config.checkpoint.every;
            if every > 0 && step.is_multiple_of(every) && step < self.total_steps {
                flow = flow.and(self.checkpoint_unless_nonfinite()?);
            }
            if flow == Flow::Stop {
                return Ok(End::Stopped(step));
            }
        }
        Ok(End::Finished)
    }

    /// Logs the held-out metric evaluated at the end, unless this process trained no step: a
    /// resumed run that had already finished evaluates the weights its earlier process did.
    fn log_final_evaluation(&self, logs: Option<&mut RunLogs>) -> Result<()> {
        let trained = self.state.step > self.files.resumed_from.unwrap_or(0);
        match (logs, self.state.totals.metric) {
            (Some(logs), Some(metric)) if trained => logs.final_evaluation(self.state.step, metric),
            _ => Ok(()),
        }
    }

    /// The held-out metric, its time counted in the run's; the callbacks see it.
    fn timed_evaluation(&mut self) -> Result<Option<f64>> {
        let started = Instant::now();
        let metric = self.evaluate()?;
        self.state.totals.seconds += started.elapsed().as_secs_f64();
        if let Some(value) = metric {
            let (step, kind) = (self.state.step, self.task.metric);
            self.callbacks
                .each(|c| c.after_evaluation(step, kind, value));
        }
        Ok(metric)
    }

    /// Writes a checkpoint, unless the last step's loss was not finite: the weights may be
    /// garbage then, and the last checkpoint is worth more than they are. The callbacks see a
    /// checkpoint written; their answer is returned.
    fn checkpoint_unless_nonfinite(&mut self) -> Result<Flow> {
        if self.state.totals.nonfinite_streak > 0 {
            tracing::warn!(
                step = self.state.step,
                "no checkpoint: the loss was not finite; the last one written stays"
            );
            return Ok(Flow::Continue);
        }
        self.save_checkpoint()?;
        if !self.launch().writes() {
            return Ok(Flow::Continue);
        }
        artifacts::flush_trace(&self.device, self.files.trace.as_deref());
        tracing::debug!(step = self.state.step, "checkpoint written");
        let (step, path) = (self.state.step, checkpoint_path(&self.files.dir));
        Ok(self.callbacks.each(|c| c.on_checkpoint(step, &path)))
    }

    /// What the run did, over every process that worked on it; `diverged_at` is the step it
    /// stopped at because its loss stayed NaN or infinite.
    pub fn summary(&self, diverged_at: Option<u64>) -> Summary {
        let totals = &self.state.totals;
        let mut peak_by_tag = totals.peak_by_tag.clone();
        peak_by_tag.sort_by_key(|t| std::cmp::Reverse(t.peak));
        let (history_dropped, history_dropped_until_s) = artifacts::history_dropped(&self.device);
        Summary {
            metric_name: self.task.metric.name().to_owned(),
            metric: totals.metric,
            steps: self.state.step,
            samples: totals.samples,
            elapsed_s: totals.seconds,
            train_s: totals.train_seconds,
            final_loss: totals.last_loss,
            ooms_recovered: totals.ooms,
            micro_history: self.state.micro.history.clone(),
            plan: self.plan.clone(),
            first_step_peak: totals.first_step_peak,
            peak_by_tag,
            peak: totals.peak,
            peak_reserved: totals.peak_reserved,
            reservation: Some(self.device.allocator().stats().reservation),
            limit: self.budget.limit,
            host_peak: totals.host_peak,
            processes: totals.processes,
            diverged_at,
            stopped_at: self.stopped_at,
            history_dropped,
            history_dropped_until_s,
            ranks: Vec::new(),
        }
    }

    /// Each rank's peak in use and peak of optimizer state, gathered from every rank of a
    /// data-parallel run (none for a run of one process). Every rank must call it. Two ranks'
    /// peaks go through the control buffer at a time, so gathering allocates nothing: a rank
    /// whose memory is full at the run's end cannot leave the others waiting in a collective.
    fn rank_peaks(&mut self) -> Result<Vec<RankPeak>> {
        let (ranks, me) = (self.world.world_size(), self.world.rank());
        let Some(control) = self.control.as_mut().filter(|_| ranks > 1) else {
            return Ok(Vec::new());
        };
        let stats = self.device.allocator().stats();
        let state = stats
            .tags
            .iter()
            .find(|t| t.tag == Tag::OPTIMIZER_STATE)
            .map_or(0, |t| t.peak);
        let mut peaks = Vec::with_capacity(ranks);
        for first in (0..ranks).step_by(2) {
            let pair = first..(first + 2).min(ranks);
            let mut values = [0.0; 4];
            if pair.contains(&me) {
                let slot = 2 * (me - first);
                values[slot] = stats.peak_in_use as f64;
                values[slot + 1] = state as f64;
            }
            let agreed = control.all_reduce(&mut *self.world, values, ReduceOp::Sum)?;
            peaks.extend(pair.map(|rank| {
                let slot = 2 * (rank - first);
                RankPeak {
                    rank,
                    peak: agreed[slot] as u64,
                    optimizer_state: agreed[slot + 1] as u64,
                }
            }));
        }
        Ok(peaks)
    }
}

/// Copies the pretrained model's tokenizer and generation files into the run directory (a GGUF
/// file's written from its metadata), and its special token ids into the generation defaults
/// there, so that the run's exports and generation keep the model's identity (its chat
/// template, its end-of-turn tokens) wherever the base later goes.
fn keep_identity(base: &std::path::Path, dir: &std::path::Path) -> Result<()> {
    use headroom_nn::hf::{GENERATION_CONFIG, SpecialTokens, copy_companions};
    if headroom_nn::gguf::is_gguf(base) {
        // A GGUF file's identity is its metadata, written as the files a directory holds.
        for (name, bytes) in crate::trained::gguf_identity(base)? {
            write_atomically(&dir.join(name), &bytes)?;
        }
        return Ok(());
    }
    copy_companions(base, dir)?;
    let tokens = SpecialTokens::read(base)?;
    if tokens.is_empty() {
        return Ok(());
    }
    let generation = dir.join(GENERATION_CONFIG);
    if !generation.is_file() {
        write_atomically(&generation, b"{}\n")?;
    }
    Ok(tokens.write_into(&generation)?)
}
