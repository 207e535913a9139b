//! Softmax, log-softmax and layer normalization against f64 references and finite differences;
//! operand checks. (Memory planning and OOM behaviour: `memory.rs`.)

mod common;

use common::{assert_close, assert_close_scaled, devices, masked, random, rng, tolerance, values};
use headroom_kernels::ops::norm::{
    layer_norm, layer_norm_backward, log_softmax, log_softmax_backward, softmax, softmax_backward,
    stats_dtype,
};
use headroom_kernels::{Array, DType, Device, DeviceConfig, Error, Result, Shape};

/// Shapes every op is checked on: single elements, one row, rows of length 1, batches, more
/// rows than the layer-norm backward has partial sums (64), rows past 1024 (a thread block per
/// row on CUDA, a warp per row below), more rows than one pass of a GPU's grid covers, with short
/// rows and with long ones. CUDA builds its row kernels in several shapes (threads to a row,
/// elements each keeps in registers; `ops/norm/cuda.rs`): the lengths take each, forward (rows
/// up to 256, 512, 1024 for a warp, 2048, 4096 for a block of 256, 8192, 16384 for one of 512)
/// and backward (128, 256, 512; 1024, 2048, 4096; 8192), and rows past them all (read again for
/// each pass), of whole 16-byte packs (multiples of 8: loaded as packs by softmax) and of odd
/// lengths.
const SHAPES: [&[usize]; 17] = [
    &[1],
    &[7],
    &[3, 5],
    &[2, 1, 9],
    &[4, 1],
    &[130, 7],
    &[2, 200],
    &[2, 300],
    &[1, 1, 1],
    &[2, 1000],
    &[3, 1500],
    &[2, 3000],
    &[2, 6000],
    &[20000, 3],
    &[2200, 1030],
    &[2, 9000],
    &[2, 17000],
];

const EPS: f64 = 1e-5;

/// `(rows, len)` of a shape, normalized over its last axis.
fn rows_len(shape: &[usize]) -> (usize, usize) {
    let (len, rest) = shape.split_last().expect("rank >= 1");
    (rest.iter().product(), *len)
}

// ---------- f64 references ----------

fn ref_softmax(x: &[f64], len: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(len) {
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
        out.extend(row.iter().map(|v| (v - max).exp() / sum));
    }
    out
}

fn ref_log_softmax(x: &[f64], len: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(len) {
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = max + row.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
        out.extend(row.iter().map(|v| v - lse));
    }
    out
}

/// Softmax backward and the magnitude each result is computed from.
fn ref_softmax_backward(y: &[f64], dy: &[f64], len: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut dx, mut scale) = (Vec::new(), Vec::new());
    for (y, dy) in y.chunks(len).zip(dy.chunks(len)) {
        let dot: f64 = y.iter().zip(dy).map(|(a, b)| a * b).sum();
        let mag: f64 = y.iter().zip(dy).map(|(a, b)| (a * b).abs()).sum();
        for (a, b) in y.iter().zip(dy) {
            dx.push(a * (b - dot));
            scale.push(a.abs() * (b.abs() + mag));
        }
    }
    (dx, scale)
}

fn ref_log_softmax_backward(y: &[f64], dy: &[f64], len: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut dx, mut scale) = (Vec::new(), Vec::new());
    for (y, dy) in y.chunks(len).zip(dy.chunks(len)) {
        let sum: f64 = dy.iter().sum();
        let mag: f64 = dy.iter().map(|v| v.abs()).sum();
        for (a, b) in y.iter().zip(dy) {
            dx.push(b - a.exp() * sum);
            scale.push(b.abs() + a.exp() * mag);
        }
    }
    (dx, scale)
}

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

#[test]
fn softmax_and_log_softmax_match_the_f64_reference() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for shape in SHAPES {
                let (_, len) = rows_len(shape);
                let (x, xs) = random(&device, &mut rng, shape, dtype, -3.0, 3.0);
                let what = format!("{dtype} {shape:?}");
                let y = softmax(&x).unwrap();
                assert_eq!(y.shape().dims(), shape);
                assert_eq!(y.dtype(), dtype);
                let got = y.to_f64().unwrap();
                assert_close(
                    &format!("softmax {what}"),
                    &got,
                    &ref_softmax(&xs, len),
                    tolerance(dtype),
                );
                for (r, row) in got.chunks(len).enumerate() {
                    let sum: f64 = row.iter().sum();
                    let bound = tolerance(dtype) * (len as f64).sqrt().max(1.0);
                    assert!((sum - 1.0).abs() <= bound, "{what} row {r} sums to {sum}");
                }
                let got = log_softmax(&x).unwrap().to_f64().unwrap();
                assert_close(
                    &format!("log_softmax {what}"),
                    &got,
                    &ref_log_softmax(&xs, len),
                    tolerance(dtype),
                );
            }
        }
    }
}

#[test]
fn softmax_gives_masked_elements_nothing() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            // Rows a warp holds, a block holds (with each register cache, in packs and not), and
            // rows past that (read twice on CUDA).
            for len in [11, 200, 300, 1000, 1500, 3000, 6000, 9000, 17000] {
                let rows = 3;
                let (x, xs) = masked(&device, &mut rng, [rows, len], dtype, -3.0, 3.0);
                let what = format!("{dtype} {rows}x{len} masked");
                let y = softmax(&x).unwrap().to_f64().unwrap();
                assert_close(&what, &y, &ref_softmax(&xs, len), tolerance(dtype));
                let ly = log_softmax(&x).unwrap().to_f64().unwrap();
                let want = ref_log_softmax(&xs, len);
                for (i, (&got, &want)) in ly.iter().zip(&want).enumerate() {
                    if xs[i] == f64::NEG_INFINITY {
                        assert_eq!(got, f64::NEG_INFINITY, "{what}: log_softmax element {i}");
                    } else {
                        let bound = tolerance(dtype) * xs[i].abs().max(1.0) * 4.0;
                        assert!(
                            (got - want).abs() <= bound,
                            "{what}: log_softmax element {i} is {got}, want {want}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn softmax_is_stable_for_large_inputs() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for (lo, hi) in [(995.0, 1005.0), (-1005.0, -995.0)] {
                let shape = [3, 11];
                let (x, xs) = random(&device, &mut rng, &shape, dtype, lo, hi);
                let what = format!("{dtype} around {lo}");
                let y = softmax(&x).unwrap().to_f64().unwrap();
                assert!(y.iter().all(|v| v.is_finite()), "softmax {what}: {y:?}");
                assert_close(&what, &y, &ref_softmax(&xs, 11), tolerance(dtype));
                for row in y.chunks(11) {
                    let sum: f64 = row.iter().sum();
                    assert!((sum - 1.0).abs() <= 4.0 * tolerance(dtype), "{what}: {sum}");
                }
                let ly = log_softmax(&x).unwrap().to_f64().unwrap();
                assert!(
                    ly.iter().all(|v| v.is_finite()),
                    "log_softmax {what}: {ly:?}"
                );
                // The result is small although the input is ~1000: relative to the input.
                let scale: Vec<f64> = xs.iter().map(|v| v.abs()).collect();
                let want = ref_log_softmax(&xs, 11);
                assert_close_scaled(&what, &ly, &want, &scale, tolerance(dtype));
            }
        }
    }
}

#[test]
fn softmax_backwards_match_the_f64_reference() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for shape in SHAPES {
                let (_, len) = rows_len(shape);
                let xs = values(&mut rng, Shape::new(shape).numel(), -3.0, 3.0);
                let (dy, dys) = random(&device, &mut rng, shape, dtype, -2.0, 2.0);
                let what = format!("{dtype} {shape:?}");
                // The softmax output, computed by the reference and stored in the dtype.
                let y = Array::from_f64(&device, shape, dtype, &ref_softmax(&xs, len)).unwrap();
                let (want, scale) = ref_softmax_backward(&y.to_f64().unwrap(), &dys, len);
                let got = softmax_backward(&y, &dy).unwrap();
                assert_eq!((got.shape().dims(), got.dtype()), (shape, dtype));
                let got = got.to_f64().unwrap();
                let tol = tolerance(dtype);
                assert_close_scaled(
                    &format!("softmax_backward {what}"),
                    &got,
                    &want,
                    &scale,
                    tol,
                );

                let ly = ref_log_softmax(&xs, len);
                let ly = Array::from_f64(&device, shape, dtype, &ly).unwrap();
                let (want, scale) = ref_log_softmax_backward(&ly.to_f64().unwrap(), &dys, len);
                let got = log_softmax_backward(&ly, &dy).unwrap().to_f64().unwrap();
                let what = format!("log_softmax_backward {what}");
                assert_close_scaled(&what, &got, &want, &scale, tol);
            }
        }
    }
}

/// Tolerance of the layer-norm statistics, stored as `stats_dtype(dtype)`.
fn stats_tolerance(dtype: DType) -> f64 {
    tolerance(stats_dtype(dtype))
}

#[test]
fn layer_norm_matches_the_f64_reference() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for shape in SHAPES {
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
            for shape in SHAPES {
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

const H: f64 = 1e-6;
const FD_TOLERANCE: f64 = 1e-6;

/// Central differences of `loss` at `at`, one element at a time.
fn numeric_gradient(at: &[f64], loss: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let mut point = at.to_vec();
    (0..at.len())
        .map(|i| {
            point[i] = at[i] + H;
            let up = loss(&point);
            point[i] = at[i] - H;
            let down = loss(&point);
            point[i] = at[i];
            (up - down) / (2.0 * H)
        })
        .collect()
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

#[test]
fn softmax_backwards_match_finite_differences() {
    let mut rng = rng();
    let device = Device::cpu(DeviceConfig::new(64 << 20)).unwrap();
    let upload = |shape: &[usize], v: &[f64]| Array::from_f64(&device, shape, DType::F64, v);
    for shape in [&[1][..], &[7], &[3, 5], &[2, 1, 9], &[4, 1]] {
        let (x, xs) = random(&device, &mut rng, shape, DType::F64, -3.0, 3.0);
        let (dy, dys) = random(&device, &mut rng, shape, DType::F64, -2.0, 2.0);
        let forward = |v: &[f64], log: bool| {
            let x = upload(shape, v).unwrap();
            let y = if log { log_softmax(&x) } else { softmax(&x) };
            dot(&y.unwrap().to_f64().unwrap(), &dys)
        };
        let y = softmax(&x).unwrap();
        let got = softmax_backward(&y, &dy).unwrap().to_f64().unwrap();
        let want = numeric_gradient(&xs, |v| forward(v, false));
        assert_close(&format!("softmax {shape:?}"), &got, &want, FD_TOLERANCE);
        let y = log_softmax(&x).unwrap();
        let got = log_softmax_backward(&y, &dy).unwrap().to_f64().unwrap();
        let want = numeric_gradient(&xs, |v| forward(v, true));
        assert_close(&format!("log_softmax {shape:?}"), &got, &want, FD_TOLERANCE);
    }
}

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
                for y in [softmax(&x).unwrap(), log_softmax(&x).unwrap()] {
                    assert_eq!(y.shape().dims(), shape);
                    assert_eq!(softmax_backward(&y, &x).unwrap().shape().dims(), shape);
                    assert_eq!(log_softmax_backward(&y, &x).unwrap().numel(), 0);
                }
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

/// Asserts `result` failed naming `op` and, in its message, every string of `mentions`.
fn assert_fails<T>(result: Result<T>, op: &str, mentions: &[&str]) -> Error {
    let Err(err) = result else {
        panic!("{op}: expected an error")
    };
    let text = err.to_string();
    assert!(text.starts_with(op), "{op}: {text}");
    for m in mentions {
        assert!(text.contains(m), "{op}: {text} does not mention {m}");
    }
    err
}

#[test]
fn bad_operands_give_typed_errors_naming_the_op() {
    let device = Device::cpu(DeviceConfig::new(64 << 20)).unwrap();
    let other = Device::cpu(DeviceConfig::new(1 << 20)).unwrap();
    let f32s = |shape: &[usize]| Array::full(&device, shape, DType::F32, 0.5).unwrap();
    let (x, x_t) = (f32s(&[3, 5]), f32s(&[5, 3]));
    let x64 = Array::full(&device, [3, 5], DType::F64, 0.5).unwrap();
    let ints = Array::full(&device, [3, 5], DType::U32, 1.0).unwrap();
    let scalar = Array::full(&device, Shape::new(&[]), DType::F32, 1.0).unwrap();
    let elsewhere = Array::full(&other, [3, 5], DType::F32, 0.5).unwrap();
    let (g5, g3) = (f32s(&[5]), f32s(&[3]));
    let b64 = Array::full(&device, [5], DType::F64, 0.0).unwrap();
    let (m3, m5) = (f32s(&[3]), f32s(&[5]));
    let r64 = Array::full(&device, [3], DType::F64, 1.0).unwrap();
    let in_use = device.allocator().stats().in_use;

    let err = assert_fails(softmax(&scalar), "softmax", &["[]"]);
    assert!(matches!(err, Error::Shape { op: "softmax", .. }), "{err:?}");
    let err = assert_fails(log_softmax(&ints), "log_softmax", &["u32"]);
    assert!(
        matches!(
            err,
            Error::DType {
                op: "log_softmax",
                ..
            }
        ),
        "{err:?}"
    );
    let err = assert_fails(
        softmax_backward(&x, &x_t),
        "softmax_backward",
        &["[3, 5]", "[5, 3]"],
    );
    assert!(matches!(err, Error::Shape { .. }), "{err:?}");
    let err = assert_fails(
        log_softmax_backward(&x, &x64),
        "log_softmax_backward",
        &["f64"],
    );
    assert!(matches!(err, Error::DType { .. }), "{err:?}");
    let err = assert_fails(softmax_backward(&x, &elsewhere), "softmax_backward", &[]);
    assert!(matches!(err, Error::Device { .. }), "{err:?}");

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

#[test]
fn attention_softmax_equals_scale_mask_softmax_and_its_gradient_too() {
    use headroom_kernels::ops::elementwise::scale;
    use headroom_kernels::ops::index::causal_mask;
    use headroom_kernels::ops::norm::{attention_softmax, attention_softmax_backward};
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            // Square matrices whose rows a warp holds, and a block; of odd lengths, and of whole
            // 16-byte packs.
            let shapes: [&[usize]; 3] = [&[2, 3, 5, 5], &[1, 64, 64], &[1, 1040, 1040]];
            for (shape, causal) in shapes.into_iter().flat_map(|s| [(s, false), (s, true)]) {
                let (x, _) = random(&device, &mut rng, shape, dtype, -3.0, 3.0);
                let (dy, _) = random(&device, &mut rng, shape, dtype, -1.0, 1.0);
                let fused = attention_softmax(&x, 0.4, causal).unwrap();
                let scaled = scale(&x, 0.4).unwrap();
                let masked = if causal {
                    causal_mask(&scaled, f64::NEG_INFINITY).unwrap()
                } else {
                    scaled
                };
                let want = softmax(&masked).unwrap();
                let what = format!("{dtype} {shape:?} causal {causal}");
                let tol = 2.0 * tolerance(dtype);
                assert_close(
                    &what,
                    &fused.to_f64().unwrap(),
                    &want.to_f64().unwrap(),
                    tol,
                );
                let grad = attention_softmax_backward(&fused, &dy, 0.4, causal).unwrap();
                let mut want = softmax_backward(&want, &dy).unwrap();
                if causal {
                    want = causal_mask(&want, 0.0).unwrap();
                }
                let want = scale(&want, 0.4).unwrap();
                assert_close(&what, &grad.to_f64().unwrap(), &want.to_f64().unwrap(), tol);
            }
        }
        let (oblong, _) = random(&device, &mut rng, &[2, 3, 4], DType::F32, -1.0, 1.0);
        assert!(attention_softmax(&oblong, 1.0, true).is_err());
        assert!(attention_softmax(&oblong, 1.0, false).is_ok());
        assert!(attention_softmax(&oblong, f64::NAN, false).is_err());
    }
}
