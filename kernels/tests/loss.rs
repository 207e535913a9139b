//! The cross-entropy against f64 references and finite differences, and its errors. (Memory
//! planning and OOM behaviour: `memory.rs`.)

#[macro_use]
mod common;

use common::{assert_close, devices, masked, random, random_ids, rng, tolerance};
use headroom_kernels::ops::loss::{
    cross_entropy, cross_entropy_backward, loss_dtype, padded_cross_entropy,
    padded_cross_entropy_backward, sliced_cross_entropy_backward, sliced_cross_entropy_parts,
};
use headroom_kernels::{Array, DType, Device, Error};

/// The f64 reference loss of one row of logits.
fn row_loss(row: &[f64], target: usize) -> f64 {
    let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = row.iter().map(|&x| (x - max).exp()).sum();
    max + sum.ln() - row[target]
}

/// The target value that marks an ignored row in these tests.
const IGNORE: u32 = 1_000_000;

/// The f64 reference mean loss over the rows not ignored.
fn reference_loss(logits: &[f64], targets: &[u32], classes: usize) -> f64 {
    let counted: Vec<usize> = (0..targets.len())
        .filter(|&i| targets[i] != IGNORE)
        .collect();
    counted
        .iter()
        .map(|&i| row_loss(&logits[i * classes..(i + 1) * classes], targets[i] as usize))
        .sum::<f64>()
        / counted.len().max(1) as f64
}

/// `ids` with every third row (from the second) ignored, uploaded.
fn with_ignored_rows(device: &Device, ids: &[u32]) -> (Array, Vec<u32>) {
    let ids: Vec<u32> = (0..ids.len())
        .map(|i| if i % 3 == 1 { IGNORE } else { ids[i] })
        .collect();
    (Array::from_host(device, [ids.len()], &ids).unwrap(), ids)
}

/// The loss gradient `value` as the one-element array that the backward pass takes.
fn dloss(device: &Device, logits: DType, value: f64) -> Array {
    Array::from_f64(device, [], loss_dtype(logits), &[value]).unwrap()
}

/// `(rows, classes)` every cross-entropy check runs: single rows and classes, a batch, a row
/// past 1024 classes (a thread block per row on CUDA, a warp per row below).
const CASES: [(usize, usize); 7] = [
    (1, 1),
    (1, 5),
    (4, 1),
    (3, 7),
    (17, 33),
    (2, 300),
    (3, 1500),
];

#[test]
fn cross_entropy_matches_the_reference() {
    // Also more rows than one pass of a GPU's grid covers, short and long.
    let cases = CASES
        .into_iter()
        .chain([(2, 1000), (20000, 3), (2200, 1100)]);
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for (rows, classes) in cases.clone() {
                let (logits, ls) = random(&device, &mut rng, &[rows, classes], dtype, -4.0, 4.0);
                let (targets, ts) = random_ids(&device, &mut rng, &[rows], classes);
                let ignoring = with_ignored_rows(&device, &ts);
                for (ignore, (targets, ts)) in [(None, (targets, ts)), (Some(IGNORE), ignoring)] {
                    let loss = cross_entropy(&logits, &targets, ignore).unwrap();
                    assert_eq!(loss.shape().dims(), [] as [usize; 0]);
                    let out_dtype = loss_dtype(dtype);
                    assert_eq!(loss.dtype(), out_dtype);
                    let want = reference_loss(&ls, &ts, classes);
                    // Computed in f32 for the half types, from their exactly stored values.
                    let rtol = tolerance(out_dtype) * 4.0;
                    let what = format!("{dtype} {rows}x{classes} ignoring {ignore:?}");
                    assert_close(&what, &loss.to_f64().unwrap(), &[want], rtol);
                }
            }
        }
    }
}

#[test]
fn padded_logits_are_scored_over_their_classes_alone() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            // Widths of whole 16-byte packs for every dtype (rows a warp reads, rows a block
            // reads) and widths of none.
            for (rows, classes, width) in [(4, 7, 8), (5, 33, 40), (2, 1001, 1008), (3, 1500, 1503)]
            {
                let (scores, _) = random(&device, &mut rng, &[rows, classes], dtype, -4.0, 4.0);
                let scores = scores.to_f64().unwrap();
                // The padding is NaN: a kernel that reads it spoils the loss.
                let mut padded = vec![f64::NAN; rows * width];
                for r in 0..rows {
                    padded[r * width..r * width + classes]
                        .copy_from_slice(&scores[r * classes..(r + 1) * classes]);
                }
                let logits = Array::from_f64(&device, [rows, width], dtype, &padded).unwrap();
                let (_, ts) = random_ids(&device, &mut rng, &[rows], classes);
                let (targets, ts) = with_ignored_rows(&device, &ts);
                let what = format!("{dtype} {rows}x{classes} in rows of {width}");
                let want = reference_loss(&scores, &ts, classes);
                let rtol = tolerance(loss_dtype(dtype)) * 4.0;
                let unpadded = Array::from_f64(&device, [rows, classes], dtype, &scores).unwrap();
                let dy = dloss(&device, dtype, 1.5);
                let plain = cross_entropy_backward(&unpadded, &targets, &dy, Some(IGNORE));
                let plain = plain.unwrap().to_f64().unwrap();
                // The targets read back by the backend, or given as the caller read them.
                for host in [None, Some(ts.as_slice())] {
                    let what = format!("{what}, host targets given: {}", host.is_some());
                    let loss =
                        padded_cross_entropy(&logits, Some(classes), &targets, Some(IGNORE), host);
                    assert_close(&what, &loss.unwrap().to_f64().unwrap(), &[want], rtol);
                    let grad = padded_cross_entropy_backward(
                        &logits,
                        Some(classes),
                        &targets,
                        &dy,
                        Some(IGNORE),
                        host,
                    )
                    .unwrap();
                    assert_eq!(grad.shape().dims(), [rows, width], "{what}");
                    let grad = grad.to_f64().unwrap();
                    for r in 0..rows {
                        let row = &grad[r * width..(r + 1) * width];
                        let padding = &row[classes..];
                        assert!(padding.iter().all(|&g| g == 0.0), "{what}: row {r}");
                        let want = &plain[r * classes..(r + 1) * classes];
                        assert_close(&what, &row[..classes], want, tolerance(dtype) * 2.0);
                    }
                }
            }
            let logits = Array::zeros(&device, [2, 4], dtype).unwrap();
            let targets = Array::from_host(&device, [2], &[0u32, 1]).unwrap();
            for classes in [0, 5] {
                let err = padded_cross_entropy(&logits, Some(classes), &targets, None, None);
                let err = err.unwrap_err();
                assert!(
                    matches!(err, Error::Argument { .. }),
                    "{classes} classes: {err}"
                );
            }
            // Host targets out of range, or not one per row, are refused before any kernel.
            for host in [&[0u32, 3][..], &[0]] {
                let err = padded_cross_entropy(&logits, Some(3), &targets, None, Some(host));
                let err = err.unwrap_err();
                assert!(matches!(err, Error::Argument { .. }), "{host:?}: {err}");
            }
        }
    }
}

#[test]
fn cross_entropy_gives_masked_classes_nothing() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            // Rows a warp reads, rows a block reads, long and longer.
            for classes in [11, 300, 3000, 9000] {
                let rows = 3;
                let (logits, ls) = masked(&device, &mut rng, [rows, classes], dtype, -4.0, 4.0);
                // Each row's target is one of its unmasked classes.
                let ts: Vec<u32> = (0..rows)
                    .map(|r| {
                        let open: Vec<usize> = (0..classes)
                            .filter(|&j| ls[r * classes + j].is_finite())
                            .collect();
                        open[(rng.next_u64() % open.len() as u64) as usize] as u32
                    })
                    .collect();
                let targets = Array::from_host(&device, [rows], &ts).unwrap();
                let what = format!("{dtype} {rows}x{classes} masked");
                let loss = cross_entropy(&logits, &targets, None).unwrap();
                let rtol = tolerance(loss_dtype(dtype)) * 4.0;
                let want = reference_loss(&ls, &ts, classes);
                assert_close(&what, &loss.to_f64().unwrap(), &[want], rtol);
                let dy = dloss(&device, dtype, 1.0);
                let grad = cross_entropy_backward(&logits, &targets, &dy, None).unwrap();
                let grad = grad.to_f64().unwrap();
                for (i, &g) in grad.iter().enumerate() {
                    if ls[i] == f64::NEG_INFINITY {
                        assert_eq!(g, 0.0, "{what}: gradient of masked class {i}");
                    } else {
                        assert!(g.is_finite(), "{what}: gradient {i} is {g}");
                    }
                }
            }
        }
    }
}

#[test]
fn cross_entropy_is_stable_for_large_logits() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for (lo, hi) in [(995.0, 1005.0), (-1005.0, -995.0)] {
                let (rows, classes) = (5, 11);
                let (logits, ls) = random(&device, &mut rng, &[rows, classes], dtype, lo, hi);
                let (targets, ts) = random_ids(&device, &mut rng, &[rows], classes);
                let got = cross_entropy(&logits, &targets, None)
                    .unwrap()
                    .to_f64()
                    .unwrap();
                let want = reference_loss(&ls, &ts, classes);
                assert!(got[0].is_finite(), "{dtype} around {lo}: {}", got[0]);
                let what = format!("{dtype} logits in [{lo}, {hi})");
                assert_close(&what, &got, &[want], tolerance(DType::F32) * 10.0);
                let one = dloss(&device, dtype, 1.0);
                let grad = cross_entropy_backward(&logits, &targets, &one, None).unwrap();
                assert!(grad.to_f64().unwrap().iter().all(|g| g.is_finite()));
            }
        }
    }
}

#[test]
fn a_sliced_vocabulary_gives_the_whole_rows_loss_and_gradient() {
    // Each row's vocabulary cut into slices of `slice` columns, the last shorter: the slices'
    // log-sum-exps combine into the row's, the one target logit found is its loss' other
    // term, and each slice's gradient against the whole log-sum-exp is the row's gradient.
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for (rows, classes, slice) in [(1, 5, 2), (17, 33, 11), (3, 1500, 1100), (4, 7, 7)] {
                let (_, ls) = random(&device, &mut rng, &[rows, classes], dtype, -4.0, 4.0);
                let ts: Vec<u32> = (0..rows).map(|i| ((i * 5 + 3) % classes) as u32).collect();
                let scales: Vec<f64> = (0..rows).map(|i| 0.5 - i as f64 * 0.25).collect();
                let lse: Vec<f64> = (0..rows)
                    .map(|i| row_loss(&ls[i * classes..(i + 1) * classes], 0) + ls[i * classes])
                    .collect();
                let loss_dtype = loss_dtype(dtype);
                let lse_array = Array::from_f64(&device, [rows], loss_dtype, &lse).unwrap();
                let scale = Array::from_f64(&device, [rows], loss_dtype, &scales).unwrap();
                let mut picked = vec![0.0; rows];
                let mut combined = vec![0.0; rows];
                for first in (0..classes).step_by(slice) {
                    let width = slice.min(classes - first);
                    let what = format!("{device} {dtype} {rows}x{classes} columns {first}..");
                    let part: Vec<f64> = (0..rows)
                        .flat_map(|i| ls[i * classes + first..i * classes + first + width].to_vec())
                        .collect();
                    let logits = Array::from_f64(&device, [rows, width], dtype, &part).unwrap();
                    let local: Vec<u32> =
                        ts.iter().map(|&t| t.wrapping_sub(first as u32)).collect();
                    let targets = Array::from_host(&device, [rows], &local).unwrap();
                    let parts = sliced_cross_entropy_parts(&logits, &targets).unwrap();
                    assert_eq!(parts.shape().dims(), [2, rows], "{what}");
                    let parts = parts.to_f64().unwrap();
                    for i in 0..rows {
                        combined[i] += (parts[i] - lse[i]).exp();
                        picked[i] += parts[rows + i];
                    }
                    let got = sliced_cross_entropy_backward(&logits, &targets, &lse_array, &scale)
                        .unwrap()
                        .to_f64()
                        .unwrap();
                    let mut want = Vec::new();
                    for i in 0..rows {
                        for (j, &x) in part[i * width..(i + 1) * width].iter().enumerate() {
                            let onehot = f64::from(u8::from(local[i] as usize == j));
                            want.push(((x - lse[i]).exp() - onehot) * scales[i]);
                        }
                    }
                    assert_close(&what, &got, &want, tolerance(dtype) * 2.0);
                }
                let what = format!("{device} {dtype} {rows}x{classes} in slices of {slice}");
                let ones = vec![1.0; rows];
                assert_close(&what, &combined, &ones, tolerance(dtype) * 2.0);
                let want: Vec<f64> = (0..rows)
                    .map(|i| ls[i * classes + ts[i] as usize])
                    .collect();
                assert_close(&what, &picked, &want, tolerance(dtype));
            }
        }
    }
    let d = &devices()[0];
    let logits = Array::from_f64(d, [2, 3], DType::F32, &[0.0; 6]).unwrap();
    let targets = Array::from_host(d, [2], &[0u32, 9]).unwrap();
    let (lse, f64_lse) = (
        Array::from_f64(d, [2], DType::F32, &[0.0; 2]).unwrap(),
        Array::from_f64(d, [2], DType::F64, &[0.0; 2]).unwrap(),
    );
    let short = Array::from_f64(d, [1], DType::F32, &[0.0]).unwrap();
    let op = "sliced_cross_entropy_backward";
    let wrong = "lse must be [2] of f32, got [2] of f64";
    assert_fails_leaking_nothing!(d; sliced_cross_entropy_backward(&logits, &targets, &f64_lse, &lse) => Argument(op, wrong));
    let wrong = "scale must be [2] of f32, got [1] of f32";
    assert_fails_leaking_nothing!(d; sliced_cross_entropy_backward(&logits, &targets, &lse, &short) => Argument(op, wrong));
}

#[test]
fn cross_entropy_backward_matches_the_reference_and_rows_sum_to_zero() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for (rows, classes) in CASES {
                for (value, ignore) in [(1.0, None), (2.5, Some(IGNORE)), (-0.75, None)] {
                    let (logits, ls) =
                        random(&device, &mut rng, &[rows, classes], dtype, -4.0, 4.0);
                    let (targets, ts) = random_ids(&device, &mut rng, &[rows], classes);
                    let (targets, ts) = match ignore {
                        Some(_) => with_ignored_rows(&device, &ts),
                        None => (targets, ts),
                    };
                    let counted = ts.iter().filter(|&&t| t != IGNORE).count().max(1);
                    let dy = dloss(&device, dtype, value);
                    let got = cross_entropy_backward(&logits, &targets, &dy, ignore).unwrap();
                    assert_eq!(got.shape().dims(), [rows, classes]);
                    assert_eq!(got.dtype(), dtype);
                    let got = got.to_f64().unwrap();
                    let mut want = Vec::new();
                    for i in 0..rows {
                        if ts[i] == IGNORE {
                            want.extend(std::iter::repeat_n(0.0, classes));
                            continue;
                        }
                        let row = &ls[i * classes..(i + 1) * classes];
                        let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        let sum: f64 = row.iter().map(|&x| (x - max).exp()).sum();
                        for (j, &x) in row.iter().enumerate() {
                            let onehot = if j == ts[i] as usize { 1.0 } else { 0.0 };
                            want.push(((x - max).exp() / sum - onehot) * value / counted as f64);
                        }
                    }
                    let what = format!("{dtype} {rows}x{classes} dloss {value} {ignore:?}");
                    let rtol = tolerance(dtype) * 2.0;
                    assert_close(&what, &got, &want, rtol);
                    for (i, row) in got.chunks(classes).enumerate() {
                        let total: f64 = row.iter().sum();
                        let magnitude: f64 = row.iter().map(|g| g.abs()).sum();
                        assert!(
                            total.abs() <= rtol * magnitude.max(1e-300) + 1e-300,
                            "{what}: row {i} sums to {total}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn cross_entropy_backward_matches_finite_differences_in_f64() {
    let device = &devices()[0];
    let mut rng = rng();
    let (rows, classes, h, value) = (3, 5, 1e-6, 1.7);
    let (logits, ls) = random(device, &mut rng, &[rows, classes], DType::F64, -2.0, 2.0);
    let (targets, _) = random_ids(device, &mut rng, &[rows], classes);
    let dy = dloss(device, DType::F64, value);
    let grad = cross_entropy_backward(&logits, &targets, &dy, None)
        .unwrap()
        .to_f64()
        .unwrap();
    let loss_at = |values: &[f64]| -> f64 {
        let x = Array::from_f64(device, [rows, classes], DType::F64, values).unwrap();
        cross_entropy(&x, &targets, None).unwrap().to_f64().unwrap()[0]
    };
    for k in 0..rows * classes {
        let (mut plus, mut minus) = (ls.clone(), ls.clone());
        plus[k] += h;
        minus[k] -= h;
        let numeric = (loss_at(&plus) - loss_at(&minus)) / (2.0 * h) * value;
        assert!(
            (grad[k] - numeric).abs() <= 1e-8,
            "element {k}: analytic {}, numeric {numeric}",
            grad[k]
        );
    }
}

#[test]
fn out_of_range_targets_are_argument_errors_that_leak_nothing() {
    let d = &devices()[0];
    let mut rng = rng();
    let (logits, _) = random(d, &mut rng, &[3, 4], DType::F16, -1.0, 1.0);
    let targets = Array::from_host(d, [3], &[3u32, 0, 9]).unwrap();
    let t9 = "target 9 at position 2 is out of range for 4 classes";
    assert_fails_leaking_nothing!(d; cross_entropy(&logits, &targets, None) => Argument("cross_entropy", t9));
    assert_fails_leaking_nothing!(d; cross_entropy(&logits, &targets, Some(3)) => Argument("cross_entropy", t9));
    let op = "cross_entropy_backward";
    let one = dloss(d, DType::F16, 1.0);
    assert_fails_leaking_nothing!(d; cross_entropy_backward(&logits, &targets, &one, None) => Argument(op, t9));
    // Ignoring the out-of-range target makes the same call fine.
    cross_entropy(&logits, &targets, Some(9)).unwrap();
}

#[test]
fn mismatched_operands_are_typed_errors_that_leak_nothing() {
    let d = &devices()[0];
    let mut rng = rng();
    let mut float = |shape: &[usize], dtype| random(d, &mut rng, shape, dtype, 0.5, 1.5).0;
    let (int_table, vector) = (float(&[5, 3], DType::U32), float(&[5], DType::F32));
    let (logits, float_ids) = (float(&[4, 5], DType::BF16), float(&[4], DType::F32));
    let mut rng = common::rng();
    let ids = random_ids(d, &mut rng, &[4], 5).0;
    let far_ids = random_ids(&devices()[0], &mut rng, &[4], 5).0;
    let long_ids = random_ids(d, &mut rng, &[5], 5).0;
    let empty = Array::from_f64(d, [0, 5], DType::F32, &[]).unwrap();
    let no_ids = Array::from_host::<u32>(d, [0], &[]).unwrap();
    let op = "cross_entropy";
    assert_fails_leaking_nothing!(d; cross_entropy(&logits, &long_ids, None) => Shape(op, "[4, 5]", "[5]"));
    assert_fails_leaking_nothing!(d; cross_entropy(&vector, &ids, None) => Shape(op));
    assert_fails_leaking_nothing!(d; cross_entropy(&empty, &no_ids, None) => Shape(op));
    assert_fails_leaking_nothing!(d; cross_entropy(&logits, &float_ids, None) => DType(op));
    assert_fails_leaking_nothing!(d; cross_entropy(&int_table, &ids, None) => DType(op));
    assert_fails_leaking_nothing!(d; cross_entropy(&logits, &far_ids, None) => Device(op));
    let op = "cross_entropy_backward";
    let one = dloss(d, logits.dtype(), 1.0);
    let f64_one = dloss(d, DType::F64, 1.0);
    let pair = Array::full(d, [2], loss_dtype(logits.dtype()), 1.0).unwrap();
    assert_fails_leaking_nothing!(d; cross_entropy_backward(&logits, &long_ids, &one, None) => Shape(op));
    assert_fails_leaking_nothing!(d; cross_entropy_backward(&logits, &float_ids, &one, None) => DType(op));
    assert_fails_leaking_nothing!(d; cross_entropy_backward(&logits, &ids, &f64_one, None) => Argument(op, "dloss"));
    assert_fails_leaking_nothing!(d; cross_entropy_backward(&logits, &ids, &pair, None) => Argument(op, "[2]"));
}
