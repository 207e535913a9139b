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
//!   [`headroom_kernels::PlanTarget::rates`]). The optimizer step in the backward pass saves
//!   memory only when a step is one micro-batch (a step of several holds every gradient until
//!   its last micro-batch), so its candidates are planned at the whole batch alone. When no
//!   candidate fits, the planner's error names the settings that kept that step out (clipping,
//!   f16 loss scaling, a batch too large for one micro-batch) and the largest batch that fits
//!   with it.
//! - The chosen candidate is the fastest that fits; of those within [`TIE`] of the fastest, the
//!   first in the order none, cheap, cheap-up, blocks, blocks-tiled, each without and then with
//!   the step in the backward pass: a technique must earn its place by time, since each has a
//!   cost the rates do not price (an update in the backward pass cannot be redone after an
//!   out-of-memory).
//! - The host tier (the optimizer, the recomputed blocks' inputs, or both, offloaded) is tried
//!   only when no candidate of the same state precision fits on the device alone, and before a
//!   narrower state: it changes nothing of the optimization, so it comes first; the copies
//!   between the tiers are priced at the transfer rate. Streaming the blocks' weights from the
//!   host tier (with the optimizer there, and whole blocks recomputed) comes last of the host
//!   tier's candidates, still before a narrower state: it moves every weight twice a step.
//!   Each candidate that offloads block inputs or streams weights is tried fetching them one
//!   block ahead (first: its copies run beside the block before it on a GPU) and not (a
//!   block's input and weights less on the device, its kernels waiting for the copies).
//! - In a run of several ranks whose model can be sharded (a built-in GPT, the batch divided
//!   evenly), each candidate is tried with its parameters whole and then sharded over the
//!   ranks (ZeRO stage 3), beside it in the same tier: sharding changes nothing of the
//!   optimization, and its collectives are priced at the link's rate
//!   (`memory.link_bandwidth`), as the whole candidates' gradient sums are, so it is chosen
//!   where it is faster (a larger micro-batch) or where nothing whole fits. A sharded
//!   candidate updates after the backward pass and streams no weights.
//! - The state's precision is lowered (bf16, then int8) only when no candidate of the
//!   precision above fits even one sample: it changes the optimization slightly, so the plan
//!   says so. A resumed run keeps its checkpoint's techniques instead of choosing again.
//! - The run trains with the chosen techniques as a [`Choice`] beside its configuration, which
//!   stays as the user gave it.

use serde::{Deserialize, Serialize};

use crate::config::{ModelKind, PrecisionKind, Recompute, StateKind, TrainConfig};
use crate::model::Knobs;
use crate::planning::choice::Choice;

/// One combination of the memory techniques.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// What the backward pass computes again.
    pub recompute: Recompute,
    /// Whether each parameter is updated inside the backward pass.
    pub in_backward: bool,
    /// The optimizer state's precision.
    pub state: StateKind,
    /// Whether the recomputed blocks' inputs wait in the host tier.
    #[serde(default)]
    pub offload_activations: bool,
    /// Whether the optimizer's state and updates are in the host tier.
    #[serde(default)]
    pub offload_optimizer: bool,
    /// Whether the blocks' weights live in the host tier, streamed to the device block by
    /// block (with the optimizer offloaded).
    #[serde(default)]
    pub offload_weights: bool,
    /// Whether offloaded block inputs and streamed weights come back one block ahead.
    #[serde(default = "on")]
    pub fetch_ahead: bool,
    /// Whether the parameters are sharded over the ranks (ZeRO stage 3).
    #[serde(default)]
    pub shard_params: bool,
}

/// A switch on unless a saved policy says otherwise.
fn on() -> bool {
    true
}

impl Policy {
    /// The techniques `config` sets, with the unset ones off.
    pub fn manual(config: &TrainConfig) -> Self {
        let offload_activations = config.model.offloads_activations();
        let offload_weights = config.model.offloads_weights();
        // Offloaded activations are the inputs of recomputed blocks; streamed blocks are
        // recomputed.
        let fallback = match offload_activations || offload_weights {
            true => Recompute::Blocks,
            false => Recompute::None,
        };
        Self {
            recompute: config.model.recompute.unwrap_or(fallback),
            in_backward: config.optimizer.in_backward.unwrap_or(false),
            state: config.optimizer.state.unwrap_or_default(),
            offload_activations,
            offload_optimizer: config.optimizer.offloads(),
            offload_weights,
            fetch_ahead: config.model.fetches_ahead(),
            shard_params: config.optimizer.shards_params(),
        }
    }

    /// This policy as a run of `config` trains with it: all of its techniques, but the model's
    /// where the model has none to set (neither a GPT nor recomputed by the configuration).
    pub fn choice(&self, config: &TrainConfig) -> Choice {
        let model = config.model.kind == ModelKind::Gpt || config.model.recompute.is_some();
        Choice {
            recompute: model.then_some(self.recompute),
            offload_activations: model.then_some(self.offload_activations),
            offload_weights: model.then_some(self.offload_weights),
            fetch_ahead: model.then_some(self.fetch_ahead),
            in_backward: Some(self.in_backward),
            state: Some(self.state),
            offload_optimizer: Some(self.offload_optimizer),
            shard_params: Some(self.shard_params),
        }
    }

    /// Sets every technique of `config` to this policy's ([`Policy::choice`]): how the planner
    /// makes the configuration of a candidate it probes.
    pub fn apply(&self, config: &mut TrainConfig) {
        self.choice(config).lay_over(config);
    }

    /// Whether anything waits in the host tier.
    pub fn offloads(&self) -> bool {
        self.offload_activations || self.offload_optimizer || self.offload_weights
    }

    /// What it keeps in the host tier, as the plan's table names it (`in turn`: brought back
    /// as each block starts, not one block ahead).
    pub fn offloaded(&self) -> String {
        let word = self.offload_words().0;
        match self.fetches_in_turn() {
            true => format!("{word} in turn"),
            false => word.to_owned(),
        }
    }

    /// Whether it brings block inputs or weights back from the host tier as each block starts
    /// instead of one block ahead.
    fn fetches_in_turn(&self) -> bool {
        (self.offload_activations || self.offload_weights) && !self.fetch_ahead
    }

    /// What it keeps in the host tier: the plan table's word, and the description's phrase.
    fn offload_words(&self) -> (&'static str, &'static str) {
        match (
            self.offload_activations,
            self.offload_optimizer,
            self.offload_weights,
        ) {
            (false, false, false) => ("-", ""),
            (true, false, _) => ("activations", ", activations offloaded"),
            (false, true, false) => ("optimizer", ", optimizer offloaded"),
            (true, true, false) => ("both", ", activations and optimizer offloaded"),
            (false, _, true) => ("weights", ", weights streamed, optimizer offloaded"),
            (true, _, true) => (
                "all",
                ", weights streamed, activations and optimizer offloaded",
            ),
        }
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
            StateKind::F32 => "state in the parameters' dtype",
            StateKind::Bf16 => "bf16 state",
            StateKind::Int8 => "int8 state",
        };
        let (_, offloaded) = self.offload_words();
        let turn = match self.fetches_in_turn() {
            true => ", each block's copies back as it starts",
            false => "",
        };
        let sharded = match self.shard_params {
            true => ", parameters sharded",
            false => "",
        };
        format!("{recompute}, {update}, {state}{offloaded}{turn}{sharded}")
    }
}

/// The candidates of `config`'s policy for a model that offers `knobs`, by precision of the
/// optimizer state and, within a precision, without and then with the host tier, each tier in
/// the order of preference: the first tier is tried alone, the next only if none of it fits.
/// Offloading, which changes nothing of the optimization, comes before a narrower state.
pub fn tiers(config: &TrainConfig, knobs: Knobs) -> Vec<Vec<Policy>> {
    let allowed = config.optimizer.clip == 0.0 && config.precision.dtype != PrecisionKind::F16;
    let in_backward = choices(config.optimizer.in_backward, allowed);
    let shards = shards(config, knobs);
    let offloads = offloads(config, knobs);
    let mut tiers = Vec::new();
    for state in states(config) {
        for group in &offloads {
            let mut tier = Vec::new();
            for &(activations, optimizer, weights) in group {
                let fetched = activations || weights;
                let aheads = aheads(config, fetched);
                for recompute in recomputes(config, knobs, fetched) {
                    for &in_backward in &in_backward {
                        for &fetch_ahead in &aheads {
                            for &shard_params in &shards {
                                // Sharded parameters are updated after the backward pass,
                                // and not streamed.
                                let whole = in_backward || weights;
                                if shard_params && whole {
                                    continue;
                                }
                                tier.push(Policy {
                                    recompute,
                                    in_backward,
                                    state,
                                    offload_activations: activations,
                                    offload_optimizer: optimizer,
                                    offload_weights: weights,
                                    fetch_ahead,
                                    shard_params,
                                });
                            }
                        }
                    }
                }
            }
            tiers.push(tier);
        }
    }
    tiers
}

/// The candidate of `config`'s policy tried last, for a model that offers `knobs`: the one
/// that holds the least on the device.
pub(crate) fn lightest(config: &TrainConfig, knobs: Knobs) -> Option<Policy> {
    tiers(config, knobs).pop()?.pop()
}

/// Whether to shard the parameters over the ranks: the pinned setting, else whole and then
/// sharded in a run of several ranks whose model can be sharded and whose settings allow it
/// (the state not sharded on its own, no streamed weights), else whole.
fn shards(config: &TrainConfig, knobs: Knobs) -> Vec<bool> {
    let ranks = config.optimizer.launched_as.map_or(1, |(_, ranks)| ranks);
    let allowed = knobs.shard_params
        && ranks > 1
        && !config.optimizer.shard_state
        && !config.model.offloads_weights();
    let pinned = match config.optimizer.shard_grads {
        true => Some(true),
        false => config.optimizer.shard_params,
    };
    choices(pinned, allowed)
}

/// Whether to fetch block inputs and weights ahead, for a candidate that brings them back from
/// the host tier (`fetched`) or not: the pinned setting, else ahead and then not; ahead for
/// one that brings nothing back (moot).
fn aheads(config: &TrainConfig, fetched: bool) -> Vec<bool> {
    match config.model.fetch_ahead {
        Some(pinned) => vec![pinned],
        None if fetched => vec![true, false],
        None => vec![true],
    }
}

/// The recomputations a candidate that offloads activations or streams weights (or not) may
/// use: whole blocks alone where it does.
fn recomputes(config: &TrainConfig, knobs: Knobs, whole_blocks: bool) -> Vec<Recompute> {
    match config.model.recompute {
        Some(pinned) => vec![pinned],
        None if whole_blocks => knobs
            .recomputes()
            .into_iter()
            .filter(|&r| r >= Recompute::Blocks)
            .collect(),
        None => knobs.recomputes(),
    }
}

/// The (activations, optimizer, weights) offloads to try, in groups tried in order: the
/// preferred one (without the host tier unless pinned), then the others without streamed
/// weights, then those with them, pinned settings kept, each only where the model and the run
/// allow it (activations and weights: a model that offers it, with whole blocks recomputable;
/// optimizer: an unsharded state; weights: with the optimizer offloaded, parameters not
/// sharded).
fn offloads(config: &TrainConfig, knobs: Knobs) -> Vec<Vec<(bool, bool, bool)>> {
    let blocks = knobs.block_recompute
        && config
            .model
            .recompute
            .is_none_or(|r| r >= Recompute::Blocks);
    let activations = choices(
        config.model.offload_activations,
        knobs.offload_activations && blocks,
    );
    // A state sharded by whole parameters is broadcast from device to device; sharded
    // parameters' chunks of state are offloaded as a whole model's state is.
    let optimizer = choices(config.optimizer.offload, !config.optimizer.shard_state);
    let weights = choices(
        config.model.offload_weights,
        knobs.offload_weights && blocks && !config.optimizer.shards_params(),
    );
    let all: Vec<_> = activations
        .iter()
        .flat_map(|&a| optimizer.iter().map(move |&o| (a, o)))
        .flat_map(|(a, o)| weights.iter().map(move |&w| (a, o, w)))
        .filter(|&(_, optimizer, weights)| optimizer || !weights)
        .collect();
    // Each list starts with its preferred setting (the pinned one, or off): the first
    // combination that may be is the preferred one.
    let Some(&first) = all.first() else {
        return Vec::new();
    };
    let group = |p: &(bool, bool, bool)| match *p {
        p if p == first => 0,
        (_, _, false) => 1,
        (_, _, true) => 2,
    };
    (0..3)
        .map(|g| {
            all.iter()
                .copied()
                .filter(|p| group(p) == g)
                .collect::<Vec<_>>()
        })
        .filter(|g| !g.is_empty())
        .collect()
}

/// The settings to try of a switch: the pinned one alone, or off then on where `allowed`, or
/// off.
fn choices(pinned: Option<bool>, allowed: bool) -> Vec<bool> {
    match pinned {
        Some(pinned) => vec![pinned],
        None if allowed => vec![false, true],
        None => vec![false],
    }
}

/// The optimizer state's precisions to try, the widest first: the pinned one alone, AdamW's
/// three, or SGD's f32.
pub(crate) fn states(config: &TrainConfig) -> Vec<StateKind> {
    match config.optimizer.state {
        Some(pinned) => vec![pinned],
        None if config.optimizer.kind == crate::config::OptimizerKind::Adamw => {
            vec![StateKind::F32, StateKind::Bf16, StateKind::Int8]
        }
        None => vec![StateKind::F32],
    }
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
    /// The host tier's predicted peak in that step, where the candidate offloads.
    #[serde(default)]
    pub predicted_host_peak: Option<u64>,
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
        offload_weights: true,
        fused_head: None,
        shard_params: true,
    };

    fn candidate(recompute: Recompute, micro: Option<usize>, seconds: f64) -> Candidate {
        Candidate {
            policy: Policy {
                recompute,
                in_backward: false,
                state: StateKind::F32,
                offload_activations: false,
                offload_optimizer: false,
                offload_weights: false,
                fetch_ahead: true,
                shard_params: false,
            },
            micro,
            predicted_peak: micro.map(|m| m as u64),
            predicted_seconds: micro.map(|_| seconds),
            predicted_host_peak: None,
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
        // Clipping is on by default: no step in the backward pass. Each precision is tried
        // without the host tier, then with it, then with the weights streamed.
        assert_eq!(all.len(), 9);
        assert_eq!(all[0].len(), 4);
        assert!(all.iter().flatten().all(|p| !p.in_backward));
        assert_eq!(all[6][0].state, StateKind::Int8);
        assert!(all[0].iter().all(|p| !p.offloads()));
        assert!(
            all[1]
                .iter()
                .all(|p| p.offloads() && !p.offload_weights && p.state == StateKind::F32)
        );
        // Streamed weights go with the optimizer on the host and whole blocks recomputed.
        assert!(all[2].iter().all(|p| p.offload_weights
            && p.offload_optimizer
            && p.recompute >= Recompute::Blocks
            && p.state == StateKind::F32));
        assert_eq!(
            all[2].len(),
            8,
            "blocks or tiled, activations offloaded or not, fetched ahead or not"
        );
        // Activations are offloaded from recomputed blocks alone; what comes back from the
        // host tier is tried fetched ahead and then not, what does not only ahead (moot).
        let offloading = all[1].iter().filter(|p| p.offload_activations);
        assert!(offloading.clone().count() > 0);
        assert!(offloading.clone().all(|p| p.recompute >= Recompute::Blocks));
        for tier in &all {
            for pair in tier.windows(2) {
                let fetched = pair[0].offload_activations || pair[0].offload_weights;
                if fetched && pair[0].fetch_ahead {
                    assert_eq!(
                        pair[1],
                        Policy {
                            fetch_ahead: false,
                            ..pair[0]
                        }
                    );
                }
            }
            let moot = tier
                .iter()
                .filter(|p| !p.offload_activations && !p.offload_weights);
            assert!(moot.clone().all(|p| p.fetch_ahead));
        }
        let mut pinned_ahead = config.clone();
        pinned_ahead.model.fetch_ahead = Some(false);
        let in_turn = tiers(&pinned_ahead, GPT);
        assert!(in_turn.iter().flatten().all(|p| !p.fetch_ahead));
        assert_eq!(in_turn[2].len(), 4);
        config.optimizer.clip = 0.0;
        assert_eq!(tiers(&config, GPT)[0].len(), 8);
        config.precision.dtype = PrecisionKind::F16;
        assert!(tiers(&config, GPT).iter().flatten().all(|p| !p.in_backward));
        config.precision.dtype = PrecisionKind::Bf16;
        config.model.recompute = Some(Recompute::Cheap);
        config.optimizer.state = Some(StateKind::Bf16);
        let pinned = tiers(&config, GPT);
        // Cheap recomputation keeps its activations on the device: the optimizer alone may go.
        assert_eq!(pinned.len(), 2);
        assert!(
            pinned
                .iter()
                .flatten()
                .all(|p| p.recompute == Recompute::Cheap
                    && p.state == StateKind::Bf16
                    && !p.offload_activations)
        );
        config.optimizer.offload = Some(false);
        assert_eq!(tiers(&config, GPT).len(), 1);
        let mut applied = TrainConfig::default();
        pinned[0][1].apply(&mut applied);
        assert_eq!(applied.optimizer.in_backward, Some(true));
        assert_eq!(Policy::manual(&applied), pinned[0][1]);
    }

    #[test]
    fn a_run_of_several_ranks_tries_each_candidate_whole_and_then_sharded() {
        let mut config = TrainConfig::default();
        let alone = tiers(&config, GPT);
        config.optimizer.launched_as = Some((1, 4));
        let ranks = tiers(&config, GPT);
        assert_eq!(ranks.len(), alone.len());
        for (tier, whole) in ranks.iter().zip(&alone) {
            let sharded: Vec<Policy> = tier.iter().filter(|p| p.shard_params).copied().collect();
            let unsharded: Vec<Policy> = tier.iter().filter(|p| !p.shard_params).copied().collect();
            assert_eq!(
                &unsharded, whole,
                "the whole candidates as one process has them"
            );
            // Each sharded candidate follows its whole twin; none streams weights or updates
            // in the backward pass.
            for p in &sharded {
                let at = tier.iter().position(|q| q == p).unwrap();
                assert_eq!(
                    tier[at - 1],
                    Policy {
                        shard_params: false,
                        ..*p
                    }
                );
                assert!(!p.offload_weights && !p.in_backward);
            }
            let streams = whole.iter().all(|p| p.offload_weights || p.in_backward);
            assert_eq!(sharded.is_empty(), streams, "{whole:?}");
        }
        let sharded = ranks.iter().flatten().find(|p| p.shard_params).unwrap();
        assert!(sharded.describe().ends_with(", parameters sharded"));
        let mut applied = config.clone();
        sharded.apply(&mut applied);
        assert!(applied.optimizer.shards_params());
        // Pinned either way, or a state sharded on its own, or a model that cannot be
        // sharded: one setting.
        for pinned in [Some(false), Some(true)] {
            config.optimizer.shard_params = pinned;
            let all = tiers(&config, GPT);
            assert!(all.iter().flatten().all(|p| Some(p.shard_params) == pinned));
        }
        config.optimizer.shard_params = None;
        config.optimizer.shard_state = true;
        assert!(
            tiers(&config, GPT)
                .iter()
                .flatten()
                .all(|p| !p.shard_params)
        );
        config.optimizer.shard_state = false;
        let mlp = Knobs {
            shard_params: false,
            ..GPT
        };
        assert!(
            tiers(&config, mlp)
                .iter()
                .flatten()
                .all(|p| !p.shard_params)
        );
    }
}
