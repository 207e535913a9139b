//! When nothing fits: the settings that kept the optimizer step in the backward pass out of
//! the policy's candidates, and what would fit without them.
//!
//! The update in the backward pass holds one parameter's gradient at a time instead of all of
//! them, but only in a step of one micro-batch: clipping by the global norm and f16 loss
//! scaling need every gradient before the first update, and a step of several micro-batches
//! holds every gradient (one set, summed into as each completes) until its last micro-batch,
//! so updating during that one would save nothing.

use headroom_alloc::format_bytes;

use super::{DEFAULT_MARGIN, Ground};
use crate::config::{PrecisionKind, TrainConfig};
use crate::error::Result;
use crate::planning::policy::{self, Policy};
use crate::planning::probe::Probed;

/// What kept the update in the backward pass out of a plan of `config` where nothing fit, and
/// the largest batch that fits without it, as sentences; none when nothing kept it out (or the
/// configuration pins it off).
pub(super) fn kept_out(config: &TrainConfig, ground: &Ground<'_>) -> Result<Option<String>> {
    if config.optimizer.in_backward == Some(false) {
        return Ok(None);
    }
    let batch = ground.whole_batch(config);
    let step_limit = ground
        .budget
        .step_limit(config.batch.margin.unwrap_or(DEFAULT_MARGIN));
    let mut without = config.clone();
    without.optimizer.clip = 0.0;
    if without.precision.dtype == PrecisionKind::F16 {
        without.precision.dtype = PrecisionKind::Bf16;
    }
    let mut flags = Vec::new();
    let mut reasons = Vec::new();
    if config.optimizer.clip > 0.0 {
        reasons.push(format!(
            "clipping the gradients' norm to {} needs every gradient before the first update",
            config.optimizer.clip
        ));
        flags.push("--clip 0".to_owned());
    }
    if config.precision.dtype == PrecisionKind::F16 {
        reasons.push(
            "f16 loss scaling checks every gradient for an overflow before the first update"
                .to_owned(),
        );
        flags.push("--precision bf16".to_owned());
    }
    let Some((policy, fits, (peak, host))) =
        largest_one_micro_batch(&without, ground, batch, step_limit)?
    else {
        let kept = match reasons.is_empty() {
            true => String::new(),
            false => format!(" ({})", reasons.join("; ")),
        };
        return Ok(Some(format!(
            "the update in the backward pass was kept out{kept}, but even without that it does \
             not fit a step of one sample"
        )));
    };
    if fits < batch {
        reasons.push(format!(
            "a step of {batch} samples does not fit in one micro-batch, and a step of several \
             holds every gradient until its last micro-batch, which leaves the update in the \
             backward pass nothing to save"
        ));
        flags.insert(0, format!("--batch-size {fits}"));
    }
    if reasons.is_empty() {
        return Ok(None);
    }
    let them = if reasons.len() > 1 { "them" } else { "it" };
    let host = match host {
        Some(host) => format!("the host tier at {}", format_bytes(host)),
        None => "nothing in the host tier".into(),
    };
    Ok(Some(format!(
        "the update in the backward pass, which holds one parameter's gradient at a time \
         instead of all of them, was kept out: {}. Without {them}, {} fits a batch of {fits} in \
         one micro-batch, its step peaking at {} under the {} step limit, {host} ({})",
        reasons.join("; "),
        policy.describe(),
        format_bytes(peak),
        format_bytes(step_limit),
        flags.join(" ")
    )))
}

/// The lightest policy with the update in the backward pass that fits one sample (the least
/// memory of `config`'s recomputations, the widest optimizer state that fits), with the largest
/// batch up to `batch` whose step in one micro-batch fits `step_limit`, and that step's peaks.
fn largest_one_micro_batch(
    config: &TrainConfig,
    ground: &Ground<'_>,
    batch: usize,
    step_limit: u64,
) -> Result<Option<(Policy, usize, Peaks)>> {
    let recompute = match config.model.recompute {
        Some(pinned) => pinned,
        None => ground
            .knobs
            .recomputes()
            .last()
            .copied()
            .unwrap_or_default(),
    };
    for state in policy::states(config) {
        let policy = Policy {
            recompute,
            in_backward: true,
            state,
            ..Policy::manual(config)
        };
        let mut candidate = config.clone();
        policy.apply(&mut candidate);
        let Some(one) = one_micro_batch_peak(&candidate, ground, 1, step_limit)? else {
            continue;
        };
        // Doubling from one sample until a batch does not fit, then bisecting: a few probes
        // when little fits, which is when this is asked.
        let (mut fits, mut peak, mut fails) = (1, one, batch + 1);
        while fits * 2 < fails {
            match one_micro_batch_peak(&candidate, ground, fits * 2, step_limit)? {
                Some(at) => (fits, peak) = (fits * 2, at),
                None => fails = fits * 2,
            }
        }
        while fails - fits > 1 {
            let mid = fits + (fails - fits) / 2;
            match one_micro_batch_peak(&candidate, ground, mid, step_limit)? {
                Some(at) => (fits, peak) = (mid, at),
                None => fails = mid,
            }
        }
        return Ok(Some((policy, fits, peak)));
    }
    Ok(None)
}

/// A step's peak on the device, and in the host tier where it offloads.
type Peaks = (u64, Option<u64>);

/// The peaks of a step of `samples` in one micro-batch under `config`, if it fits
/// `step_limit`.
fn one_micro_batch_peak(
    config: &TrainConfig,
    ground: &Ground<'_>,
    samples: usize,
    step_limit: u64,
) -> Result<Option<Peaks>> {
    let mut config = config.clone();
    config.batch.size = samples;
    let mut prober = ground.prober(&config);
    Ok(match prober.probe(samples)? {
        Probed::Peak(peak) if *peak <= step_limit => Some((*peak, prober.host_peak(samples))),
        _ => None,
    })
}
