//! The optimizer step in the backward pass: the same step as after it, bit for bit, with a
//! fraction of the gradients' memory; and its contract when something fails mid-step (an
//! out-of-memory before the first update recovered, one after it ending the run with the last
//! checkpoint intact, a non-finite gradient named).

mod common;

use common::{TempDir, checkpoint_bytes, small_config, weights};
use headroom_alloc::Tag;
use headroom_trainer::config::{PrecisionKind, StateKind, TrainConfig};
use headroom_trainer::{Error, Trainer};

/// `small_config` without clipping, its optimizer step in the backward pass or not.
fn config(dir: &TempDir, in_backward: bool) -> TrainConfig {
    let mut config = small_config(dir);
    config.optimizer.clip = 0.0;
    config.optimizer.in_backward = Some(in_backward);
    config.model.dropout = 0.1;
    config
}

/// The most the gradients held at once during the trainer's steps so far.
fn gradient_peak(trainer: &Trainer) -> u64 {
    let stats = trainer.device().allocator().stats();
    stats
        .tags
        .iter()
        .find(|t| t.tag == Tag::GRADIENTS)
        .map_or(0, |t| t.peak)
}

#[test]
fn updating_in_the_backward_pass_is_the_step_after_it_bit_for_bit_with_a_fraction_of_the_gradients()
{
    let dir = TempDir::new("in-backward-equal");
    for (state, precision) in [
        (StateKind::F32, PrecisionKind::F32),
        (StateKind::Int8, PrecisionKind::F32),
        (StateKind::Bf16, PrecisionKind::Bf16),
    ] {
        let run = |in_backward: bool| {
            let mut config = config(&dir, in_backward);
            config.optimizer.state = Some(state);
            config.precision.dtype = precision;
            // Wide enough that the weights' gradients outweigh the activations' gradients.
            config.model.width = 64;
            config.model.layers = 4;
            let mut trainer = Trainer::builder()
                .config(config)
                .overwrite()
                .build()
                .unwrap();
            let losses: Vec<u64> = (0..3)
                .map(|_| trainer.train_step().unwrap().loss.to_bits())
                .collect();
            (losses, weights(&trainer), gradient_peak(&trainer), trainer)
        };
        let (after_losses, after_weights, after_peak, _) = run(false);
        let (inside_losses, inside_weights, inside_peak, trainer) = run(true);
        assert_eq!(after_losses, inside_losses, "{state:?} {precision:?}");
        assert_eq!(after_weights, inside_weights, "{state:?} {precision:?}");
        let parameter_bytes: u64 = trainer
            .model()
            .module()
            .parameters()
            .iter()
            .map(|p| p.array().buffer().bytes() as u64)
            .sum();
        // The gradients' tag also holds the activations' gradients, alike in both.
        eprintln!(
            "{state:?} {precision:?}: gradients peaked at {after_peak} bytes, {inside_peak} updated in the backward pass, of {parameter_bytes} bytes of parameters"
        );
        assert!(
            after_peak >= parameter_bytes,
            "{after_peak} < {parameter_bytes}"
        );
        assert!(
            after_peak - inside_peak > parameter_bytes * 3 / 4,
            "{state:?} {precision:?}: gradients peaked at {inside_peak} bytes against {after_peak}"
        );
    }
}

#[test]
fn an_oom_before_the_first_update_is_recovered_and_one_after_it_ends_the_run_with_the_last_checkpoint()
 {
    let dir = TempDir::new("in-backward-oom");
    let config = config(&dir, true);
    let mut clean = Trainer::builder()
        .config(config.clone())
        .overwrite()
        .build()
        .unwrap();
    let before = clean.device().allocator().stats().allocations;
    clean.train_step().unwrap();
    let allocations = clean.device().allocator().stats().allocations - before;
    let parameters = clean.model().module().parameters().len();
    let (mut recovered, mut interrupted) = (0, None);
    for k in 0..allocations {
        let mut trainer = Trainer::builder()
            .config(config.clone())
            .overwrite()
            .build()
            .unwrap();
        trainer.device().allocator().with(|a| a.inject_oom(k));
        match trainer.train_step() {
            Ok(report) => {
                // Recovered as any micro-batch: the same weights as the same cut without a
                // failure (two micro-batches that accumulate).
                assert_eq!(report.ooms.len(), 1, "allocation {k}");
                let mut replay = Trainer::builder()
                    .config(config.clone())
                    .overwrite()
                    .build()
                    .unwrap();
                replay.train_step_with(&report.micro_sizes).unwrap();
                assert_eq!(weights(&trainer), weights(&replay), "allocation {k}");
                recovered += 1;
            }
            Err(Error::UpdateInterrupted {
                step,
                updated,
                parameters: all,
                ..
            }) => {
                assert_eq!((step, all), (1, parameters), "allocation {k}");
                assert!(
                    (1..parameters).contains(&updated),
                    "allocation {k}: {updated}"
                );
                interrupted.get_or_insert(k);
            }
            Err(err) => panic!("allocation {k}: {err}"),
        }
    }
    assert!(
        recovered > 0,
        "the forward pass allocates before any update"
    );
    let Some(first_after) = interrupted else {
        panic!("no allocation after an update failed the run");
    };

    // A run whose second step fails after an update stops, and its checkpoint is the first
    // step's, untouched.
    let mut trainer = Trainer::builder()
        .config(config.clone())
        .overwrite()
        .build()
        .unwrap();
    trainer.train_step().unwrap();
    trainer.save_checkpoint().unwrap();
    let saved = checkpoint_bytes(&dir.0);
    trainer
        .device()
        .allocator()
        .with(|a| a.inject_oom(first_after));
    let err = trainer.run(false).unwrap_err();
    assert!(
        matches!(err, Error::UpdateInterrupted { step: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("last checkpoint"), "{err}");
    assert_eq!(checkpoint_bytes(&dir.0), saved);
}

#[test]
fn a_non_finite_gradient_stops_the_run_naming_the_parameter_before_updating_it() {
    let dir = TempDir::new("in-backward-nan");
    // On the device the trainer checks each gradient; offloaded, the host tier's thread checks
    // its copy. Both name the same parameter.
    let named = [false, true].map(|offload| {
        let mut config = config(&dir, true);
        // The first update throws every weight out to about 1e38: the next forward pass
        // overflows.
        config.optimizer.lr = 1e38;
        config.optimizer.schedule = headroom_trainer::config::ScheduleKind::Constant;
        config.optimizer.offload = Some(offload);
        let mut trainer = Trainer::builder()
            .config(config)
            .overwrite()
            .build()
            .unwrap();
        trainer.train_step().unwrap();
        let before = weights(&trainer);
        let err = trainer.train_step().unwrap_err();
        let Error::NonFiniteGradient { step, parameter } = &err else {
            panic!("offload {offload}: {err}");
        };
        assert_eq!(*step, 2);
        assert!(
            trainer
                .model()
                .module()
                .named_parameters()
                .iter()
                .any(|(name, _)| name == parameter),
            "{parameter}"
        );
        assert_eq!(
            weights(&trainer),
            before,
            "offload {offload}: no parameter was updated"
        );
        parameter.clone()
    });
    assert_eq!(named[0], named[1]);
}

#[test]
fn settings_that_need_every_gradient_first_are_refused_with_it() {
    let dir = TempDir::new("in-backward-config");
    let mut clipped = config(&dir, true);
    clipped.optimizer.clip = 1.0;
    let err = clipped.validate().unwrap_err().to_string();
    assert!(
        err.contains("optimizer.in_backward") && err.contains("optimizer.clip"),
        "{err}"
    );
    let mut scaled = config(&dir, true);
    scaled.precision.dtype = PrecisionKind::F16;
    let err = scaled.validate().unwrap_err().to_string();
    assert!(err.contains("f16 loss scaling"), "{err}");
    let mut sharded = config(&dir, true);
    sharded.optimizer.shard_state = true;
    let err = sharded.validate().unwrap_err().to_string();
    assert!(err.contains("optimizer.shard_state"), "{err}");
    let mut sgd = config(&dir, false);
    sgd.optimizer.kind = headroom_trainer::config::OptimizerKind::Sgd;
    sgd.optimizer.state = Some(StateKind::Int8);
    let err = sgd.validate().unwrap_err().to_string();
    assert!(err.contains("optimizer.state"), "{err}");
}
