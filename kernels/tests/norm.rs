//! Layer normalization against f64 references and finite differences; operand checks. (Memory
//! planning and OOM behaviour: `memory.rs`.)

mod common;

use common::{
    FD_TOLERANCE, ROW_SHAPES, assert_close, assert_close_scaled, assert_fails, devices, dot,
    numeric_gradient, random, rng, rows_len, tolerance,
};
use headroom_kernels::ops::norm::{layer_norm, layer_norm_backward, stats_dtype};
use headroom_kernels::{Array, DType, Device, DeviceConfig, Error, Shape};

const EPS: f64 = 1e-5;

// ---------- f64 references ----------

/// Layer norm: `(y, y's scale, mean, rstd)`.
fn ref_layer_norm(
    x: &[f64],
    gamma: &[f64],
    beta: &[f64],
    len: usize,
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut y, mut scale, mut means, mut rstds) = (vec![], vec![], vec![], vec![]);
    for row in x.chunks(len) {
        let mean = row.iter().sum::<f64>() / len as f64;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / len as f64;
        let rstd = 1.0 / (var + EPS).sqrt();
        for ((v, g), b) in row.iter().zip(gamma).zip(beta) {
            let xhat = (v - mean) * rstd;
            y.push(xhat * g + b);
            // The kernels form x - mean in the compute type, whose rounding of x and of the
            // mean the deviation's reciprocal then scales up (rows of nearly equal values).
            scale.push((v.abs() + mean.abs()) * rstd * g.abs() + b.abs());
        }
        means.push(mean);
        rstds.push(rstd);
    }
    (y, scale, means, rstds)
}

/// Layer-norm gradients and their scales: `[(dx, scale), (dgamma, scale), (dbeta, scale)]`.
fn ref_layer_norm_backward(
    x: &[f64],
    gamma: &[f64],
    mean: &[f64],
    rstd: &[f64],
    dy: &[f64],
    len: usize,
) -> [(Vec<f64>, Vec<f64>); 3] {
    let n = len as f64;
    let (mut dx, mut dx_scale) = (vec![], vec![]);
    let (mut dgamma, mut dgamma_scale) = (vec![0.0; len], vec![0.0; len]);
    let (mut dbeta, mut dbeta_scale) = (vec![0.0; len], vec![0.0; len]);
    for (r, (x, dy)) in x.chunks(len).zip(dy.chunks(len)).enumerate() {
        let xhat: Vec<f64> = x.iter().map(|v| (v - mean[r]) * rstd[r]).collect();
        let g: Vec<f64> = dy.iter().zip(gamma).map(|(d, g)| d * g).collect();
        let mean_g = g.iter().sum::<f64>() / n;
        let mean_gx = g.iter().zip(&xhat).map(|(g, h)| g * h).sum::<f64>() / n;
        let mag_g = g.iter().map(|v| v.abs()).sum::<f64>() / n;
        let mag_gx = g.iter().zip(&xhat).map(|(g, h)| (g * h).abs()).sum::<f64>() / n;
        for j in 0..len {
            dx.push(rstd[r] * (g[j] - mean_g - xhat[j] * mean_gx));
            dx_scale.push(rstd[r] * (g[j].abs() + mag_g + xhat[j].abs() * mag_gx));
            dgamma[j] += dy[j] * xhat[j];
            dgamma_scale[j] += (dy[j] * xhat[j]).abs();
            dbeta[j] += dy[j];
            dbeta_scale[j] += dy[j].abs();
        }
    }
    [(dx, dx_scale), (dgamma, dgamma_scale), (dbeta, dbeta_scale)]
}

// ---------- against the references ----------

/// Tolerance of the layer-norm statistics, stored as `stats_dtype(dtype)`.
fn stats_tolerance(dtype: DType) -> f64 {
    tolerance(stats_dtype(dtype))
}

#[test]
fn layer_norm_matches_the_f64_reference() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for shape in ROW_SHAPES {
                let (_, len) = rows_len(shape);
                let (x, xs) = random(&device, &mut rng, shape, dtype, -2.0, 3.0);
                let (gamma, gs) = random(&device, &mut rng, &[len], dtype, -1.5, 1.5);
                let (beta, bs) = random(&device, &mut rng, &[len], dtype, -1.0, 1.0);
                let what = format!("layer_norm {dtype} {shape:?}");
                let out = layer_norm(&x, &gamma, &beta, EPS).unwrap();
                let stats = &shape[..shape.len() - 1];
                assert_eq!((out.y.shape().dims(), out.y.dtype()), (shape, dtype));
                assert_eq!(out.mean.shape().dims(), stats);
                assert_eq!(out.rstd.shape().dims(), stats);
                assert_eq!(out.mean.dtype(), stats_dtype(dtype));
                assert_eq!(out.rstd.dtype(), stats_dtype(dtype));
                let (want, scale, mean, rstd) = ref_layer_norm(&xs, &gs, &bs, len);
                let got = out.y.to_f64().unwrap();
                assert_close_scaled(&what, &got, &want, &scale, tolerance(dtype));
                let mean_scale: Vec<f64> = xs
                    .chunks(len)
                    .map(|r| r.iter().map(|v| v.abs()).sum::<f64>() / len as f64)
                    .collect();
                let got = out.mean.to_f64().unwrap();
                let tol = stats_tolerance(dtype);
                assert_close_scaled(&format!("{what} mean"), &got, &mean, &mean_scale, tol);
                let got = out.rstd.to_f64().unwrap();
                assert_close(&format!("{what} rstd"), &got, &rstd, tol);
            }
        }
    }
}

#[test]
fn layer_norm_backward_matches_the_f64_reference() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for shape in ROW_SHAPES {
                let (rows, len) = rows_len(shape);
                let stats = &shape[..shape.len() - 1];
                let (x, xs) = random(&device, &mut rng, shape, dtype, -2.0, 3.0);
                let (gamma, gs) = random(&device, &mut rng, &[len], dtype, -1.5, 1.5);
                let (dy, dys) = random(&device, &mut rng, shape, dtype, -1.0, 1.0);
                // Statistics from the reference, stored in their dtype.
                let (_, _, mean, rstd) = ref_layer_norm(&xs, &gs, &gs, len);
                assert_eq!(mean.len(), rows);
                let sd = stats_dtype(dtype);
                let mean = Array::from_f64(&device, stats, sd, &mean).unwrap();
                let rstd = Array::from_f64(&device, stats, sd, &rstd).unwrap();
                let (ms, rs) = (mean.to_f64().unwrap(), rstd.to_f64().unwrap());
                let grads = layer_norm_backward(&x, &gamma, &mean, &rstd, &dy).unwrap();
                assert_eq!((grads.dx.shape().dims(), grads.dx.dtype()), (shape, dtype));
                assert_eq!(grads.dgamma.shape().dims(), [len]);
                assert_eq!(grads.dbeta.shape().dims(), [len]);
                let want = ref_layer_norm_backward(&xs, &gs, &ms, &rs, &dys, len);
                for (name, got, (want, scale)) in [
                    ("dx", &grads.dx, &want[0]),
                    ("dgamma", &grads.dgamma, &want[1]),
                    ("dbeta", &grads.dbeta, &want[2]),
                ] {
                    let what = format!("layer_norm_backward {name} {dtype} {shape:?}");
                    let got = got.to_f64().unwrap();
                    assert_close_scaled(&what, &got, want, scale, tolerance(dtype));
                }
            }
        }
    }
}

#[test]
fn layer_norm_backward_is_deterministic() {
    let mut rng = rng();
    let device = Device::cpu(DeviceConfig::new(64 << 20)).unwrap();
    let shape = [1000, 33];
    let (x, _) = random(&device, &mut rng, &shape, DType::F32, -2.0, 2.0);
    let (gamma, _) = random(&device, &mut rng, &[33], DType::F32, -2.0, 2.0);
    let (beta, _) = random(&device, &mut rng, &[33], DType::F32, -2.0, 2.0);
    let (dy, _) = random(&device, &mut rng, &shape, DType::F32, -2.0, 2.0);
    let out = layer_norm(&x, &gamma, &beta, EPS).unwrap();
    let run = || {
        let g = layer_norm_backward(&x, &gamma, &out.mean, &out.rstd, &dy).unwrap();
        [g.dx, g.dgamma, g.dbeta].map(|a| a.to_host::<f32>().unwrap())
    };
    let first = run();
    for _ in 0..5 {
        assert_eq!(run(), first);
    }
}

// ---------- finite differences on F64 ----------

#[test]
fn layer_norm_backward_matches_finite_differences() {
    let mut rng = rng();
    let device = Device::cpu(DeviceConfig::new(64 << 20)).unwrap();
    let upload = |shape: &[usize], v: &[f64]| Array::from_f64(&device, shape, DType::F64, v);
    for shape in [&[1][..], &[7], &[3, 5], &[2, 1, 9], &[4, 1]] {
        let (_, len) = rows_len(shape);
        let (x, xs) = random(&device, &mut rng, shape, DType::F64, -2.0, 3.0);
        let (gamma, gs) = random(&device, &mut rng, &[len], DType::F64, -1.5, 1.5);
        let (beta, bs) = random(&device, &mut rng, &[len], DType::F64, -1.0, 1.0);
        let (dy, dys) = random(&device, &mut rng, shape, DType::F64, -2.0, 2.0);
        let loss = |x: &[f64], g: &[f64], b: &[f64]| {
            let out = layer_norm(
                &upload(shape, x).unwrap(),
                &upload(&[len], g).unwrap(),
                &upload(&[len], b).unwrap(),
                EPS,
            )
            .unwrap();
            dot(&out.y.to_f64().unwrap(), &dys)
        };
        let out = layer_norm(&x, &gamma, &beta, EPS).unwrap();
        let grads = layer_norm_backward(&x, &gamma, &out.mean, &out.rstd, &dy).unwrap();
        let checks = [
            (
                "dx",
                &grads.dx,
                numeric_gradient(&xs, |v| loss(v, &gs, &bs)),
            ),
            (
                "dgamma",
                &grads.dgamma,
                numeric_gradient(&gs, |v| loss(&xs, v, &bs)),
            ),
            (
                "dbeta",
                &grads.dbeta,
                numeric_gradient(&bs, |v| loss(&xs, &gs, v)),
            ),
        ];
        for (name, got, want) in checks {
            let got = got.to_f64().unwrap();
            assert_close(&format!("{name} {shape:?}"), &got, &want, FD_TOLERANCE);
        }
    }
}

// ---------- empty operands ----------

#[test]
fn empty_rows_and_arrays_do_not_panic() {
    for device in devices() {
        for dtype in DType::FLOATS {
            for shape in [&[0][..], &[0, 5], &[3, 0], &[2, 0, 4]] {
                let (_, len) = rows_len(shape);
                let x = Array::zeros(&device, shape, dtype).unwrap();
                let gamma = Array::full(&device, [len], dtype, 1.0).unwrap();
                let out = layer_norm(&x, &gamma, &gamma, EPS).unwrap();
                assert_eq!(out.y.shape().dims(), shape);
                assert_eq!(out.mean.shape().dims(), &shape[..shape.len() - 1]);
                let g = layer_norm_backward(&x, &gamma, &out.mean, &out.rstd, &x).unwrap();
                assert_eq!(g.dx.shape().dims(), shape);
                // No rows: the parameter gradients are zeros.
                assert!(g.dgamma.to_f64().unwrap().iter().all(|&v| v == 0.0));
                assert!(g.dbeta.to_f64().unwrap().iter().all(|&v| v == 0.0));
            }
        }
    }
}

// ---------- operand checks ----------

#[test]
fn bad_operands_give_typed_errors_naming_the_op() {
    let device = Device::cpu(DeviceConfig::new(64 << 20)).unwrap();
    let f32s = |shape: &[usize]| Array::full(&device, shape, DType::F32, 0.5).unwrap();
    let (x, x_t) = (f32s(&[3, 5]), f32s(&[5, 3]));
    let scalar = Array::full(&device, Shape::new(&[]), DType::F32, 1.0).unwrap();
    let (g5, g3) = (f32s(&[5]), f32s(&[3]));
    let b64 = Array::full(&device, [5], DType::F64, 0.0).unwrap();
    let (m3, m5) = (f32s(&[3]), f32s(&[5]));
    let r64 = Array::full(&device, [3], DType::F64, 1.0).unwrap();
    let in_use = device.allocator().stats().in_use;

    let err = assert_fails(
        layer_norm(&x, &g3, &g5, EPS),
        "layer_norm",
        &["gamma", "[3]"],
    );
    assert!(
        matches!(
            err,
            Error::Shape {
                op: "layer_norm",
                ..
            }
        ),
        "{err:?}"
    );
    let err = assert_fails(layer_norm(&x, &g5, &b64, EPS), "layer_norm", &["f64"]);
    assert!(matches!(err, Error::DType { .. }), "{err:?}");
    let err = assert_fails(layer_norm(&x, &g5, &g5, -1.0), "layer_norm", &["eps"]);
    assert!(matches!(err, Error::Argument { .. }), "{err:?}");
    let err = assert_fails(layer_norm(&scalar, &g5, &g5, EPS), "layer_norm", &["[]"]);
    assert!(matches!(err, Error::Shape { .. }), "{err:?}");

    const BACK: &str = "layer_norm_backward";
    let err = assert_fails(
        layer_norm_backward(&x, &g5, &m5, &m3, &x),
        BACK,
        &["mean", "[5]"],
    );
    assert!(matches!(err, Error::Shape { .. }), "{err:?}");
    let err = assert_fails(layer_norm_backward(&x, &g5, &m3, &r64, &x), BACK, &["rstd"]);
    assert!(matches!(err, Error::DType { .. }), "{err:?}");
    let err = assert_fails(layer_norm_backward(&x, &g5, &m3, &m3, &x_t), BACK, &["dy"]);
    assert!(matches!(err, Error::Shape { .. }), "{err:?}");
    let err = assert_fails(layer_norm_backward(&x, &g3, &m3, &m3, &x), BACK, &["gamma"]);
    assert!(matches!(err, Error::Shape { .. }), "{err:?}");

    // Nothing was allocated on the way to any of these errors.
    assert_eq!(device.allocator().stats().in_use, in_use);
}
