//! The planner's answer: the micro-batch size, its predicted peak and step time, the probes
//! that found it, where the step holds its memory, and the memory techniques chosen; and how
//! `headroom plan` prints it.

use headroom_alloc::format_bytes;

use crate::config::StateKind;
use crate::planning::op_bytes::OpBytes;
use crate::planning::policy::{Policy, PolicyPlan};
use crate::planning::tag_bytes::TagBytes;

/// One probe: a micro-batch size and the peak memory of a step with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Probe {
    /// The micro-batch size.
    pub micro: usize,
    /// The step's peak bytes in use; none when it ran out of memory.
    pub peak: Option<u64>,
    /// True when the peak fits the limit with the margin.
    pub fits: bool,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Plan {
    /// Every probe, in the order run.
    pub probes: Vec<Probe>,
    /// The largest micro-batch size that fits.
    pub micro: usize,
    /// Its predicted peak.
    pub predicted_peak: u64,
    /// The predicted peak of the host tier, for a step that offloads to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_host_peak: Option<u64>,
    /// The most a step may use: the limit less the margin.
    #[serde(alias = "target")]
    pub step_limit: u64,
    /// The margin the target leaves, as a fraction of the limit: the configured one, or the
    /// default shrunk so that one sample fits.
    #[serde(default)]
    pub margin: f64,
    /// True when the default margin had to shrink for one sample to fit.
    #[serde(default)]
    pub margin_shrunk: bool,
    /// The most each tag held during the chosen size's step: the weights, the gradients, the
    /// optimizer state and each kind of layer's activations (`activations/attention`, ...).
    #[serde(default)]
    pub peak_by_tag: Vec<TagBytes>,
    /// What the forward pass of one of the chosen micro-batches saves for its backward pass,
    /// per kind of op (the tape's account of its activations).
    #[serde(default)]
    pub saved_by_op: Vec<OpBytes>,
    /// A GPT's fused head: the rows it forms logits for at a time (see [`super::head_chunk`]),
    /// none for a model without one. The probes of the micro-batch above ran with the smallest
    /// chunk; the predicted peak and the breakdowns are the chosen chunk's.
    #[serde(default)]
    pub head_chunk: Option<usize>,
    /// The larger chunks tried for the chosen micro-batch, in order.
    #[serde(default)]
    pub chunk_probes: Vec<ChunkProbe>,
    /// The predicted seconds of a step with the chosen micro-batch (and chunk), at the planned
    /// device's rates.
    #[serde(default)]
    pub predicted_seconds: f64,
    /// What a step's collectives send from each rank (a run over several ranks), in bytes,
    /// and the seconds of `predicted_seconds` they take at the link's rate.
    #[serde(default)]
    pub predicted_communication: (f64, f64),
    /// Under `memory.policy = "auto"`: the memory techniques tried and the ones chosen, which
    /// the plan's other fields are for.
    #[serde(default)]
    pub policy: Option<PolicyPlan>,
}

/// One chunk of the fused head tried for the chosen micro-batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChunkProbe {
    /// Rows of tokens per chunk.
    pub rows: usize,
    /// The step's peak bytes in use with it; none when it ran out of memory.
    pub peak: Option<u64>,
    /// True when the peak fits the limit with the margin.
    pub fits: bool,
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(policy) = &self.policy {
            write!(f, "{policy}")?;
        }
        writeln!(
            f,
            "{:>12} {:>14} {:>6}",
            "micro-batch", "predicted peak", "fits"
        )?;
        let mut probes = self.probes.clone();
        probes.sort_by_key(|p| p.micro);
        for p in probes {
            let peak = p.peak.map_or_else(|| "out of memory".into(), format_bytes);
            writeln!(
                f,
                "{:>12} {:>14} {:>6}",
                p.micro,
                peak,
                if p.fits { "yes" } else { "no" }
            )?;
        }
        if self.margin_shrunk {
            writeln!(
                f,
                "the default margin left no room for one sample: shrunk to {}",
                self.margin
            )?;
        }
        if let Some(rows) = self.head_chunk {
            write!(f, "the fused head forms logits for {rows} rows at a time")?;
            if !self.chunk_probes.is_empty() {
                let tried: Vec<String> = self
                    .chunk_probes
                    .iter()
                    .map(|c| {
                        let peak = c.peak.map_or_else(|| "out of memory".into(), format_bytes);
                        format!(
                            "{} rows {peak}{}",
                            c.rows,
                            if c.fits { "" } else { " (no)" }
                        )
                    })
                    .collect();
                write!(f, " (tried {})", tried.join(", "))?;
            }
            writeln!(f)?;
        }
        write!(
            f,
            "chosen: micro-batches of {} (predicted peak {} of the {} a step may use)",
            self.micro,
            format_bytes(self.predicted_peak),
            format_bytes(self.step_limit)
        )?;
        if let Some(host) = self.predicted_host_peak {
            write!(
                f,
                "\nthe host tier: predicted peak {} (what the step offloads)",
                format_bytes(host)
            )?;
        }
        let (sent, seconds) = self.predicted_communication;
        if sent > 0.0 {
            write!(
                f,
                "\npredicted step {:.3} s, of which {seconds:.3} s in collectives that send {} \
                 from each rank (memory.link_bandwidth)",
                self.predicted_seconds,
                format_bytes(sent as u64)
            )?;
        }
        if !self.peak_by_tag.is_empty() {
            write!(f, "\nthe most each tag holds during its step:")?;
            for t in &self.peak_by_tag {
                write!(f, "\n  {:<28} {:>12}", t.tag, format_bytes(t.peak))?;
            }
        }
        if !self.saved_by_op.is_empty() {
            write!(
                f,
                "\nactivations a micro-batch saves for its backward pass, by op:"
            )?;
            for o in &self.saved_by_op {
                write!(f, "\n  {:<28} {:>12}", o.op, format_bytes(o.bytes))?;
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for PolicyPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "memory policy (auto): each combination's largest micro-batch and step"
        )?;
        // Where the ranks may shard the parameters, a column says which candidates do.
        let sharding = self.candidates.iter().any(|c| c.policy.shard_params);
        let params = |sharded: bool| match (sharding, sharded) {
            (false, _) => String::new(),
            (true, false) => format!("{:<8} ", "whole"),
            (true, true) => format!("{:<8} ", "sharded"),
        };
        let header = match sharding {
            true => format!("{:<8} ", "params"),
            false => String::new(),
        };
        writeln!(
            f,
            "{:<12} {:<12} {:<6} {header}{:<19} {:>12} {:>14} {:>14} {:>14}",
            "recompute",
            "update",
            "state",
            "offloaded",
            "micro-batch",
            "predicted peak",
            "host tier peak",
            "predicted step"
        )?;
        for c in &self.candidates {
            let Policy {
                recompute,
                in_backward,
                state,
                ..
            } = c.policy;
            let micro = c
                .micro
                .map_or_else(|| "none fits".into(), |m| m.to_string());
            let peak = c.predicted_peak.map_or_else(|| "-".into(), format_bytes);
            let host = c
                .predicted_host_peak
                .map_or_else(|| "-".into(), format_bytes);
            let seconds = c
                .predicted_seconds
                .map_or_else(|| "-".into(), |s| format!("{s:.3} s"));
            let chosen = if c.policy == self.chosen && c.micro.is_some() {
                "  <- chosen"
            } else {
                ""
            };
            writeln!(
                f,
                "{:<12} {:<12} {:<6} {}{:<19} {micro:>12} {peak:>14} {host:>14} {seconds:>14}{chosen}",
                recompute,
                if in_backward { "in backward" } else { "after" },
                // The default state is in the parameters' dtype, f32 or bf16.
                match state {
                    StateKind::F32 => "full".to_string(),
                    narrower => narrower.to_string(),
                },
                params(c.policy.shard_params),
                c.policy.offloaded(),
            )?;
        }
        writeln!(f, "chosen: {} ({})", self.chosen.describe(), self.reason)
    }
}
