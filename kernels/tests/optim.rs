//! The fused AdamW step against an f64 reference over several steps.

mod common;

use common::{assert_close, devices, random, rng, tolerance};
use headroom_kernels::ops::optim::{AdamW, Sgd, Update, adamw_step, sgd_step};
use headroom_kernels::{Array, DType, Error};

/// PyTorch's AdamW, in f64.
fn reference(config: &AdamW, steps: &[Vec<f64>], mut p: Vec<f64>) -> Vec<f64> {
    let (mut m, mut v) = (vec![0.0; p.len()], vec![0.0; p.len()]);
    for (t, g) in steps.iter().enumerate() {
        let t = (t + 1) as i32;
        for i in 0..p.len() {
            p[i] *= 1.0 - config.lr * config.weight_decay;
            m[i] = config.beta1 * m[i] + (1.0 - config.beta1) * g[i];
            v[i] = config.beta2 * v[i] + (1.0 - config.beta2) * g[i] * g[i];
            let m_hat = m[i] / (1.0 - config.beta1.powi(t));
            let v_hat = v[i] / (1.0 - config.beta2.powi(t));
            p[i] -= config.lr * m_hat / (v_hat.sqrt() + config.eps);
        }
    }
    p
}

#[test]
fn adamw_matches_the_f64_reference_over_several_steps() {
    let config = AdamW {
        lr: 0.01,
        weight_decay: 0.1,
        ..AdamW::default()
    };
    let mut rng = rng();
    for device in devices() {
        for dtype in [DType::F32, DType::F64] {
            for shape in [&[1][..], &[5, 7], &[3000]] {
                let (mut p, p0) = random(&device, &mut rng, shape, dtype, -1.0, 1.0);
                let mut m = Array::zeros(&device, shape, dtype).unwrap();
                let mut v = Array::zeros(&device, shape, dtype).unwrap();
                let mut grads = Vec::new();
                for step in 1..=5 {
                    let (g, gs) = random(&device, &mut rng, shape, dtype, -0.5, 0.5);
                    grads.push(gs);
                    adamw_step(&config, Update::new(step), &mut p, &g, &mut m, &mut v).unwrap();
                }
                let in_use = device.allocator().stats().in_use;
                let want = reference(&config, &grads, p0);
                let what = format!("adamw {dtype} {shape:?}");
                assert_close(&what, &p.to_f64().unwrap(), &want, 10.0 * tolerance(dtype));
                assert_eq!(
                    device.allocator().stats().in_use,
                    in_use,
                    "a step allocates nothing"
                );
            }
        }
    }
}

#[test]
fn half_parameters_step_within_half_precision() {
    let config = AdamW::default();
    for device in devices() {
        for dtype in [DType::F16, DType::BF16] {
            let mut p = Array::full(&device, [64], dtype, 0.5).unwrap();
            let g = Array::full(&device, [64], dtype, 0.25).unwrap();
            let mut m = Array::zeros(&device, [64], dtype).unwrap();
            let mut v = Array::zeros(&device, [64], dtype).unwrap();
            adamw_step(&config, Update::new(1), &mut p, &g, &mut m, &mut v).unwrap();
            let want = reference(&config, &[vec![0.25; 64]], vec![0.5; 64]);
            assert_close(
                &format!("adamw {dtype}"),
                &p.to_f64().unwrap(),
                &want,
                tolerance(dtype),
            );
        }
    }
}

#[test]
fn mismatched_state_and_step_zero_are_rejected() {
    let device = &devices()[0];
    let mut p = Array::zeros(device, [4], DType::F32).unwrap();
    let g = Array::zeros(device, [5], DType::F32).unwrap();
    let mut m = Array::zeros(device, [4], DType::F32).unwrap();
    let mut v = Array::zeros(device, [4], DType::F32).unwrap();
    let err = adamw_step(
        &AdamW::default(),
        Update::new(1),
        &mut p,
        &g,
        &mut m,
        &mut v,
    )
    .unwrap_err();
    assert!(matches!(err, Error::Shape { op: "adamw", .. }), "{err}");
    let g = Array::zeros(device, [4], DType::F64).unwrap();
    assert!(
        adamw_step(
            &AdamW::default(),
            Update::new(1),
            &mut p,
            &g,
            &mut m,
            &mut v
        )
        .is_err()
    );
    let g = Array::zeros(device, [4], DType::F32).unwrap();
    let err = adamw_step(
        &AdamW::default(),
        Update::new(0),
        &mut p,
        &g,
        &mut m,
        &mut v,
    )
    .unwrap_err();
    assert!(matches!(err, Error::Argument { .. }), "{err}");
}

/// PyTorch's SGD, in f64, over the gradients of successive steps (each times `scale`).
fn sgd_reference(config: &Sgd, steps: &[Vec<f64>], scale: f64, mut p: Vec<f64>) -> Vec<f64> {
    let mut buf = vec![0.0; p.len()];
    for (t, g) in steps.iter().enumerate() {
        for i in 0..p.len() {
            let d = g[i] * scale + config.weight_decay * p[i];
            let d = if config.momentum != 0.0 {
                buf[i] = if t == 0 {
                    d
                } else {
                    config.momentum * buf[i] + (1.0 - config.dampening) * d
                };
                if config.nesterov {
                    d + config.momentum * buf[i]
                } else {
                    buf[i]
                }
            } else {
                d
            };
            p[i] -= config.lr * d;
        }
    }
    p
}

#[test]
fn sgd_with_and_without_momentum_matches_the_f64_reference() {
    let configs = [
        Sgd {
            lr: 0.1,
            ..Sgd::default()
        },
        Sgd {
            lr: 0.05,
            momentum: 0.9,
            weight_decay: 0.01,
            ..Sgd::default()
        },
        Sgd {
            lr: 0.05,
            momentum: 0.8,
            dampening: 0.1,
            nesterov: true,
            ..Sgd::default()
        },
    ];
    let mut rng = rng();
    for device in devices() {
        for config in &configs {
            for dtype in [DType::F32, DType::F64] {
                let shape = &[7, 3][..];
                let (mut p, p0) = random(&device, &mut rng, shape, dtype, -1.0, 1.0);
                let mut buffer =
                    (config.momentum != 0.0).then(|| Array::zeros(&device, shape, dtype).unwrap());
                let mut grads = Vec::new();
                for step in 1..=4 {
                    let (g, gs) = random(&device, &mut rng, shape, dtype, -0.5, 0.5);
                    grads.push(gs);
                    let update = Update::new(step).scaled(0.5);
                    sgd_step(config, update, &mut p, &g, buffer.as_mut()).unwrap();
                }
                let want = sgd_reference(config, &grads, 0.5, p0);
                let what = format!("sgd {config:?} {dtype}");
                assert_close(&what, &p.to_f64().unwrap(), &want, 10.0 * tolerance(dtype));
            }
        }
        let (mut p, _) = random(&device, &mut rng, &[3], DType::F32, -1.0, 1.0);
        let (g, _) = random(&device, &mut rng, &[3], DType::F32, -1.0, 1.0);
        let momentum = Sgd {
            momentum: 0.9,
            ..Sgd::default()
        };
        let err = sgd_step(&momentum, Update::new(1), &mut p, &g, None).unwrap_err();
        assert!(matches!(err, Error::Argument { op: "sgd", .. }), "{err}");
    }
}

#[test]
fn a_gradient_scale_is_the_same_as_a_scaled_gradient() {
    let config = AdamW {
        lr: 0.01,
        ..AdamW::default()
    };
    for device in devices() {
        let start = Array::from_f64(&device, [3], DType::F64, &[0.5, -1.0, 2.0]).unwrap();
        let run = |grad: &[f64], scale: f64| {
            let mut p = start.deep_copy().unwrap();
            let g = Array::from_f64(&device, [3], DType::F64, grad).unwrap();
            let (mut m, mut v) = (
                Array::zeros(&device, [3], DType::F64).unwrap(),
                Array::zeros(&device, [3], DType::F64).unwrap(),
            );
            for step in 1..=3 {
                let update = Update::new(step).scaled(scale);
                adamw_step(&config, update, &mut p, &g, &mut m, &mut v).unwrap();
            }
            p.to_f64().unwrap()
        };
        assert_eq!(run(&[4.0, -8.0, 0.5], 0.25), run(&[1.0, -2.0, 0.125], 1.0));
    }
}
