//! Softmax and log-softmax against f64 references and finite differences, attention's fused
//! softmax against its parts; operand checks. (Memory planning and OOM behaviour: `memory.rs`.)

mod common;

use common::{
    FD_TOLERANCE, ROW_SHAPES, assert_close, assert_close_scaled, assert_fails, devices, dot,
    masked, numeric_gradient, random, rng, rows_len, tolerance, values,
};
use headroom_kernels::ops::softmax::{
    log_softmax, log_softmax_backward, softmax, softmax_backward,
};
use headroom_kernels::{Array, DType, Device, DeviceConfig, Error, Shape};

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

// ---------- against the references ----------

#[test]
fn softmax_and_log_softmax_match_the_f64_reference() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for shape in ROW_SHAPES {
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
            for shape in ROW_SHAPES {
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

// ---------- finite differences on F64 ----------

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

// ---------- empty operands ----------

#[test]
fn empty_rows_and_arrays_do_not_panic() {
    for device in devices() {
        for dtype in DType::FLOATS {
            for shape in [&[0][..], &[0, 5], &[3, 0], &[2, 0, 4]] {
                let x = Array::zeros(&device, shape, dtype).unwrap();
                for y in [softmax(&x).unwrap(), log_softmax(&x).unwrap()] {
                    assert_eq!(y.shape().dims(), shape);
                    assert_eq!(softmax_backward(&y, &x).unwrap().shape().dims(), shape);
                    assert_eq!(log_softmax_backward(&y, &x).unwrap().numel(), 0);
                }
            }
        }
    }
}

// ---------- operand checks ----------

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

    // Nothing was allocated on the way to any of these errors.
    assert_eq!(device.allocator().stats().in_use, in_use);
}

#[test]
fn attention_softmax_equals_scale_mask_softmax_and_its_gradient_too() {
    use headroom_kernels::ops::elementwise::scale;
    use headroom_kernels::ops::index::causal_mask;
    use headroom_kernels::ops::softmax::{attention_softmax, attention_softmax_backward};
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
