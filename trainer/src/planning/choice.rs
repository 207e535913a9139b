//! What a run trains with beyond its configuration: the memory techniques the planner chose
//! ([`Policy::choice`](crate::planning::policy::Policy::choice)), or those a resumed run's
//! checkpoint trained with. It is a value beside the configuration, which stays as the user
//! gave it; the run lays it over the configuration where it builds its model, optimizer and
//! steps, and where it records the configuration it trained with.

use crate::config::{Recompute, StateKind, TrainConfig};

/// The memory techniques a run trains with where its configuration leaves them open: each one
/// set here replaces the configuration's, each one unset leaves it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Choice {
    /// `model.recompute`.
    pub recompute: Option<Recompute>,
    /// `model.offload_activations`.
    pub offload_activations: Option<bool>,
    /// `model.offload_weights`.
    pub offload_weights: Option<bool>,
    /// `model.fetch_ahead`.
    pub fetch_ahead: Option<bool>,
    /// `optimizer.in_backward`.
    pub in_backward: Option<bool>,
    /// `optimizer.state`.
    pub state: Option<StateKind>,
    /// `optimizer.offload`.
    pub offload_optimizer: Option<bool>,
    /// `optimizer.shard_params`.
    pub shard_params: Option<bool>,
}

impl Choice {
    /// What a resumed run keeps of the techniques its checkpoint's run (configured as `saved`)
    /// trained with: those that `config` leaves unset, so that the run does not choose again.
    pub fn kept(saved: &TrainConfig, config: &TrainConfig) -> Self {
        let (then, now) = (&saved.model, &config.model);
        let (then_optimizer, now_optimizer) = (&saved.optimizer, &config.optimizer);
        Self {
            recompute: unset_then(now.recompute, then.recompute),
            offload_activations: unset_then(now.offload_activations, then.offload_activations),
            offload_weights: unset_then(now.offload_weights, then.offload_weights),
            fetch_ahead: unset_then(now.fetch_ahead, then.fetch_ahead),
            in_backward: unset_then(now_optimizer.in_backward, then_optimizer.in_backward),
            state: unset_then(now_optimizer.state, then_optimizer.state),
            offload_optimizer: unset_then(now_optimizer.offload, then_optimizer.offload),
            shard_params: unset_then(now_optimizer.shard_params, then_optimizer.shard_params),
        }
    }

    /// `config` with these techniques laid over it: the configuration the run trains with, as
    /// its run directory and its checkpoint record it.
    pub fn on(&self, config: &TrainConfig) -> TrainConfig {
        let mut trained = config.clone();
        self.lay_over(&mut trained);
        trained
    }

    /// Sets in `config` the techniques set here.
    pub(crate) fn lay_over(&self, config: &mut TrainConfig) {
        let (model, optimizer) = (&mut config.model, &mut config.optimizer);
        replace(&mut model.recompute, self.recompute);
        replace(&mut model.offload_activations, self.offload_activations);
        replace(&mut model.offload_weights, self.offload_weights);
        replace(&mut model.fetch_ahead, self.fetch_ahead);
        replace(&mut optimizer.in_backward, self.in_backward);
        replace(&mut optimizer.state, self.state);
        replace(&mut optimizer.offload, self.offload_optimizer);
        replace(&mut optimizer.shard_params, self.shard_params);
    }
}

/// `then` where `now` is unset; nothing to replace otherwise.
fn unset_then<T>(now: Option<T>, then: Option<T>) -> Option<T> {
    match now {
        None => then,
        Some(_) => None,
    }
}

/// Replaces `setting` with `chosen` where something was chosen.
fn replace<T>(setting: &mut Option<T>, chosen: Option<T>) {
    if chosen.is_some() {
        *setting = chosen;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resume_keeps_what_the_configuration_leaves_unset_and_nothing_else() {
        let mut saved = TrainConfig::default();
        saved.model.recompute = Some(Recompute::Blocks);
        saved.optimizer.in_backward = Some(true);
        saved.optimizer.state = Some(StateKind::Bf16);
        let mut config = TrainConfig::default();
        config.optimizer.in_backward = Some(false);
        let kept = Choice::kept(&saved, &config);
        let trained = kept.on(&config);
        assert_eq!(trained.model.recompute, Some(Recompute::Blocks));
        assert_eq!(trained.optimizer.in_backward, Some(false), "set: it stays");
        assert_eq!(trained.optimizer.state, Some(StateKind::Bf16));
        assert_eq!(trained.optimizer.offload, None, "unset on both sides");
        assert_eq!(
            config.optimizer.state, None,
            "the configuration is left as it was"
        );
    }
}
