//! What a run writes down: one record per step (a line of `metrics.jsonl`), and a summary of
//! the whole run at its end (`summary.json`). Floats that may be NaN or infinite (a skipped
//! f16 step, a diverging run) are written so that they read back.

use std::fmt;

use headroom_alloc::{Reservation, Verdict, format_bytes};
use serde::{Deserialize, Serialize};

use crate::planning::plan::Plan;
use crate::planning::tag_bytes::TagBytes;
use crate::step::micro::SizeChange;
use crate::step::{Oom, Phase};

/// An out-of-memory a step absorbed, as its record keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OomRecord {
    /// Where in the step.
    pub phase: Phase,
    /// The micro-batch size that did not fit (the batch, for the optimizer phase).
    pub micro: usize,
    /// Fragmentation or capacity.
    pub verdict: Verdict,
    /// Bytes the failed allocation asked for.
    pub requested: u64,
    /// What it was for.
    pub tag: String,
    /// The largest free block when it failed.
    pub largest_free: u64,
}

impl From<&Oom> for OomRecord {
    fn from(oom: &Oom) -> Self {
        Self {
            phase: oom.phase,
            micro: oom.micro,
            verdict: oom.report.verdict,
            requested: oom.report.requested,
            tag: oom.report.tag.name().to_owned(),
            largest_free: oom.report.largest_free,
        }
    }
}

/// One line of `metrics.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The step, from 1.
    pub step: u64,
    /// The epoch its batch came from.
    pub epoch: u64,
    /// The batch's mean loss (NaN or infinite when the step diverged).
    #[serde(with = "crate::run_dir::float_json")]
    pub loss: f64,
    /// The learning rate used.
    #[serde(with = "crate::run_dir::float_json")]
    pub lr: f64,
    /// Micro-batch sizes that completed.
    pub micro_sizes: Vec<usize>,
    /// Out-of-memory failures absorbed, in order.
    pub ooms: Vec<OomRecord>,
    /// Skipped for overflowing gradients.
    pub skipped: bool,
    /// The gradients' global norm (infinite or NaN when they overflowed).
    #[serde(with = "crate::run_dir::float_json")]
    pub grad_norm: f64,
    /// The loss scale (1 without scaling).
    #[serde(with = "crate::run_dir::float_json")]
    pub loss_scale: f64,
    /// Samples per second over the step.
    #[serde(with = "crate::run_dir::float_json")]
    pub samples_per_s: f64,
    /// Scored tokens (or samples) per second.
    #[serde(with = "crate::run_dir::float_json")]
    pub tokens_per_s: f64,
    /// Bytes in use at the end of the step.
    pub in_use: u64,
    /// The most in use during the step.
    pub peak: u64,
    /// The limit.
    pub limit: u64,
    /// Per tag.
    pub tags: Vec<TagBytes>,
    /// The most the host tier held during the step, for a run that offloads to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_peak: Option<u64>,
    /// The held-out metric, when evaluated after this step.
    #[serde(with = "crate::run_dir::float_json::option")]
    pub metric: Option<f64>,
    /// Seconds the run has trained, over every process that worked on it.
    #[serde(with = "crate::run_dir::float_json")]
    pub elapsed_s: f64,
}

impl StepRecord {
    /// What the progress bar says after this step: its figures, and the next step's
    /// micro-batch size `micro`.
    pub(crate) fn bar_message(&self, micro: usize) -> String {
        format!(
            "loss {:.4} | {:.0} tok/s | micro {micro} | mem {} (peak {}) of {}",
            self.loss,
            self.tokens_per_s,
            format_bytes(self.in_use),
            format_bytes(self.peak),
            format_bytes(self.limit),
        )
    }
}

/// What a run did, over every process that worked on it, for the end of its output and
/// `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The metric's name.
    pub metric_name: String,
    /// The final held-out metric; none without held-out samples.
    #[serde(with = "crate::run_dir::float_json::option")]
    pub metric: Option<f64>,
    /// Steps done.
    pub steps: u64,
    /// Samples trained on.
    pub samples: u64,
    /// Seconds spent in steps and evaluations.
    #[serde(with = "crate::run_dir::float_json")]
    pub elapsed_s: f64,
    /// Seconds spent in training steps alone (0 in summaries written before it was kept).
    #[serde(default, with = "crate::run_dir::float_json")]
    pub train_s: f64,
    /// The last step's loss.
    #[serde(with = "crate::run_dir::float_json")]
    pub final_loss: f64,
    /// Out-of-memory failures absorbed.
    pub ooms_recovered: usize,
    /// Every change of micro-batch size.
    pub micro_history: Vec<SizeChange>,
    /// The planner's table, when it ran.
    pub plan: Option<Plan>,
    /// The first step's measured peak.
    pub first_step_peak: Option<u64>,
    /// The highest bytes per tag over the run.
    pub peak_by_tag: Vec<TagBytes>,
    /// The highest bytes in use.
    pub peak: u64,
    /// The most bytes reserved from the device at once: what is in use, the allocator's cache
    /// and its fragments (0 in summaries written before it was recorded).
    #[serde(default)]
    pub peak_reserved: u64,
    /// How the allocator reserved memory (absent in summaries written before it was recorded).
    #[serde(default)]
    pub reservation: Option<Reservation>,
    /// The limit.
    pub limit: u64,
    /// The most the host tier held, for a run that offloads to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_peak: Option<u64>,
    /// Processes that worked on the run: 1, and one more for each resume.
    #[serde(default)]
    pub processes: u64,
    /// The step at which the run stopped because its loss stayed NaN or infinite.
    #[serde(default)]
    pub diverged_at: Option<u64>,
    /// The step at which a callback stopped the run.
    #[serde(default)]
    pub stopped_at: Option<u64>,
    /// Allocator events the last process's history ring dropped (the oldest ones), and the
    /// second of the process up to which they reach; the trace file holds every allocation.
    #[serde(default)]
    pub history_dropped: u64,
    /// See `history_dropped`.
    #[serde(default, with = "crate::run_dir::float_json::option")]
    pub history_dropped_until_s: Option<f64>,
    /// Each rank's peaks in its last process, in a data-parallel run (empty for a run of one
    /// process, whose peaks are the ones above).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<RankPeak>,
}

/// One rank's peaks, as its allocator measured them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankPeak {
    /// The rank.
    pub rank: usize,
    /// The highest bytes in use.
    pub peak: u64,
    /// The highest bytes of optimizer state (its share, where the state is sharded).
    pub optimizer_state: u64,
}

/// Samples a second over `seconds`, with the digits a small rate needs (a one-step run of a
/// large model trains well under one sample a second).
fn throughput(samples: u64, seconds: f64) -> String {
    if seconds <= 0.0 {
        return "-".into();
    }
    let rate = samples as f64 / seconds;
    if rate == 0.0 {
        return "0".into();
    }
    // Three significant digits, and no decimals from 100 up.
    let decimals = (2.0 - rate.log10().floor()).clamp(0.0, 9.0) as usize;
    format!("{rate:.decimals$}")
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "== summary")?;
        self.write_outcome(f)?;
        self.write_progress(f)?;
        self.write_memory(f)
    }
}

impl Summary {
    /// How the run ended: stopped or diverged, and its held-out metric.
    fn write_outcome(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(step) = self.stopped_at {
            writeln!(f, "stopped at step {step}, as a signal or a callback asked")?;
        }
        if let Some(step) = self.diverged_at {
            writeln!(
                f,
                "stopped at step {step}: the loss was not finite (NaN or infinite) for the last \
                 steps"
            )?;
        }
        match self.metric {
            Some(m) if self.metric_name == "loss" => {
                writeln!(f, "held-out loss: {m:.4} (perplexity {:.2})", m.exp())?
            }
            Some(m) => writeln!(f, "held-out {}: {:.2}%", self.metric_name, m * 100.0)?,
            None => writeln!(
                f,
                "held-out {}: not evaluated ({})",
                self.metric_name,
                if self.diverged_at.is_some() {
                    "the run diverged"
                } else {
                    "no held-out samples"
                }
            )?,
        }
        Ok(())
    }

    /// What the run did: its steps, samples, loss and time, the out-of-memory failures it
    /// recovered from and its micro-batch sizes.
    fn write_progress(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let processes = if self.processes > 1 {
            format!(", over {} processes", self.processes)
        } else {
            String::new()
        };
        writeln!(
            f,
            "steps {} | samples {} | final loss {:.4} | time {:.1} s, {:.1} s of it in training \
             steps ({} samples/s{processes})",
            self.steps,
            self.samples,
            self.final_loss,
            self.elapsed_s,
            self.train_s,
            throughput(self.samples, self.train_s)
        )?;
        writeln!(
            f,
            "out-of-memory failures recovered: {}",
            self.ooms_recovered
        )?;
        let history: Vec<String> = self
            .micro_history
            .iter()
            .map(|c| format!("{} at step {} ({:?})", c.size, c.step, c.change).to_lowercase())
            .collect();
        writeln!(f, "micro-batch sizes: {}", history.join(", "))
    }

    /// The run's memory: the planner's peak against the first step's, the peak by tag and by
    /// rank, and the allocator history it dropped.
    fn write_memory(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (Some(plan), Some(measured)) = (&self.plan, self.first_step_peak) {
            writeln!(
                f,
                "peak memory: predicted {} by the planner, measured {} on the first step",
                format_bytes(plan.predicted_peak),
                format_bytes(measured)
            )?;
        }
        let reserved = match (self.peak_reserved, self.reservation) {
            (0, _) => String::new(),
            (peak, None) => format!(" (at most {} reserved)", format_bytes(peak)),
            (peak, Some(how)) => format!(" (at most {} reserved, as {how})", format_bytes(peak)),
        };
        writeln!(
            f,
            "peak memory {} of the {} limit{reserved}, by tag:",
            format_bytes(self.peak),
            format_bytes(self.limit)
        )?;
        let width = self
            .peak_by_tag
            .iter()
            .map(|t| t.tag.len())
            .max()
            .unwrap_or(0);
        for t in &self.peak_by_tag {
            writeln!(
                f,
                "  {:<width$} {:>12}",
                t.tag,
                format_bytes(t.peak),
                width = width.max(16)
            )?;
        }
        if let Some(host) = self.host_peak {
            let predicted = self.plan.as_ref().and_then(|p| p.predicted_host_peak);
            let predicted = predicted.map_or_else(String::new, |p| {
                format!(" (predicted {} by the planner)", format_bytes(p))
            });
            writeln!(f, "host tier: peak {}{predicted}", format_bytes(host))?;
        }
        for r in &self.ranks {
            writeln!(
                f,
                "rank {}: peak memory {}, optimizer state {}",
                r.rank,
                format_bytes(r.peak),
                format_bytes(r.optimizer_state)
            )?;
        }
        if self.history_dropped > 0 {
            writeln!(
                f,
                "memory-trace.json: the allocator's history kept its newest events; {} older ones \
                 (up to {:.1} s into the last process) were dropped, except out-of-memory events \
                 (memory.history sets how many are kept; the allocations-*.jsonl trace holds them \
                 all)",
                self.history_dropped,
                self.history_dropped_until_s.unwrap_or(0.0)
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
impl StepRecord {
    /// A record of `step` with `loss` and plain values elsewhere, for tests.
    pub(crate) fn sample(step: u64, loss: f64) -> Self {
        Self {
            step,
            epoch: 0,
            loss,
            lr: 1e-3,
            micro_sizes: vec![8],
            ooms: Vec::new(),
            skipped: !loss.is_finite(),
            grad_norm: f64::INFINITY,
            loss_scale: 1.0,
            samples_per_s: 1.0,
            tokens_per_s: 1.0,
            in_use: 0,
            peak: 0,
            limit: 1,
            tags: Vec::new(),
            host_peak: None,
            metric: None,
            elapsed_s: step as f64,
        }
    }
}
