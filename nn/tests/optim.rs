//! Optimizers through the model interface, clipping and schedules.

mod common;

use common::{device, seed};
use headroom_autograd::{Gradients, Tape, Tensor};
use headroom_kernels::{Array, DType};
use headroom_nn::loss::cross_entropy;
use headroom_nn::{
    Activation, AdamW, AdamWConfig, Initializer, LrSchedule, Module, Optimizer, Sgd, SgdConfig,
    Shared, StatePrecision, StateShard, clip_grad_norm, mlp, training_memory,
};

/// Every parameter's values, in visiting order.
fn weights(model: &dyn Module) -> Vec<Vec<f64>> {
    let parameters = model.parameters();
    parameters.iter().map(|p| p.to_f64().unwrap()).collect()
}

/// The gradients of every parameter of `model` for the sum of its output on `x`.
fn gradients_of_sum(model: &dyn Module, x: &Tensor) -> Gradients {
    let tape = Tape::new();
    let loss = tape
        .record(|| {
            model
                .forward(x)?
                .sum_all()
                .map_err(headroom_nn::Error::from)
        })
        .unwrap();
    tape.gradient(&loss, &model.parameters().iter().collect::<Vec<_>>())
        .unwrap()
}

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
    let params = model.parameters();
    let grads = gradients_of_sum(&model, &x);
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
    let grads = gradients_of_sum(&model, &x);
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

/// Two ranks sharding AdamW's state (ZeRO stage 1) between them: each keeps and updates its
/// share of the parameters, bit for bit as the whole state does, in every state precision; the
/// shares add up to the whole state, each near half of it, and together they name every buffer
/// once, in the order of the whole state's names.
#[test]
fn a_sharded_state_updates_its_share_as_the_whole_state_does() {
    let device = device();
    let build = || {
        mlp(
            &mut Initializer::new(&device, DType::F32, 4),
            &[32, 64, 64, 64, 64, 32],
            Activation::Relu,
        )
        .unwrap()
    };
    let x = Tensor::from_f64(&device, [3, 32], DType::F32, &[0.3; 96]).unwrap();
    let gradients = |model: &dyn Module| gradients_of_sum(model, &x);
    for precision in [
        StatePrecision::Full,
        StatePrecision::Bf16,
        StatePrecision::Int8,
    ] {
        let in_use = || device.allocator().stats().in_use;
        let mut whole_model = build();
        let before = in_use();
        let mut whole = AdamW::with_state(&whole_model, AdamWConfig::default(), precision).unwrap();
        let whole_bytes = in_use() - before;
        let mut measured = Vec::new();
        let mut ranks: Vec<_> = (0..2)
            .map(|rank| {
                let model = build();
                let shard = StateShard::balanced(&model, rank, 2).unwrap();
                let before = in_use();
                let adamw =
                    AdamW::with_shard(&model, AdamWConfig::default(), precision, shard).unwrap();
                measured.push(in_use() - before);
                (model, adamw)
            })
            .collect();
        // Measured by the allocator: the shares add up to the whole, each near half of it.
        assert_eq!(measured[0] + measured[1], whole_bytes, "{precision:?}");
        assert!(
            measured.iter().all(|&b| b * 100 <= whole_bytes * 52),
            "{precision:?}: {measured:?} of {whole_bytes}"
        );
        for _ in 0..2 {
            let before = weights(&whole_model);
            let grads = gradients(&whole_model);
            whole.step(&mut whole_model, &grads, 1.0).unwrap();
            for (model, adamw) in &mut ranks {
                let grads = gradients(model);
                adamw.step(model, &grads, 1.0).unwrap();
            }
            // The owners' weights are the new weights; a data-parallel run broadcasts them.
            let owners = ranks[0].1.buffers().shard().clone();
            let fresh: Vec<Tensor> = whole_model.parameters();
            for (index, want) in fresh.iter().enumerate() {
                let owner = owners.owner(index).unwrap();
                let got = ranks[owner].0.parameters()[index].to_f64().unwrap();
                let other = ranks[1 - owner].0.parameters()[index].to_f64().unwrap();
                assert!(
                    got == want.to_f64().unwrap() && other == before[index],
                    "{precision:?}, parameter {index}: only its owner updates it, as one state does"
                );
            }
            for (model, _) in &mut ranks {
                let mut at = 0;
                model
                    .visit_mut(&mut |_, param| {
                        *param.array_mut() = fresh[at].array().deep_copy()?;
                        at += 1;
                        Ok(())
                    })
                    .unwrap();
            }
        }
        let bytes: Vec<u64> = ranks.iter().map(|(_, a)| a.state_bytes()).collect();
        assert_eq!(bytes[0] + bytes[1], whole.state_bytes(), "{precision:?}");
        let whole_names: Vec<String> = whole.state().0.into_iter().map(|(n, _)| n).collect();
        let mut kept: Vec<String> = ranks
            .iter()
            .flat_map(|(_, a)| a.state().0.into_iter().map(|(n, _)| n))
            .collect();
        kept.sort();
        let mut sorted = whole_names.clone();
        sorted.sort();
        assert_eq!(kept, sorted, "every buffer kept once");
        for (rank, (model, adamw)) in ranks.iter_mut().enumerate() {
            let (mut shared, mut own) = (Vec::new(), Vec::new());
            let names: Vec<String> = adamw.state().0.into_iter().map(|(n, _)| n).collect();
            let model = &*model;
            let buffers = adamw.buffers_mut();
            buffers
                .share_buffers(model, &mut |owner,
                                            name,
                                            buffer|
                 -> headroom_nn::Result<()> {
                    let Shared::Here(array) = buffer else {
                        panic!("{name}: no room on a roomy device");
                    };
                    shared.push(name.to_owned());
                    if owner == rank {
                        own.push(name.to_owned());
                    } else {
                        assert!(array.to_f64()?.iter().all(|&v| v == 0.0));
                    }
                    Ok(())
                })
                .unwrap();
            assert_eq!(
                shared, whole_names,
                "rank {rank} shares every buffer in order"
            );
            assert_eq!(own, names, "rank {rank} sends what it keeps");
        }
    }
}

#[test]
fn a_bf16_model_learns_from_steps_under_half_of_bf16s_spacing() {
    let device = device();
    let s = seed();
    let task = common::TeacherTask::new(2, 3, s);
    let (x, y) = task.sample(512, s + 1);
    let (x, y) = (
        Tensor::from_f64(&device, [512, 2], DType::BF16, &x).unwrap(),
        Tensor::from_host(&device, [512], &y).unwrap(),
    );
    // Every parameter at 1.5, where bf16's spacing is 2^-7: a step under 2^-8 rounded to
    // nearest would leave it where it was.
    let mut model = mlp(
        &mut Initializer::new(&device, DType::BF16, s),
        &[2, 3],
        Activation::Relu,
    )
    .unwrap();
    model
        .visit_mut(&mut |_, t| {
            let array = Array::full(&device, t.shape().clone(), DType::BF16, 1.5)?;
            *t = Tensor::variable(array);
            Ok(())
        })
        .unwrap();
    // Inputs and softmax's error are within [-1, 1], so is every gradient: lr * g < 2^-8.
    let lr = 1.0 / 512.0;
    let mut sgd = Sgd::new(
        &model,
        SgdConfig {
            lr,
            ..SgdConfig::default()
        },
    )
    .unwrap();
    let mut losses = Vec::new();
    for _ in 0..600 {
        let tape = Tape::new();
        let loss = tape
            .record(|| cross_entropy(&model.forward(&x)?, &y, None))
            .unwrap();
        losses.push(loss.to_f64().unwrap()[0]);
        let grads = tape
            .gradient(&loss, &model.parameters().iter().collect::<Vec<_>>())
            .unwrap();
        drop(tape);
        // Each element's step is under half of bf16's spacing at its value (the smaller
        // spacing below a power of two), so rounding to nearest would keep every one.
        for param in model.parameters() {
            let grad = grads.get(&param).unwrap().to_f64().unwrap();
            for (v, g) in param.to_f64().unwrap().iter().zip(grad) {
                let half_spacing = 2f64.powi(v.abs().log2().ceil() as i32 - 9);
                assert!(lr * g.abs() < half_spacing, "a step of {} at {v}", lr * g);
            }
        }
        sgd.step(&mut model, &grads, 1.0).unwrap();
    }
    let (start, end) = (losses[0], losses[losses.len() - 1]);
    eprintln!("bf16 loss from {start} to {end}");
    assert!(end < 0.95 * start, "loss from {start} to {end}");
}

/// An MLP 16-32-8 with ReLU, initialized from `seed`.
fn small_mlp(device: &headroom_kernels::Device, seed: u64) -> headroom_nn::Sequential {
    mlp(
        &mut Initializer::new(device, DType::F32, seed),
        &[16, 32, 8],
        Activation::Relu,
    )
    .unwrap()
}

#[test]
fn an_offloaded_state_updates_as_the_device_does_bit_for_bit_and_lives_on_the_host() {
    let (device, host) = (device(), device());
    let build = || small_mlp(&device, 4);
    let x = Tensor::from_f64(&device, [3, 16], DType::F32, &[0.3; 48]).unwrap();
    for precision in [
        StatePrecision::Full,
        StatePrecision::Bf16,
        StatePrecision::Int8,
    ] {
        let (mut kept_model, mut offloaded_model) = (build(), build());
        let whole = StateShard::whole(&kept_model);
        let config = AdamWConfig::default();
        let mut kept = AdamW::with_shard_on(&kept_model, config, precision, whole.clone(), None);
        let kept = kept.as_mut().unwrap();
        let on_device = device.allocator().stats().in_use;
        let mut offloaded =
            AdamW::with_shard_on(&offloaded_model, config, precision, whole, Some(&host)).unwrap();
        assert_eq!(
            device.allocator().stats().in_use,
            on_device,
            "no state on the device"
        );
        let state_bytes = host.allocator().stats().in_use;
        assert!(state_bytes > 0);
        for _ in 0..3 {
            let grads = gradients_of_sum(&kept_model, &x);
            kept.step(&mut kept_model, &grads, 0.5).unwrap();
            let grads = gradients_of_sum(&offloaded_model, &x);
            offloaded.step(&mut offloaded_model, &grads, 0.5).unwrap();
            assert!(
                weights(&kept_model) == weights(&offloaded_model),
                "{precision:?}: the weights differ"
            );
            assert_eq!(
                host.allocator().stats().in_use,
                state_bytes,
                "{precision:?}"
            );
        }
        let state = |o: &AdamW| -> Vec<Vec<f64>> {
            let (named, _) = o.state();
            named.iter().map(|(_, a)| a.to_f64().unwrap()).collect()
        };
        assert_eq!(state(kept), state(&offloaded), "{precision:?}");
    }
    // SGD's momentum too.
    let (mut kept_model, mut offloaded_model) = (build(), build());
    let config = SgdConfig {
        momentum: 0.9,
        ..SgdConfig::default()
    };
    let whole = StateShard::whole(&kept_model);
    let mut kept = Sgd::new(&kept_model, config).unwrap();
    let mut offloaded = Sgd::with_shard_on(&offloaded_model, config, whole, Some(&host)).unwrap();
    for _ in 0..2 {
        let grads = gradients_of_sum(&kept_model, &x);
        kept.step(&mut kept_model, &grads, 1.0).unwrap();
        let grads = gradients_of_sum(&offloaded_model, &x);
        offloaded.step(&mut offloaded_model, &grads, 1.0).unwrap();
    }
    assert!(weights(&kept_model) == weights(&offloaded_model));
}

#[test]
fn offloaded_updates_started_one_by_one_land_together_and_stop_at_a_non_finite_gradient() {
    let (device, host) = (device(), device());
    let build = || small_mlp(&device, 5);
    let x = Tensor::from_f64(&device, [3, 16], DType::F32, &[0.3; 48]).unwrap();
    let (mut kept_model, mut model) = (build(), build());
    let config = AdamWConfig::default();
    let mut kept = AdamW::new(&kept_model, config).unwrap();
    let whole = StateShard::whole(&model);
    let mut offloaded =
        AdamW::with_shard_on(&model, config, StatePrecision::Full, whole, Some(&host)).unwrap();
    let state_in_use = host.allocator().stats().in_use;
    // Each parameter's update started as the optimizer step in the backward pass starts it,
    // last parameter first.
    let start = |offloaded: &mut AdamW, model: &mut dyn Module, grads: &[Array]| {
        for index in (0..grads.len()).rev() {
            let mut at = 0;
            model
                .visit_parameters_mut(&mut |name, param| {
                    if at == index {
                        offloaded.step_parameter(index, name, param, &grads[index], 1.0)?;
                    }
                    at += 1;
                    Ok(())
                })
                .unwrap();
        }
    };
    let grads = gradients_of_sum(&model, &x);
    let grads: Vec<Array> = model
        .parameters()
        .iter()
        .map(|p| grads.get(p).unwrap().clone())
        .collect();
    let before = weights(&model);
    start(&mut offloaded, &mut model, &grads);
    assert_eq!(
        weights(&model),
        before,
        "nothing lands before the step ends"
    );
    let landed = offloaded.finish_step(&mut model).unwrap();
    let kept_grads = gradients_of_sum(&kept_model, &x);
    kept.step(&mut kept_model, &kept_grads, 1.0).unwrap();
    assert!(weights(&model) == weights(&kept_model), "the step's update");
    assert_eq!((landed.updated, landed.non_finite), (grads.len(), None));
    let squares: f64 = grads
        .iter()
        .flat_map(|g| g.to_f64().unwrap())
        .map(|v| v * v)
        .sum();
    assert!(
        (landed.squares - squares).abs() <= 1e-12 * squares,
        "{landed:?}"
    );
    assert_eq!(offloaded.steps(), 1);

    // A NaN in the third gradient to start: the two started before it land, it and the one
    // after it stay as they were, state included, and the count does not move.
    let grads = gradients_of_sum(&model, &x);
    let mut grads: Vec<Array> = model
        .parameters()
        .iter()
        .map(|p| grads.get(p).unwrap().clone())
        .collect();
    grads[1] = Array::full(&device, grads[1].shape().clone(), DType::F32, f64::NAN).unwrap();
    let state = |o: &AdamW| -> Vec<Vec<f64>> {
        let (named, _) = o.state();
        named.iter().map(|(_, a)| a.to_f64().unwrap()).collect()
    };
    let (before, state_before) = (weights(&model), state(&offloaded));
    start(&mut offloaded, &mut model, &grads);
    let landed = offloaded.finish_step(&mut model).unwrap();
    assert_eq!((landed.updated, landed.non_finite), (2, Some(1)));
    let after = weights(&model);
    assert!(
        after[3] != before[3] && after[2] != before[2],
        "started first, landed"
    );
    assert!(after[1] == before[1] && after[0] == before[0], "stopped");
    let state = state(&offloaded);
    // Two moments per parameter, in visiting order.
    assert!(
        state[..4] == state_before[..4],
        "the stopped parameters' state is as it was"
    );
    assert!(state[4..] != state_before[4..]);
    assert_eq!(offloaded.steps(), 1);
    assert_eq!(
        host.allocator().stats().in_use,
        state_in_use,
        "only the state stays in the host tier"
    );
}
