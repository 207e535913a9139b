//! Optimizers through the model interface, clipping and schedules.

mod common;

use common::device;
use headroom_autograd::{Tape, Tensor};
use headroom_kernels::DType;
use headroom_nn::{
    Activation, AdamW, AdamWConfig, Initializer, LrSchedule, Module, Optimizer, Sgd, SgdConfig,
    clip_grad_norm, mlp, training_memory,
};

#[test]
fn clipping_reports_the_global_norm_and_the_factor_that_brings_it_down() {
    let device = device();
    let model = mlp(
        &mut Initializer::new(&device, DType::F64, 1),
        &[3, 4, 2],
        Activation::Tanh,
    )
    .unwrap();
    let x = Tensor::from_f64(&device, [5, 3], DType::F64, &[0.7; 15]).unwrap();
    let tape = Tape::new();
    let loss = tape
        .record(|| {
            model
                .forward(&x)?
                .sum_all()
                .map_err(headroom_nn::Error::from)
        })
        .unwrap();
    let params = model.parameters();
    let grads = tape
        .gradient(&loss, &params.iter().collect::<Vec<_>>())
        .unwrap();
    let want: f64 = params
        .iter()
        .flat_map(|p| grads.get(p).unwrap().to_f64().unwrap())
        .map(|g| g * g)
        .sum::<f64>()
        .sqrt();
    let clipped = clip_grad_norm(&model, &grads, 2.0, want).unwrap();
    assert!(
        (clipped.norm - 2.0 * want).abs() < 1e-12 * want,
        "the scale counts"
    );
    assert!((clipped.factor - 0.5).abs() < 1e-6);
    let unclipped = clip_grad_norm(&model, &grads, 1.0, 10.0 * want).unwrap();
    assert_eq!(unclipped.factor, 1.0);
}

#[test]
fn optimizers_refuse_a_model_they_were_not_built_for() {
    let device = device();
    let mut init = Initializer::new(&device, DType::F32, 2);
    let small = mlp(&mut init, &[3, 4, 2], Activation::Relu).unwrap();
    let mut big = mlp(&mut init, &[3, 4, 4, 2], Activation::Relu).unwrap();
    let mut adamw = AdamW::new(&small, AdamWConfig::default()).unwrap();
    let x = Tensor::from_f64(&device, [1, 3], DType::F32, &[1.0; 3]).unwrap();
    let tape = Tape::new();
    let loss = tape
        .record(|| big.forward(&x)?.sum_all().map_err(headroom_nn::Error::from))
        .unwrap();
    let grads = tape
        .gradient(&loss, &big.parameters().iter().collect::<Vec<_>>())
        .unwrap();
    let weights = |m: &dyn Module| -> Vec<Vec<f64>> {
        m.parameters().iter().map(|p| p.to_f64().unwrap()).collect()
    };
    let before = weights(&big);
    let err = adamw.step(&mut big, &grads, 1.0).unwrap_err();
    assert!(err.to_string().contains("optimizer"), "{err}");
    assert_eq!(weights(&big), before, "a refused step updates nothing");
    let nesterov = SgdConfig {
        nesterov: true,
        ..Default::default()
    };
    assert!(Sgd::new(&small, nesterov).is_err());
}

#[test]
fn optimizer_state_is_allocated_up_front_and_steps_allocate_nothing() {
    let device = device();
    let mut model = mlp(
        &mut Initializer::new(&device, DType::F32, 3),
        &[16, 32, 4],
        Activation::Relu,
    )
    .unwrap();
    let before = device.allocator().stats().in_use;
    let mut adamw = AdamW::new(&model, AdamWConfig::default()).unwrap();
    let memory = training_memory(&model, Some(&adamw));
    assert_eq!(
        device.allocator().stats().in_use - before,
        memory.optimizer_state
    );
    assert_eq!(memory.optimizer_state, 2 * memory.parameters);
    let x = Tensor::from_f64(&device, [2, 16], DType::F32, &[0.1; 32]).unwrap();
    let tape = Tape::new();
    let loss = tape
        .record(|| {
            model
                .forward(&x)?
                .sum_all()
                .map_err(headroom_nn::Error::from)
        })
        .unwrap();
    let grads = tape
        .gradient(&loss, &model.parameters().iter().collect::<Vec<_>>())
        .unwrap();
    drop((tape, loss));
    let allocations = device.allocator().stats().allocations;
    adamw.step(&mut model, &grads, 1.0).unwrap();
    assert_eq!(device.allocator().stats().allocations, allocations);
    assert_eq!(adamw.steps(), 1);
}

#[test]
fn schedules_warm_up_then_decay_and_bad_ones_are_refused() {
    let schedule = LrSchedule::WarmupCosine {
        peak: 0.1,
        min: 0.01,
        warmup: 4,
        total: 14,
    };
    schedule.validate().unwrap();
    let rates: Vec<f64> = (0..16).map(|s| schedule.at(s)).collect();
    assert!(
        rates[..4].windows(2).all(|w| w[0] < w[1]),
        "warmup rises: {rates:?}"
    );
    assert_eq!(rates[3], 0.1);
    assert!(
        rates[4..14].windows(2).all(|w| w[0] >= w[1]),
        "decay falls: {rates:?}"
    );
    assert_eq!(rates[15], 0.01);
    assert!(LrSchedule::Constant(-1.0).validate().is_err());
    assert!(
        LrSchedule::WarmupCosine {
            peak: 0.1,
            min: 0.2,
            warmup: 1,
            total: 2
        }
        .validate()
        .is_err()
    );
    assert!(
        LrSchedule::WarmupCosine {
            peak: 0.1,
            min: 0.0,
            warmup: 5,
            total: 2
        }
        .validate()
        .is_err()
    );
}
