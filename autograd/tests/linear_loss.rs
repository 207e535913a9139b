//! The fused head and loss: the same loss and gradients as a linear layer followed by the
//! cross-entropy, whatever the chunks, with ignored rows, in f64, f32, bf16 and under autocast;
//! the logits never held whole, and the hidden states' gradient held once.

mod common;

use common::device;
use headroom_autograd::{Tape, Tensor, autocast};
use headroom_kernels::ops::random::uniform;
use headroom_kernels::{Array, DType, Device, DeviceConfig, PlanTarget};

const ROWS: usize = 13;
const FEATURES: usize = 8;
const VOCAB: usize = 37;
const IGNORE: u32 = u32::MAX;

fn tensor(device: &Device, shape: [usize; 2], dtype: DType, seed: u64) -> Tensor {
    let values: Vec<f64> = (0..shape[0] * shape[1])
        .map(|i| 2.0 * uniform(seed, i as u64) - 1.0)
        .collect();
    Tensor::variable(Array::from_f64(device, shape, dtype, &values).unwrap())
}

/// The loss and the gradients of the hidden states and the weight, fused (`chunk` rows at a
/// time) or not (`None`).
fn step(
    device: &Device,
    dtype: DType,
    policy: Option<DType>,
    chunk: Option<usize>,
) -> (f64, Vec<f64>, Vec<f64>) {
    let hidden = tensor(device, [ROWS, FEATURES], dtype, 1);
    let weight = tensor(device, [VOCAB, FEATURES], dtype, 2);
    let targets: Vec<u32> = (0..ROWS as u32)
        .map(|i| {
            if i % 5 == 3 {
                IGNORE
            } else {
                i * 7 % VOCAB as u32
            }
        })
        .collect();
    let targets = Tensor::from_host(device, [ROWS], &targets).unwrap();
    let _policy = policy.map(autocast);
    let tape = Tape::new();
    let loss = tape
        .record(|| match chunk {
            Some(chunk) => hidden.linear_cross_entropy(&weight, &targets, Some(IGNORE), chunk),
            None => hidden
                .linear(&weight, None)?
                .cross_entropy(&targets, Some(IGNORE)),
        })
        .unwrap();
    let grads = tape.gradient(&loss, &[&hidden, &weight]).unwrap();
    let get = |t: &Tensor| grads.get(t).unwrap().to_f64().unwrap();
    (loss.to_f64().unwrap()[0], get(&hidden), get(&weight))
}

fn assert_close(what: &str, got: &[f64], want: &[f64], rtol: f64) {
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= rtol * scale,
            "{what}[{i}]: {g} against {w}"
        );
    }
}

#[test]
fn the_fused_head_equals_a_linear_layer_and_the_cross_entropy() {
    let device = device();
    for (dtype, policy, rtol) in [
        (DType::F64, None, 1e-12),
        (DType::F32, None, 1e-5),
        (DType::F32, Some(DType::BF16), 2e-2),
        (DType::F32, Some(DType::F16), 4e-3),
        // bf16 parameters: the weight's gradient summed over the chunks in f32.
        (DType::BF16, None, 2e-2),
    ] {
        let (loss, dh, dw) = step(&device, dtype, policy, None);
        for chunk in [1, 4, ROWS, 100] {
            let what = format!("{dtype} {policy:?} chunks of {chunk}");
            let (fused, fdh, fdw) = step(&device, dtype, policy, Some(chunk));
            assert!(
                (fused - loss).abs() <= rtol * loss.abs(),
                "{what}: {fused} against {loss}"
            );
            assert_close(&format!("{what} dhidden"), &fdh, &dh, rtol);
            assert_close(&format!("{what} dweight"), &fdw, &dw, rtol);
        }
    }
}

#[test]
fn the_logits_are_never_held_whole() {
    let device = device();
    let (rows, vocab) = (64, 1000);
    let hidden = tensor(&device, [rows, FEATURES], DType::F32, 3);
    let weight = tensor(&device, [vocab, FEATURES], DType::F32, 4);
    let targets: Vec<u32> = (0..rows as u32).map(|i| i * 13 % vocab as u32).collect();
    let targets = Tensor::from_host(&device, [rows], &targets).unwrap();
    let peak_activations = |chunk: Option<usize>| {
        device.allocator().with(|a| a.reset_peak());
        let tape = Tape::new();
        let loss = tape
            .record(|| match chunk {
                Some(chunk) => hidden.linear_cross_entropy(&weight, &targets, None, chunk),
                None => hidden.linear(&weight, None)?.cross_entropy(&targets, None),
            })
            .unwrap();
        tape.gradient(&loss, &[&hidden, &weight]).unwrap();
        let stats = device.allocator().stats();
        stats.tags.iter().map(|t| t.peak).sum::<u64>()
    };
    let whole = (rows * vocab * 4) as u64;
    let unfused = peak_activations(None);
    let fused = peak_activations(Some(8));
    // The unfused pass holds the logits and their gradient at once; the fused one an eighth
    // of each at most.
    assert!(
        unfused >= fused + whole,
        "{unfused} against {fused} (logits {whole})"
    );
}

#[test]
fn the_hidden_states_gradient_is_held_once() {
    let device = device();
    let (rows, features, vocab) = (512, 256, 16);
    let hidden = tensor(&device, [rows, features], DType::F32, 5);
    let weight = tensor(&device, [vocab, features], DType::F32, 6);
    let targets: Vec<u32> = (0..rows as u32).map(|i| i % vocab as u32).collect();
    let targets = Tensor::from_host(&device, [rows], &targets).unwrap();
    device.allocator().with(|a| a.reset_peak());
    let before = device.allocator().stats().in_use;
    let tape = Tape::new();
    let loss = tape
        .record(|| hidden.linear_cross_entropy(&weight, &targets, None, 8))
        .unwrap();
    let grads = tape.gradient(&loss, &[&hidden, &weight]).unwrap();
    let grown = device.allocator().stats().peak_in_use - before;
    let dhidden = (rows * features * 4) as u64;
    // The gradient, the weight's and one chunk's work: each chunk writes its rows in place,
    // where the chunks' parts were joined into a second copy at the end.
    assert!(grown < dhidden + dhidden / 4, "{grown} bytes for {dhidden}");
    drop(grads);
}

#[test]
fn the_gradients_formed_in_the_forward_pass_follow_the_upstream_gradient() {
    // The loss scaled by 3 (as a micro-batch's share or a loss scale scales it): each gradient
    // three times the plain one, in every dtype and under both autocasts (f16's wait for the
    // backward pass).
    let device = device();
    for (dtype, policy) in [
        (DType::F64, None),
        (DType::F32, None),
        (DType::F32, Some(DType::BF16)),
        (DType::F32, Some(DType::F16)),
        (DType::BF16, None),
    ] {
        let hidden = tensor(&device, [ROWS, FEATURES], dtype, 3);
        let weight = tensor(&device, [VOCAB, FEATURES], dtype, 4);
        let targets: Vec<u32> = (0..ROWS as u32).map(|i| i * 3 % VOCAB as u32).collect();
        let targets = Tensor::from_host(&device, [ROWS], &targets).unwrap();
        let _policy = policy.map(autocast);
        let grads = |factor: f64| {
            let tape = Tape::new();
            let loss = tape
                .record(|| {
                    hidden
                        .linear_cross_entropy(&weight, &targets, None, 4)?
                        .scale(factor)
                })
                .unwrap();
            let grads = tape.gradient(&loss, &[&hidden, &weight]).unwrap();
            let get = |t: &Tensor| grads.get(t).unwrap().to_f64().unwrap();
            (get(&hidden), get(&weight))
        };
        let (dh, dw) = grads(1.0);
        let (dh3, dw3) = grads(3.0);
        let thrice = |x: &[f64]| x.iter().map(|v| 3.0 * v).collect::<Vec<_>>();
        let rtol = if dtype == DType::BF16 || policy.is_some() {
            1e-2
        } else {
            1e-6
        };
        assert_close(
            &format!("{dtype} {policy:?} dhidden"),
            &dh3,
            &thrice(&dh),
            rtol,
        );
        assert_close(
            &format!("{dtype} {policy:?} dweight"),
            &dw3,
            &thrice(&dw),
            rtol,
        );
    }
}

#[test]
fn a_step_runs_the_heads_products_three_times() {
    // The logits formed once, in the forward pass, for the loss and both gradients: three
    // products of rows x vocabulary x features (the logits, the hidden states' gradient and the
    // weight's), where forming them again in the backward pass took four.
    let planner = Device::meta_for(PlanTarget::Cpu, DeviceConfig::new(1 << 30)).unwrap();
    let (rows, features, vocab) = (64, 32, 1000);
    let hidden = Tensor::variable(Array::zeros(&planner, [rows, features], DType::F32).unwrap());
    let weight = Tensor::variable(Array::zeros(&planner, [vocab, features], DType::F32).unwrap());
    let targets = Tensor::variable(Array::zeros(&planner, [rows], DType::U32).unwrap());
    let tape = Tape::new();
    let loss = tape
        .record(|| hidden.linear_cross_entropy(&weight, &targets, None, 16))
        .unwrap();
    tape.gradient(&loss, &[&hidden, &weight]).unwrap();
    let flops = planner.planned_work().unwrap().matrix_flops;
    assert_eq!(flops, 3.0 * 2.0 * (rows * features * vocab) as f64);
}
