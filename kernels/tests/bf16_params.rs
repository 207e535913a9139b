//! Optimizer steps on bf16 parameters: the new value is rounded stochastically, to one of the
//! two bf16 values around the exact one and without bias, so that updates under half of bf16's
//! spacing are not lost; f32 parameters never see a draw.

mod common;

use common::{devices, rng};
use half::bf16;
use headroom_kernels::ops::optim::{
    AdamW, Quantized, Sgd, Update, adamw_step, adamw_step_8bit, sgd_step,
};
use headroom_kernels::{Array, DType, Device};

/// How a step is taken.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    /// AdamW with bf16 moments.
    Adam,
    /// AdamW with moments block-wise in 8 bits.
    Adam8,
    /// SGD without momentum.
    Sgd,
    /// SGD with momentum.
    Momentum,
}

const STEPS: [Step; 4] = [Step::Adam, Step::Adam8, Step::Sgd, Step::Momentum];
const LR: f64 = 0.3 / 128.0;

/// The parameter after one step of `step` (fresh state, lr [`LR`], no weight decay) on `p`
/// with gradient `g`, both of `dtype`.
fn one_step(
    device: &Device,
    step: Step,
    update: Update,
    dtype: DType,
    p: &[f64],
    g: &[f64],
) -> Vec<f64> {
    let n = p.len();
    let mut param = Array::from_f64(device, [n], dtype, p).unwrap();
    let grad = Array::from_f64(device, [n], dtype, g).unwrap();
    let adam = AdamW {
        lr: LR,
        weight_decay: 0.0,
        ..AdamW::default()
    };
    let state = if dtype == DType::F32 {
        DType::BF16
    } else {
        dtype
    };
    match step {
        Step::Adam => {
            let mut m = Array::zeros(device, [n], state).unwrap();
            let mut v = Array::zeros(device, [n], state).unwrap();
            adamw_step(&adam, update, &mut param, &grad, &mut m, &mut v).unwrap();
        }
        Step::Adam8 => {
            let (mut m, mut v) = (
                Quantized::zeros(device, [n]).unwrap(),
                Quantized::zeros(device, [n]).unwrap(),
            );
            adamw_step_8bit(&adam, update, &mut param, &grad, &mut m, &mut v).unwrap();
        }
        Step::Sgd | Step::Momentum => {
            let momentum = if step == Step::Momentum { 0.9 } else { 0.0 };
            let config = Sgd {
                lr: LR,
                momentum,
                ..Sgd::default()
            };
            let mut buffer = Array::zeros(device, [n], dtype).unwrap();
            let buffer = (momentum != 0.0).then_some(&mut buffer);
            sgd_step(&config, update, &mut param, &grad, buffer).unwrap();
        }
    }
    param.to_f64().unwrap()
}

/// The exact new value of one step: AdamW's first step moves by lr against the gradient's
/// sign (to within its eps), SGD's (with or without momentum) by lr times the gradient.
fn exact(step: Step, p: f64, g: f64) -> f64 {
    match step {
        Step::Adam | Step::Adam8 => p - LR * g / (g.abs() + 1e-8),
        Step::Sgd | Step::Momentum => p - LR * g,
    }
}

/// The bf16 values just below and just above `x` (both `x` where it is one).
fn neighbours(x: f64) -> (f64, f64) {
    let bits = (x as f32).to_bits() & 0xFFFF_0000;
    let toward_zero = f64::from(f32::from_bits(bits));
    if toward_zero == x {
        return (x, x);
    }
    let away = f64::from(f32::from_bits(bits + 0x1_0000));
    (toward_zero.min(away), toward_zero.max(away))
}

#[test]
fn every_bf16_step_lands_on_a_neighbour_of_the_exact_value() {
    let mut rng = rng();
    let n = 3000;
    let p: Vec<f64> = common::values(&mut rng, n, -2.0, 2.0)
        .into_iter()
        .map(|x| bf16::from_f64(x).to_f64())
        .collect();
    let g: Vec<f64> = common::values(&mut rng, n, -1.0, 1.0)
        .into_iter()
        .map(|x| bf16::from_f64(x).to_f64())
        .collect();
    for device in devices() {
        for step in STEPS {
            let got = one_step(&device, step, Update::new(1), DType::BF16, &p, &g);
            for i in 0..n {
                let want = exact(step, p[i], g[i]);
                // The f32 computation is within a few of its ulps of the exact value.
                let slack = 4.0 * f64::from(f32::EPSILON) * want.abs().max(1e-30);
                let (low, _) = neighbours(want - slack);
                let (_, high) = neighbours(want + slack);
                assert!(
                    low <= got[i] && got[i] <= high,
                    "{device} {step:?} [{i}]: {} not within [{low}, {high}] around {want}",
                    got[i]
                );
            }
        }
    }
}

#[test]
fn bf16_steps_under_half_a_spacing_move_the_mean_without_bias() {
    // 1.5 - 0.3/128: 0.3 of bf16's spacing of 1/128 below 1.5, where rounding to nearest keeps
    // 1.5 and the step is lost.
    let n = 20_000;
    for device in devices() {
        for step in STEPS {
            let p = vec![1.5; n];
            let g = vec![1.0; n];
            let got = one_step(
                &device,
                step,
                Update::new(1).on_stream(3),
                DType::BF16,
                &p,
                &g,
            );
            let (below, above) = (1.5 - 1.0 / 128.0, 1.5);
            assert!(
                got.iter().all(|&x| x == below || x == above),
                "{device} {step:?}: a value outside [{below}, {above}]"
            );
            let mean = got.iter().sum::<f64>() / n as f64;
            let want = 1.5 - LR;
            assert!(
                (mean - want).abs() < 0.02 / 128.0,
                "{device} {step:?}: mean {mean} against {want}"
            );
        }
    }
}

#[test]
fn bf16_draws_are_a_function_of_step_and_stream() {
    let n = 4096;
    let (p, g) = (vec![1.5; n], vec![1.0; n]);
    for device in devices() {
        for step in STEPS {
            let update = Update::new(5).on_stream(2);
            let first = one_step(&device, step, update, DType::BF16, &p, &g);
            let again = one_step(&device, step, update, DType::BF16, &p, &g);
            assert_eq!(first, again, "{device} {step:?}: one update, two draws");
            let other = one_step(&device, step, update.on_stream(9), DType::BF16, &p, &g);
            assert_ne!(first, other, "{device} {step:?}: two streams, one draw");
            let later = one_step(
                &device,
                step,
                Update::new(6).on_stream(2),
                DType::BF16,
                &p,
                &g,
            );
            assert_ne!(first, later, "{device} {step:?}: two steps, one draw");
        }
    }
}

#[test]
fn f32_parameters_never_see_a_draw() {
    let mut rng = rng();
    let n = 3000;
    let p = common::values(&mut rng, n, -2.0, 2.0);
    let g = common::values(&mut rng, n, -1.0, 1.0);
    for device in devices() {
        for step in STEPS {
            let got = one_step(&device, step, Update::new(4), DType::F32, &p, &g);
            let other = one_step(
                &device,
                step,
                Update::new(4).on_stream(8),
                DType::F32,
                &p,
                &g,
            );
            assert_eq!(got, other, "{device} {step:?}: an f32 parameter drew");
        }
    }
    // Plain SGD on the CPU is the f32 formula bit for bit.
    let cpu = &devices()[0];
    let got = one_step(cpu, Step::Sgd, Update::new(4), DType::F32, &p, &g);
    for i in 0..n {
        let (p, g) = (p[i] as f32, g[i] as f32);
        let want = p - LR as f32 * (g * 1.0 + 0.0 * p);
        assert_eq!(got[i].to_bits(), f64::from(want).to_bits(), "[{i}]");
    }
}
