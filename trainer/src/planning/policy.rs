//! The memory policy (`memory.policy = "auto"`, the default): which of Headroom's memory
//! techniques a run uses, chosen for its batch and limit by predicted step time.
//!
//! The rule:
//! - The techniques are recomputation (`none`, `cheap`, `cheap-up`, `blocks`, `blocks-tiled`; a
//!   GPT's), the optimizer step in the backward pass (only where clipping is off and the
//!   precision is not f16), and the optimizer state's precision. A technique the
//!   configuration sets is pinned: every candidate keeps it.
//! - Each candidate is planned on the meta device: the largest micro-batch whose step fits, and
//!   the predicted time of a whole step at that size (its kernels' work at the device's rates,
//!   [`headroom_kernels::PlanTarget::rates`]). The optimizer step in the backward pass saves memory only
//!   when a step is one micro-batch (a step of several holds every gradient until its last
//!   micro-batch), so its candidates are planned at the whole batch alone. When no candidate
//!   fits, the planner's error names the settings that kept that step out (clipping, f16 loss
//!   scaling, a batch too large for one micro-batch) and the largest batch that fits with it.
//! - The chosen candidate is the fastest that fits; of those within [`TIE`] of the fastest, the
//!   first in the order none, cheap, cheap-up, blocks, blocks-tiled, each without and then with the step in the
//!   backward pass: a technique must earn its place by time, since each has a cost the rates
//!   do not price (an update in the backward pass cannot be redone after an out-of-memory).
//! - The state's precision is lowered (bf16, then int8) only when no candidate of the
//!   precision above fits even one sample: it changes the optimization slightly, so the plan
//!   says so. A resumed run keeps its checkpoint's techniques instead of choosing again.

use serde::{Deserialize, Serialize};

use crate::config::{ModelKind, PrecisionKind, Recompute, StateKind, TrainConfig};
use crate::model::Knobs;

/// One combination of the memory techniques.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// What the backward pass computes again.
    pub recompute: Recompute,
    /// Whether each parameter is updated inside the backward pass.
    pub in_backward: bool,
    /// The optimizer state's precision.
    pub state: StateKind,
}

impl Policy {
    /// The techniques `config` sets, with the unset ones off.
    pub fn manual(config: &TrainConfig) -> Self {
        // Offloaded activations are the inputs of recomputed blocks.
        let fallback = match config.model.offload_activations {
            true => Recompute::Blocks,
            false => Recompute::None,
        };
        Self {
            recompute: config.model.recompute.unwrap_or(fallback),
            in_backward: config.optimizer.in_backward.unwrap_or(false),
            state: config.optimizer.state.unwrap_or_default(),
        }
    }

    /// Sets every technique of `config` to this policy's.
    pub fn apply(&self, config: &mut TrainConfig) {
        if config.model.kind == ModelKind::Gpt || config.model.recompute.is_some() {
            config.model.recompute = Some(self.recompute);
        }
        config.optimizer.in_backward = Some(self.in_backward);
        config.optimizer.state = Some(self.state);
    }

    /// The policy in a few words, as the plan prints it.
    pub fn describe(&self) -> String {
        let recompute = match self.recompute {
            Recompute::None => "no recomputation",
            Recompute::Cheap => "cheap recomputation",
            Recompute::CheapUp => "cheap recomputation and the up projection",
            Recompute::Blocks => "blocks recomputed",
            Recompute::BlocksTiled => "blocks recomputed, MLPs tiled",
        };
        let update = if self.in_backward {
            "update in backward"
        } else {
            "update after"
        };
        let state = match self.state {
            StateKind::F32 => "f32 state",
            StateKind::Bf16 => "bf16 state",
            StateKind::Int8 => "int8 state",
        };
        format!("{recompute}, {update}, {state}")
    }
}

/// Sets the techniques `config` leaves unset to those `saved` (a checkpoint's run) trained
/// with: a resumed run does not choose again.
pub fn keep_unset(saved: &TrainConfig, config: &mut TrainConfig) {
    if config.model.recompute.is_none() {
        config.model.recompute = saved.model.recompute;
    }
    if config.optimizer.in_backward.is_none() {
        config.optimizer.in_backward = saved.optimizer.in_backward;
    }
    if config.optimizer.state.is_none() {
        config.optimizer.state = saved.optimizer.state;
    }
}

/// The candidates of `config`'s policy for a model that offers `knobs`, by precision of the
/// optimizer state, each tier in the order of preference: the first tier is tried alone, the
/// next only if none of it fits.
pub fn tiers(config: &TrainConfig, knobs: Knobs) -> Vec<Vec<Policy>> {
    let recomputes: Vec<Recompute> = match config.model.recompute {
        Some(pinned) => vec![pinned],
        // Offloaded activations are the inputs of recomputed blocks.
        None if config.model.offload_activations => knobs
            .recomputes()
            .into_iter()
            .filter(|&r| r >= Recompute::Blocks)
            .collect(),
        None => knobs.recomputes(),
    };
    let allowed = config.optimizer.clip == 0.0 && config.precision.dtype != PrecisionKind::F16;
    let in_backward: Vec<bool> = match config.optimizer.in_backward {
        Some(pinned) => vec![pinned],
        None if allowed => vec![false, true],
        None => vec![false],
    };
    let states: Vec<StateKind> = match config.optimizer.state {
        Some(pinned) => vec![pinned],
        None if config.optimizer.kind == crate::config::OptimizerKind::Adamw => {
            vec![StateKind::F32, StateKind::Bf16, StateKind::Int8]
        }
        None => vec![StateKind::F32],
    };
    states
        .into_iter()
        .map(|state| {
            recomputes
                .iter()
                .flat_map(|&recompute| {
                    in_backward.iter().map(move |&in_backward| Policy {
                        recompute,
                        in_backward,
                        state,
                    })
                })
                .collect()
        })
        .collect()
}

/// One candidate as planned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// Its techniques.
    pub policy: Policy,
    /// The largest micro-batch whose step fits; none when not one sample fits (or, for the
    /// step in the backward pass, when the whole batch does not fit in one micro-batch).
    pub micro: Option<usize>,
    /// The predicted peak of a step at that size.
    pub predicted_peak: Option<u64>,
    /// The predicted seconds of a step at that size.
    pub predicted_seconds: Option<f64>,
}

/// Predicted times within this fraction of the fastest count as equally fast.
pub const TIE: f64 = 0.02;

/// The index in `candidates` of the fastest that fits; of those within [`TIE`] of it, the
/// first. None when none fits.
pub fn fastest(candidates: &[Candidate]) -> Option<usize> {
    let seconds = |c: &Candidate| c.micro.and(c.predicted_seconds);
    let fastest = candidates
        .iter()
        .filter_map(seconds)
        .min_by(f64::total_cmp)?;
    candidates
        .iter()
        .position(|c| seconds(c).is_some_and(|s| s <= fastest * (1.0 + TIE)))
}

/// What the policy search found: every candidate planned, the one chosen, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyPlan {
    /// Every candidate planned, in the order tried.
    pub candidates: Vec<Candidate>,
    /// The chosen techniques.
    pub chosen: Policy,
    /// Why, in a sentence.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the built-in GPT-2 offers (a Llama-family model offers `up_recompute` too).
    const GPT: Knobs = Knobs {
        cheap_recompute: true,
        up_recompute: false,
        block_recompute: true,
        tiled_mlp: true,
        offload_activations: true,
        fused_head: None,
    };

    fn candidate(recompute: Recompute, micro: Option<usize>, seconds: f64) -> Candidate {
        Candidate {
            policy: Policy {
                recompute,
                in_backward: false,
                state: StateKind::F32,
            },
            micro,
            predicted_peak: micro.map(|m| m as u64),
            predicted_seconds: micro.map(|_| seconds),
        }
    }

    #[test]
    fn the_fastest_that_fits_wins_and_a_tie_goes_to_the_first() {
        let none = candidate(Recompute::None, None, 0.0);
        let cheap = candidate(Recompute::Cheap, Some(4), 2.0);
        let blocks = candidate(Recompute::Blocks, Some(16), 1.5);
        assert_eq!(
            fastest(&[none.clone(), cheap.clone(), blocks.clone()]),
            Some(2)
        );
        let tied = candidate(Recompute::Blocks, Some(16), 2.0);
        assert_eq!(fastest(&[cheap.clone(), tied]), Some(0));
        let nearly = candidate(Recompute::Blocks, Some(16), 1.99);
        assert_eq!(fastest(&[cheap, nearly]), Some(0), "within the tie");
        assert_eq!(fastest(&[none]), None);
    }

    #[test]
    fn pinned_techniques_stay_and_forbidden_ones_are_never_proposed() {
        let mut config = TrainConfig::default();
        let all = tiers(&config, GPT);
        // Clipping is on by default: no step in the backward pass.
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].len(), 4);
        assert!(all.iter().flatten().all(|p| !p.in_backward));
        assert_eq!(all[2][0].state, StateKind::Int8);
        config.optimizer.clip = 0.0;
        assert_eq!(tiers(&config, GPT)[0].len(), 8);
        config.precision.dtype = PrecisionKind::F16;
        assert!(tiers(&config, GPT).iter().flatten().all(|p| !p.in_backward));
        config.precision.dtype = PrecisionKind::Bf16;
        config.model.recompute = Some(Recompute::Cheap);
        config.optimizer.state = Some(StateKind::Bf16);
        let pinned = tiers(&config, GPT);
        assert_eq!(pinned.len(), 1);
        assert!(
            pinned[0]
                .iter()
                .all(|p| p.recompute == Recompute::Cheap && p.state == StateKind::Bf16)
        );
        let mut applied = TrainConfig::default();
        pinned[0][1].apply(&mut applied);
        assert_eq!(applied.optimizer.in_backward, Some(true));
        assert_eq!(Policy::manual(&applied), pinned[0][1]);
    }
}
