//! The fused AdamW step against an f64 reference over several steps.

mod common;

use common::{assert_close, devices, random, rng, tolerance};
use headroom_kernels::ops::optim::{
    AdamW, QUANT_BLOCK, Quantized, Sgd, Update, adamw_step, adamw_step_8bit, sgd_step,
};
use headroom_kernels::{Array, DType, Device, DeviceConfig, Error};

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

/// AdamW's moments kept narrower than the parameter.
#[derive(Debug, Clone, Copy)]
enum Narrow {
    Bf16,
    Int8,
}

/// The parameters after `steps` AdamW steps on f32 parameters whose state is kept `narrow`,
/// with the gradients each step took.
fn narrow_trajectory(
    device: &headroom_kernels::Device,
    narrow: Narrow,
    config: &AdamW,
    p0: &[f64],
    grads: &[Vec<f64>],
) -> Vec<f64> {
    let n = p0.len();
    let mut p = Array::from_f64(device, [n], DType::F32, p0).unwrap();
    let mut plain = (
        Array::zeros(device, [n], DType::BF16).unwrap(),
        Array::zeros(device, [n], DType::BF16).unwrap(),
    );
    let mut quantized = (
        Quantized::zeros(device, [n]).unwrap(),
        Quantized::zeros(device, [n]).unwrap(),
    );
    let in_use = device.allocator().stats().in_use;
    for (step, g) in grads.iter().enumerate() {
        let g = Array::from_f64(device, [n], DType::F32, g).unwrap();
        let update = Update::new(step as u64 + 1).on_stream(3);
        let (m, v) = (&mut plain.0, &mut plain.1);
        match narrow {
            Narrow::Bf16 => adamw_step(config, update, &mut p, &g, m, v).unwrap(),
            Narrow::Int8 => {
                let (m, v) = (&mut quantized.0, &mut quantized.1);
                adamw_step_8bit(config, update, &mut p, &g, m, v).unwrap()
            }
        }
    }
    assert_eq!(
        device.allocator().stats().in_use,
        in_use,
        "{narrow:?}: a step allocates"
    );
    p.to_f64().unwrap()
}

#[test]
fn narrow_state_follows_the_f64_reference() {
    let config = AdamW {
        lr: 0.01,
        weight_decay: 0.1,
        ..AdamW::default()
    };
    let mut rng = rng();
    // Three blocks, the last one partial, and a block of zero gradients, whose state must
    // stay zero (no 0/0).
    let n = 2 * QUANT_BLOCK + 700;
    let p0 = common::values(&mut rng, n, -1.0, 1.0);
    let steps = 40;
    let grads: Vec<Vec<f64>> = (0..steps)
        .map(|_| {
            let mut g = common::values(&mut rng, n, -0.5, 0.5);
            // Each element's gradients share a sign and a size most steps, as a model's do.
            for (i, g) in g.iter_mut().enumerate() {
                *g = 0.3 * *g
                    + 0.02 * (1.0 + (i % 97) as f64 / 10.0) * if i % 2 == 0 { 1.0 } else { -1.0 };
            }
            g[QUANT_BLOCK..2 * QUANT_BLOCK].fill(0.0);
            g
        })
        .collect();
    let want = reference(&config, &grads, p0.clone());
    let moved: f64 = want
        .iter()
        .zip(&p0)
        .map(|(w, p)| (w - p).abs())
        .sum::<f64>()
        / n as f64;
    for device in devices() {
        for narrow in [Narrow::Bf16, Narrow::Int8] {
            let got = narrow_trajectory(&device, narrow, &config, &p0, &grads);
            let error: f64 = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs())
                .sum::<f64>()
                / n as f64;
            let worst = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs())
                .fold(0.0, f64::max);
            eprintln!(
                "{device} {narrow:?}: mean error {error:.2e} of a mean move {moved:.2e}, worst {worst:.2e}"
            );
            let (mean_bound, worst_bound) = match narrow {
                Narrow::Bf16 => (0.01, 0.05),
                Narrow::Int8 => (0.03, 0.3),
            };
            assert!(
                error < mean_bound * moved,
                "{device} {narrow:?}: mean error {error} of a move {moved}"
            );
            assert!(
                worst < worst_bound * moved,
                "{device} {narrow:?}: worst error {worst}"
            );
            // Zero gradients: the parameters only decay.
            let decayed = (1.0 - config.lr * config.weight_decay).powi(steps);
            let i = QUANT_BLOCK + 5;
            assert!(
                (got[i] - p0[i] * decayed).abs() < 1e-5,
                "{narrow:?}: {} against {}",
                got[i],
                p0[i] * decayed
            );
        }
    }
}

/// The error of an AdamW step on these operands, which must refuse it.
fn refused(p: &mut Array, g: &Array, m: &mut Array, v: &mut Array) -> Error {
    adamw_step(&AdamW::default(), Update::new(1), p, g, m, v).unwrap_err()
}

#[test]
fn narrow_state_is_refused_where_it_cannot_apply() {
    let device = &devices()[0];
    let mut p = Array::zeros(device, [4], DType::F64).unwrap();
    let g = Array::zeros(device, [4], DType::F64).unwrap();
    let mut m = Array::zeros(device, [4], DType::BF16).unwrap();
    let mut v = Array::zeros(device, [4], DType::BF16).unwrap();
    let err = refused(&mut p, &g, &mut m, &mut v);
    assert!(matches!(err, Error::DType { op: "adamw", .. }), "{err}");
    let mut p = Array::zeros(device, [4], DType::F32).unwrap();
    let g = Array::zeros(device, [4], DType::F32).unwrap();
    let mut v32 = Array::zeros(device, [4], DType::F32).unwrap();
    let err = refused(&mut p, &g, &mut m, &mut v32);
    assert!(
        matches!(err, Error::DType { op: "adamw", .. }),
        "moments of two dtypes: {err}"
    );
    let mut m8 = Quantized::zeros(device, [4]).unwrap();
    let mut v8 = Quantized::zeros(device, [4]).unwrap();
    v8.scales = Array::zeros(device, [2], DType::F32).unwrap();
    let err = adamw_step_8bit(
        &AdamW::default(),
        Update::new(1),
        &mut p,
        &g,
        &mut m8,
        &mut v8,
    )
    .unwrap_err();
    assert!(matches!(err, Error::Shape { op: "adamw", .. }), "{err}");
    let mut v8 = Quantized::zeros(device, [5]).unwrap();
    assert!(
        adamw_step_8bit(
            &AdamW::default(),
            Update::new(1),
            &mut p,
            &g,
            &mut m8,
            &mut v8
        )
        .is_err()
    );
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
    let err = refused(&mut p, &g, &mut m, &mut v);
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

#[test]
fn a_plan_prices_the_stochastic_rounding_of_a_bf16_update() {
    // The same update over bf16 parameters and moments costs more arithmetic than over f32
    // ones: a draw an element and three roundings.
    let meta = Device::meta(DeviceConfig::new(1 << 30)).unwrap();
    let flops = |dtype: DType| {
        let zeros = || Array::zeros(&meta, [1 << 20], dtype).unwrap();
        let (mut p, g, mut m, mut v) = (zeros(), zeros(), zeros(), zeros());
        let before = meta.planned_work().unwrap().vector_flops;
        adamw_step(
            &AdamW::default(),
            Update::new(1),
            &mut p,
            &g,
            &mut m,
            &mut v,
        )
        .unwrap();
        (meta.planned_work().unwrap().vector_flops - before) / (1 << 20) as f64
    };
    assert_eq!(flops(DType::F32), 12.0);
    assert_eq!(flops(DType::BF16), 18.0);
}
