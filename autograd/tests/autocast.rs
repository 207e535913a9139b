//! Autocast: matrix products in a half type, the rest in f32, gradients back in f32 and within
//! the half type's tolerance of a full f32 pass.

mod common;

use common::{Mlp, TinyTransformer, batch, device};
use headroom_alloc::Tag;
use headroom_autograd::{Tape, Tensor, autocast, autocast_dtype};
use headroom_kernels::{Array, DType, Device};

/// The parameter gradients of the transformer's loss, under `policy` (none: f32).
fn transformer_grads(
    device: &Device,
    model: &TinyTransformer,
    policy: Option<DType>,
) -> Vec<Vec<f64>> {
    let ids = Tensor::from_host(device, [2, 6], &[1u32, 4, 2, 9, 0, 3, 3, 7, 10, 5, 8, 6]).unwrap();
    let targets: Vec<u32> = (0..12).map(|i| (i * 5 % 11) as u32).collect();
    let targets = Tensor::from_host(device, [12], &targets).unwrap();
    let _policy = policy.map(autocast);
    let tape = Tape::new();
    let loss = tape.record(|| model.loss(&ids, &targets)).unwrap();
    assert_eq!(loss.dtype(), DType::F32);
    let grads = tape.gradient(&loss, &model.variables()).unwrap();
    model
        .variables()
        .iter()
        .map(|p| {
            let g = grads.get(p).unwrap();
            assert_eq!(
                g.dtype(),
                DType::F32,
                "gradients come back in the parameters' dtype"
            );
            g.to_f64().unwrap()
        })
        .collect()
}

#[test]
fn half_precision_gradients_stay_within_tolerance_of_f32() {
    let device = device();
    let model = TinyTransformer::new(&device, 11, 8, 16, 2);
    let reference = transformer_grads(&device, &model, None);
    for (policy, rtol) in [(DType::BF16, 2e-2), (DType::F16, 4e-3)] {
        let half = transformer_grads(&device, &model, Some(policy));
        for (k, (h, f)) in half.iter().zip(&reference).enumerate() {
            let scale = f.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let worst = h
                .iter()
                .zip(f)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(
                worst <= rtol * scale,
                "{policy}: parameter {k} off by {worst}, {rtol} of its largest gradient {scale}"
            );
            assert!(
                h.iter().zip(f).any(|(a, b)| a != b),
                "{policy} really ran in half precision"
            );
        }
    }
}

#[test]
fn products_run_in_the_half_type_and_sensitive_ops_in_f32() {
    let device = device();
    let x = Tensor::new(Array::full(&device, [4, 8], DType::F32, 0.5).unwrap());
    let w = Tensor::variable(Array::full(&device, [8, 8], DType::F32, 0.125).unwrap());
    let gamma = Tensor::variable(Array::full(&device, [8], DType::F32, 1.0).unwrap());
    let beta = Tensor::variable(Array::full(&device, [8], DType::F32, 0.0).unwrap());
    assert_eq!(autocast_dtype(), None);
    let _bf16 = autocast(DType::BF16);
    assert_eq!(autocast_dtype(), Some(DType::BF16));
    let h = x.matmul(&w).unwrap();
    assert_eq!(h.dtype(), DType::BF16);
    assert_eq!(
        h.gelu().unwrap().dtype(),
        DType::BF16,
        "elementwise ops follow their input"
    );
    assert_eq!(h.softmax().unwrap().dtype(), DType::F32);
    assert_eq!(h.log_softmax().unwrap().dtype(), DType::F32);
    assert_eq!(
        h.layer_norm(&gamma, &beta, 1e-5).unwrap().dtype(),
        DType::F32
    );
    assert_eq!(h.rms_norm(&gamma, 1e-6).unwrap().dtype(), DType::F32);
    assert_eq!(
        h.swiglu(&h).unwrap().dtype(),
        DType::BF16,
        "SwiGLU follows its input"
    );
    assert_eq!(h.sum(1).unwrap().dtype(), DType::F32);
    // f64 is left alone.
    let x64 = Tensor::new(Array::full(&device, [2, 2], DType::F64, 1.0).unwrap());
    assert_eq!(x64.matmul(&x64).unwrap().dtype(), DType::F64);
}

#[test]
fn autocast_shrinks_what_a_forward_pass_saves() {
    let device = device();
    let mlp = Mlp::new(&device, &[128, 128, 128, 128, 10], DType::F32, 9);
    let (x, targets) = batch(&device, 1024, 128, 10, 10);
    let activations = || {
        let stats = device.allocator().stats();
        stats
            .tags
            .iter()
            .find(|t| t.tag == Tag::ACTIVATIONS)
            .map_or(0, |t| t.live)
    };
    let saved = |policy: Option<DType>| {
        let _policy = policy.map(autocast);
        let before = activations();
        let tape = Tape::new();
        let loss = tape
            .record(|| mlp.forward(&x)?.cross_entropy(&targets, None))
            .unwrap();
        let saved = activations() - before;
        drop((loss, tape));
        saved
    };
    let (f32_saved, bf16_saved) = (saved(None), saved(Some(DType::BF16)));
    // f32 keeps three hidden activations; bf16 keeps them at half the size, plus a bf16 copy of
    // the input and of two weights for the products' gradients.
    assert!(
        (bf16_saved as f64) < 0.75 * f32_saved as f64,
        "bf16 saved {bf16_saved}, f32 {f32_saved}"
    );
}

#[test]
fn attention_weights_are_kept_in_the_half_type_of_their_product() {
    let device = device();
    let scores = Tensor::variable(Array::full(&device, [2, 3, 3], DType::BF16, 0.5).unwrap());
    let tape = Tape::new();
    let weights = tape
        .record(|| {
            let _bf16 = autocast(DType::BF16);
            scores.attention_softmax(0.5, true)
        })
        .unwrap();
    assert_eq!(weights.dtype(), DType::BF16, "the next product's operand");
    // Causal rows of equal scores: 1, then 1/2 1/2, then thirds (exact in f32, rounded once).
    let got = weights.array().to_f64().unwrap();
    let want = [
        1.0,
        0.0,
        0.0,
        0.5,
        0.5,
        0.0,
        1.0 / 3.0,
        1.0 / 3.0,
        1.0 / 3.0,
    ];
    assert!(
        got[..9].iter().zip(want).all(|(g, w)| (g - w).abs() < 4e-3),
        "{got:?}"
    );
    let total = tape.record(|| weights.sum(2)?.sum(1)?.sum(0)).unwrap();
    let grads = tape.gradient(&total, &[&scores]);
    let grad = grads.unwrap().get(&scores).unwrap().clone();
    assert_eq!(grad.dtype(), DType::BF16);
    // Every row of weights sums to one whatever the scores: the gradient vanishes.
    assert!(grad.to_f64().unwrap().iter().all(|g| g.abs() < 1e-2));
}

#[test]
fn a_half_tensor_added_to_an_f32_one_is_widened_into_the_sum() {
    let device = device();
    let stream = Tensor::variable(Array::full(&device, [64, 64], DType::F32, 1.0).unwrap());
    let branch = Tensor::variable(Array::full(&device, [64, 64], DType::BF16, 0.5).unwrap());
    let tape = Tape::new();
    let before = device.allocator().stats().in_use;
    device.allocator().with(|a| a.reset_peak());
    let sum = tape.record(|| branch.add(&stream)).unwrap();
    assert_eq!(sum.dtype(), DType::F32);
    assert!(sum.array().to_f64().unwrap().iter().all(|&v| v == 1.5));
    assert_eq!(
        device.allocator().stats().peak_in_use - before,
        64 * 64 * 4,
        "one f32 array at most: no separate widened copy of the bf16 operand"
    );
    let loss = tape.record(|| sum.sum(1)?.sum(0)).unwrap();
    let grads = tape.gradient(&loss, &[&stream, &branch]).unwrap();
    for (param, dtype) in [(&stream, DType::F32), (&branch, DType::BF16)] {
        let g = grads.get(param).unwrap();
        assert_eq!(g.dtype(), dtype, "each gradient in its operand's dtype");
        assert!(g.to_f64().unwrap().iter().all(|&v| v == 1.0));
    }
}
