//! What a run writes down: one record per step (`metrics.jsonl`), and a summary at the end.

use std::fmt;
use std::io::{BufRead, Write};
use std::path::Path;

use headroom_alloc::{Stats, format_bytes};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::micro::SizeChange;
use crate::planner::Plan;

/// Live and peak bytes of one tag during a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagBytes {
    /// The tag's name.
    pub tag: String,
    /// Held at the end of the step.
    pub live: u64,
    /// The most held during the step.
    pub peak: u64,
}

/// One line of `metrics.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The step, from 1.
    pub step: u64,
    /// The epoch its batch came from.
    pub epoch: u64,
    /// The batch's mean loss.
    pub loss: f64,
    /// The learning rate used.
    pub lr: f64,
    /// Micro-batch sizes that completed.
    pub micro_sizes: Vec<usize>,
    /// Out-of-memory failures absorbed.
    pub ooms: usize,
    /// Skipped for overflowing gradients.
    pub skipped: bool,
    /// The gradients' global norm.
    pub grad_norm: f64,
    /// The loss scale (1 without scaling).
    pub loss_scale: f64,
    /// Samples per second over the step.
    pub samples_per_s: f64,
    /// Scored tokens (or samples) per second.
    pub tokens_per_s: f64,
    /// Bytes in use at the end of the step.
    pub in_use: u64,
    /// The most in use during the step.
    pub peak: u64,
    /// The limit.
    pub limit: u64,
    /// Per tag.
    pub tags: Vec<TagBytes>,
    /// The held-out metric, when evaluated after this step.
    pub metric: Option<f64>,
    /// Seconds since the run (or its resumption) started.
    pub elapsed_s: f64,
}

/// Per-tag bytes from allocator statistics.
pub fn tag_bytes(stats: &Stats) -> Vec<TagBytes> {
    stats
        .tags
        .iter()
        .filter(|t| t.peak > 0)
        .map(|t| TagBytes {
            tag: t.tag.name().to_owned(),
            live: t.live,
            peak: t.peak,
        })
        .collect()
}

/// Appends `record` to `metrics.jsonl` in `dir`.
pub fn append(dir: &Path, record: &StepRecord) -> Result<()> {
    let path = dir.join("metrics.jsonl");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(Error::io(&path))?;
    let line = serde_json::to_string(record).map_err(|e| Error::io(&path)(e.into()))?;
    writeln!(file, "{line}").map_err(Error::io(&path))
}

/// Every record of a run directory, in order.
pub fn read_all(dir: &Path) -> Result<Vec<StepRecord>> {
    let path = dir.join("metrics.jsonl");
    let file = std::fs::File::open(&path).map_err(Error::io(&path))?;
    std::io::BufReader::new(file)
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let line = line.map_err(Error::io(&path))?;
            serde_json::from_str(&line).map_err(|err| Error::Data {
                path: path.clone(),
                detail: format!("line {}: {err}", i + 1),
            })
        })
        .collect()
}

/// What a run did, for the end of its output and `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// The metric's name.
    pub metric_name: String,
    /// The final held-out metric.
    pub metric: Option<f64>,
    /// Steps done.
    pub steps: u64,
    /// Samples trained on in this process.
    pub samples: u64,
    /// Seconds this process trained.
    pub elapsed_s: f64,
    /// The last step's loss.
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
    /// The most bytes reserved from the device at once in this process: what is in use, the
    /// allocator's cache and its fragments (0 in summaries written before it was recorded).
    #[serde(default)]
    pub peak_reserved: u64,
    /// The limit.
    pub limit: u64,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "== summary")?;
        match self.metric {
            Some(m) if self.metric_name == "loss" => {
                writeln!(f, "held-out {}: {m:.4}", self.metric_name)?
            }
            Some(m) => writeln!(f, "held-out {}: {:.2}%", self.metric_name, m * 100.0)?,
            None => writeln!(f, "held-out {}: not evaluated", self.metric_name)?,
        }
        writeln!(
            f,
            "steps {} | samples {} | final loss {:.4} | time {:.1} s ({:.0} samples/s)",
            self.steps,
            self.samples,
            self.final_loss,
            self.elapsed_s,
            self.samples as f64 / self.elapsed_s.max(1e-9)
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
        writeln!(f, "micro-batch sizes: {}", history.join(", "))?;
        if let (Some(plan), Some(measured)) = (&self.plan, self.first_step_peak) {
            writeln!(
                f,
                "peak memory: predicted {} by the planner, measured {} on the first step",
                format_bytes(plan.predicted_peak),
                format_bytes(measured)
            )?;
        }
        let reserved = if self.peak_reserved > 0 {
            format!(" (at most {} reserved)", format_bytes(self.peak_reserved))
        } else {
            String::new()
        };
        writeln!(
            f,
            "peak memory {} of the {} limit{reserved}, by tag:",
            format_bytes(self.peak),
            format_bytes(self.limit)
        )?;
        for t in &self.peak_by_tag {
            writeln!(f, "  {:<16} {:>12}", t.tag, format_bytes(t.peak))?;
        }
        Ok(())
    }
}
