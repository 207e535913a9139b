//! RMS normalization against f64 references and finite differences; the half types' rounding
//! order; operand checks. (Memory planning and OOM behaviour: `memory.rs`.)

mod common;

use common::{
    FD_TOLERANCE, ROW_SHAPES, assert_close, assert_close_scaled, assert_fails, devices, dot,
    numeric_gradient, random, rng, rows_len, tolerance,
};
use headroom_kernels::ops::norm::{rms_norm, rms_norm_backward, stats_dtype};
use headroom_kernels::{Array, DType, Device, DeviceConfig, Error, Shape};

const EPS: f64 = 1e-6;

/// RMS norm: `(y, y's scale, rstd)`.
fn ref_rms_norm(x: &[f64], gamma: &[f64], len: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut y, mut scale, mut rstds) = (vec![], vec![], vec![]);
    for row in x.chunks(len) {
        let rstd = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / len as f64 + EPS).sqrt();
        for (v, g) in row.iter().zip(gamma) {
            y.push(v * rstd * g);
            scale.push((v * rstd * g).abs());
        }
        rstds.push(rstd);
    }
    (y, scale, rstds)
}

/// RMS-norm gradients and their scales: `[(dx, scale), (dgamma, scale)]`.
fn ref_rms_norm_backward(
    x: &[f64],
    gamma: &[f64],
    rstd: &[f64],
    dy: &[f64],
    len: usize,
) -> [(Vec<f64>, Vec<f64>); 2] {
    let n = len as f64;
    let (mut dx, mut dx_scale) = (vec![], vec![]);
    let (mut dgamma, mut dgamma_scale) = (vec![0.0; len], vec![0.0; len]);
    for (r, (x, dy)) in x.chunks(len).zip(dy.chunks(len)).enumerate() {
        let xhat: Vec<f64> = x.iter().map(|v| v * rstd[r]).collect();
        let g: Vec<f64> = dy.iter().zip(gamma).map(|(d, g)| d * g).collect();
        let mean_gx = g.iter().zip(&xhat).map(|(g, h)| g * h).sum::<f64>() / n;
        let mag_gx = g.iter().zip(&xhat).map(|(g, h)| (g * h).abs()).sum::<f64>() / n;
        for j in 0..len {
            dx.push(rstd[r] * (g[j] - xhat[j] * mean_gx));
            dx_scale.push(rstd[r] * (g[j].abs() + xhat[j].abs() * mag_gx));
            dgamma[j] += dy[j] * xhat[j];
            dgamma_scale[j] += (dy[j] * xhat[j]).abs();
        }
    }
    [(dx, dx_scale), (dgamma, dgamma_scale)]
}

#[test]
fn rms_norm_matches_the_f64_reference() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for shape in ROW_SHAPES {
                let (_, len) = rows_len(shape);
                let (x, xs) = random(&device, &mut rng, shape, dtype, -2.0, 3.0);
                let (gamma, gs) = random(&device, &mut rng, &[len], dtype, -1.5, 1.5);
                let what = format!("rms_norm {dtype} {shape:?}");
                let out = rms_norm(&x, &gamma, EPS).unwrap();
                assert_eq!((out.y.shape().dims(), out.y.dtype()), (shape, dtype));
                assert_eq!(out.rstd.shape().dims(), &shape[..shape.len() - 1]);
                assert_eq!(out.rstd.dtype(), stats_dtype(dtype));
                let (want, scale, rstd) = ref_rms_norm(&xs, &gs, len);
                let got = out.y.to_f64().unwrap();
                assert_close_scaled(&what, &got, &want, &scale, tolerance(dtype));
                let got = out.rstd.to_f64().unwrap();
                let tol = tolerance(stats_dtype(dtype));
                assert_close(&format!("{what} rstd"), &got, &rstd, tol);
            }
        }
    }
}

/// Rounds an f32 value to the half type `dtype` on the host, to nearest even, as a GPU's
/// conversions and PyTorch's round.
fn round_to(dtype: DType, v: f32) -> f32 {
    match dtype {
        DType::BF16 => half::bf16::from_f32(v).to_f32(),
        DType::F16 => half::f16::from_f32(v).to_f32(),
        _ => v,
    }
}

#[test]
fn half_types_round_the_normalized_input_before_the_scale_as_transformers_does() {
    let mut rng = rng();
    for device in devices() {
        for dtype in [DType::BF16, DType::F16] {
            let (x, xs) = random(&device, &mut rng, &[5, 40], dtype, -2.0, 3.0);
            let (gamma, gs) = random(&device, &mut rng, &[40], dtype, 0.5, 1.5);
            let out = rms_norm(&x, &gamma, EPS).unwrap();
            let rstd = out.rstd.to_host::<f32>().unwrap();
            let got = out.y.to_f64().unwrap();
            let round = |v: f32| round_to(dtype, v);
            let mut telling = 0;
            for (i, (&v, &got)) in xs.iter().zip(&got).enumerate() {
                let (v, g, r) = (v as f32, gs[i % 40] as f32, rstd[i / 40]);
                // weight * (x * rstd).to(dtype): each product in f32, rounded to the dtype.
                let want = f64::from(round(g * round(v * r)));
                assert_eq!(got, want, "{dtype} element {i}");
                telling += usize::from(f64::from(round(g * (v * r))) != want);
            }
            // Some elements where rounding once gives another result: the order is checked.
            assert!(telling > 0, "{dtype}");
        }
    }
}

#[test]
fn rms_norm_backward_matches_the_f64_reference() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for shape in ROW_SHAPES {
                let (_, len) = rows_len(shape);
                let stats = &shape[..shape.len() - 1];
                let (x, xs) = random(&device, &mut rng, shape, dtype, -2.0, 3.0);
                let (gamma, gs) = random(&device, &mut rng, &[len], dtype, -1.5, 1.5);
                let (dy, dys) = random(&device, &mut rng, shape, dtype, -1.0, 1.0);
                // The statistic from the reference, stored in its dtype.
                let (_, _, rstd) = ref_rms_norm(&xs, &gs, len);
                let rstd = Array::from_f64(&device, stats, stats_dtype(dtype), &rstd).unwrap();
                let rs = rstd.to_f64().unwrap();
                let grads = rms_norm_backward(&x, &gamma, &rstd, &dy).unwrap();
                assert_eq!((grads.dx.shape().dims(), grads.dx.dtype()), (shape, dtype));
                assert_eq!(grads.dgamma.shape().dims(), [len]);
                let want = ref_rms_norm_backward(&xs, &gs, &rs, &dys, len);
                for (name, got, (want, scale)) in [
                    ("dx", &grads.dx, &want[0]),
                    ("dgamma", &grads.dgamma, &want[1]),
                ] {
                    let what = format!("rms_norm_backward {name} {dtype} {shape:?}");
                    let got = got.to_f64().unwrap();
                    assert_close_scaled(&what, &got, want, scale, tolerance(dtype));
                }
            }
        }
    }
}

#[test]
fn rms_norm_backward_is_deterministic() {
    let mut rng = rng();
    for device in devices() {
        let shape = [1000, 33];
        let (x, _) = random(&device, &mut rng, &shape, DType::F32, -2.0, 2.0);
        let (gamma, _) = random(&device, &mut rng, &[33], DType::F32, -2.0, 2.0);
        let (dy, _) = random(&device, &mut rng, &shape, DType::F32, -2.0, 2.0);
        let out = rms_norm(&x, &gamma, EPS).unwrap();
        let run = || {
            let g = rms_norm_backward(&x, &gamma, &out.rstd, &dy).unwrap();
            [g.dx, g.dgamma].map(|a| a.to_host::<f32>().unwrap())
        };
        let first = run();
        for _ in 0..5 {
            assert_eq!(run(), first);
        }
    }
}

#[test]
fn rms_norm_backward_matches_finite_differences() {
    let mut rng = rng();
    let device = Device::cpu(DeviceConfig::new(64 << 20)).unwrap();
    let upload = |shape: &[usize], v: &[f64]| Array::from_f64(&device, shape, DType::F64, v);
    for shape in [&[1][..], &[7], &[3, 5], &[2, 1, 9], &[4, 1]] {
        let (_, len) = rows_len(shape);
        let (x, xs) = random(&device, &mut rng, shape, DType::F64, -2.0, 3.0);
        let (gamma, gs) = random(&device, &mut rng, &[len], DType::F64, -1.5, 1.5);
        let (dy, dys) = random(&device, &mut rng, shape, DType::F64, -2.0, 2.0);
        let loss = |x: &[f64], g: &[f64]| {
            let (x, g) = (upload(shape, x).unwrap(), upload(&[len], g).unwrap());
            dot(&rms_norm(&x, &g, EPS).unwrap().y.to_f64().unwrap(), &dys)
        };
        let out = rms_norm(&x, &gamma, EPS).unwrap();
        let grads = rms_norm_backward(&x, &gamma, &out.rstd, &dy).unwrap();
        let checks = [
            ("dx", &grads.dx, numeric_gradient(&xs, |v| loss(v, &gs))),
            (
                "dgamma",
                &grads.dgamma,
                numeric_gradient(&gs, |v| loss(&xs, v)),
            ),
        ];
        for (name, got, want) in checks {
            let got = got.to_f64().unwrap();
            assert_close(&format!("{name} {shape:?}"), &got, &want, FD_TOLERANCE);
        }
    }
}

#[test]
fn empty_rows_and_arrays_do_not_panic() {
    for device in devices() {
        for dtype in DType::FLOATS {
            for shape in [&[0][..], &[0, 5], &[3, 0], &[2, 0, 4]] {
                let (_, len) = rows_len(shape);
                let x = Array::zeros(&device, shape, dtype).unwrap();
                let gamma = Array::full(&device, [len], dtype, 1.0).unwrap();
                let out = rms_norm(&x, &gamma, EPS).unwrap();
                assert_eq!(out.y.shape().dims(), shape);
                assert_eq!(out.rstd.shape().dims(), &shape[..shape.len() - 1]);
                let g = rms_norm_backward(&x, &gamma, &out.rstd, &x).unwrap();
                assert_eq!(g.dx.shape().dims(), shape);
                // No rows: the scale's gradient is zeros.
                assert!(g.dgamma.to_f64().unwrap().iter().all(|&v| v == 0.0));
            }
        }
    }
}

#[test]
fn bad_operands_give_typed_errors_naming_the_op() {
    let device = Device::cpu(DeviceConfig::new(64 << 20)).unwrap();
    let f32s = |shape: &[usize]| Array::full(&device, shape, DType::F32, 0.5).unwrap();
    let (x, x_t) = (f32s(&[3, 5]), f32s(&[5, 3]));
    let scalar = Array::full(&device, Shape::new(&[]), DType::F32, 1.0).unwrap();
    let (g5, g3, r3, r5) = (f32s(&[5]), f32s(&[3]), f32s(&[3]), f32s(&[5]));
    let g64 = Array::full(&device, [5], DType::F64, 1.0).unwrap();
    let r64 = Array::full(&device, [3], DType::F64, 1.0).unwrap();
    let ids = Array::from_host(&device, [3, 5], &[0u32; 15]).unwrap();
    let in_use = device.allocator().stats().in_use;

    const OP: &str = "rms_norm";
    let err = assert_fails(rms_norm(&x, &g3, EPS), OP, &["gamma", "[3]"]);
    assert!(matches!(err, Error::Shape { op: OP, .. }), "{err:?}");
    let err = assert_fails(rms_norm(&x, &g64, EPS), OP, &["f64"]);
    assert!(matches!(err, Error::DType { .. }), "{err:?}");
    let err = assert_fails(rms_norm(&x, &g5, f64::NAN), OP, &["eps"]);
    assert!(matches!(err, Error::Argument { .. }), "{err:?}");
    let err = assert_fails(rms_norm(&scalar, &g5, EPS), OP, &["[]"]);
    assert!(matches!(err, Error::Shape { .. }), "{err:?}");
    let err = assert_fails(rms_norm(&ids, &g5, EPS), OP, &["u32"]);
    assert!(matches!(err, Error::DType { .. }), "{err:?}");

    const BACK: &str = "rms_norm_backward";
    let err = assert_fails(rms_norm_backward(&x, &g5, &r5, &x), BACK, &["rstd", "[5]"]);
    assert!(matches!(err, Error::Shape { .. }), "{err:?}");
    let err = assert_fails(rms_norm_backward(&x, &g5, &r64, &x), BACK, &["rstd"]);
    assert!(matches!(err, Error::DType { .. }), "{err:?}");
    let err = assert_fails(rms_norm_backward(&x, &g5, &r3, &x_t), BACK, &["dy"]);
    assert!(matches!(err, Error::Shape { .. }), "{err:?}");
    let err = assert_fails(rms_norm_backward(&x, &g3, &r3, &x), BACK, &["gamma"]);
    assert!(matches!(err, Error::Shape { .. }), "{err:?}");

    // Nothing was allocated on the way to any of these errors.
    assert_eq!(device.allocator().stats().in_use, in_use);
}
