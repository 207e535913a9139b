//! Embedding, cross-entropy and causal masking against f64 references, and their errors.
//! (Memory planning and OOM behaviour: `memory.rs`.)

mod common;

use common::{assert_close, assert_close_scaled, devices, masked, random, rng, tolerance};
use headroom_alloc::trace::SplitMix64;
use headroom_kernels::ops::index::{
    causal_mask, cross_entropy, cross_entropy_backward, embedding, embedding_backward, loss_dtype,
};
use headroom_kernels::{Array, DType, Device, Error};

/// Random ids in `0..limit` of `shape`, uploaded as U32, and their values.
fn random_ids(
    device: &Device,
    rng: &mut SplitMix64,
    shape: &[usize],
    limit: usize,
) -> (Array, Vec<u32>) {
    let n: usize = shape.iter().product();
    let ids: Vec<u32> = (0..n)
        .map(|_| (rng.next_u64() % limit as u64) as u32)
        .collect();
    (Array::from_host(device, shape, &ids).unwrap(), ids)
}

/// Leaves stale nonzero data in freed memory, so that an output that is not fully written (a
/// gradient table not zeroed, say) shows.
fn dirty(device: &Device, dtype: DType, n: usize) {
    drop(Array::full(device, [n.max(1)], dtype, 7.25).unwrap());
}

/// The f64 reference of an embedding's gradient: rows of `gs` (`[ids.len(), dim]`) summed
/// into a `[vocab, dim]` table at their ids; and the sums of their magnitudes, the scale of
/// each element's rounding error.
fn scatter_reference(ids: &[u32], gs: &[f64], vocab: usize, dim: usize) -> (Vec<f64>, Vec<f64>) {
    let mut want = vec![0.0; vocab * dim];
    let mut scale = vec![0.0; vocab * dim];
    for (p, &id) in ids.iter().enumerate() {
        for k in 0..dim {
            want[id as usize * dim + k] += gs[p * dim + k];
            scale[id as usize * dim + k] += gs[p * dim + k].abs();
        }
    }
    (want, scale)
}

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

#[test]
fn embedding_matches_the_reference_gather() {
    // (vocab, dim, ids' shape)
    let cases: [(usize, usize, &[usize]); 6] = [
        (1, 1, &[1]),
        (1, 3, &[4]),
        (5, 1, &[2, 3]),
        (7, 9, &[3, 1, 5]),
        (13, 16, &[]),
        (300, 33, &[64]),
    ];
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for (vocab, dim, ids_shape) in cases {
                let (table, ts) = random(&device, &mut rng, &[vocab, dim], dtype, -3.0, 3.0);
                let (ids, is) = random_ids(&device, &mut rng, ids_shape, vocab);
                dirty(&device, dtype, is.len() * dim);
                let out = embedding(&table, &ids).unwrap();
                let mut dims = ids_shape.to_vec();
                dims.push(dim);
                assert_eq!(out.shape().dims(), dims.as_slice());
                assert_eq!(out.dtype(), dtype);
                let want: Vec<f64> = is
                    .iter()
                    .flat_map(|&id| ts[id as usize * dim..(id as usize + 1) * dim].to_vec())
                    .collect();
                assert_eq!(out.to_f64().unwrap(), want, "{dtype} {vocab}x{dim}");
            }
        }
    }
}

#[test]
fn embedding_backward_accumulates_repeated_ids_like_the_reference() {
    // (vocab, dim, ids' shape); small vocabularies force repeats, large ones untouched rows.
    let cases: [(usize, usize, &[usize]); 6] = [
        (1, 1, &[1]),
        (1, 4, &[6]),
        (3, 1, &[2, 5]),
        (5, 7, &[3, 4]),
        (40, 9, &[11]),
        (4, 129, &[2, 50]),
    ];
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for (vocab, dim, ids_shape) in cases {
                let (ids, is) = random_ids(&device, &mut rng, ids_shape, vocab);
                let mut dy_shape = ids_shape.to_vec();
                dy_shape.push(dim);
                let (dy, gs) = random(&device, &mut rng, &dy_shape, dtype, -2.0, 2.0);
                let (want, scale) = scatter_reference(&is, &gs, vocab, dim);
                dirty(&device, dtype, vocab * dim);
                let got = embedding_backward(&ids, &dy, vocab).unwrap();
                assert_eq!(got.shape().dims(), [vocab, dim]);
                assert_eq!(got.dtype(), dtype);
                let got = got.to_f64().unwrap();
                let what = format!("{dtype} {vocab}x{dim} ids {ids_shape:?}");
                assert_close_scaled(&what, &got, &want, &scale, tolerance(dtype));
                for (i, (&g, &s)) in got.iter().zip(&scale).enumerate() {
                    if s == 0.0 {
                        assert_eq!(g, 0.0, "{what}: untouched element {i} is not zero");
                    }
                }
            }
        }
    }
    // Every position naming one row: the row is the sum of them all, the others are zero.
    let device = &devices()[0];
    let ids = Array::from_host(device, [4], &[1u32, 1, 1, 1]).unwrap();
    let dy = Array::from_f64(
        device,
        [4, 2],
        DType::F32,
        &[1., 2., 3., 4., 5., 6., 7., 8.],
    )
    .unwrap();
    let got = embedding_backward(&ids, &dy, 3).unwrap().to_f64().unwrap();
    assert_eq!(got, [0., 0., 16., 20., 0., 0.]);
}

#[test]
fn embedding_backward_of_a_frequent_id_is_exact_and_the_same_everywhere() {
    // (vocab, dim, positions, share of them naming id 2): one id nearly everywhere (cut into
    // many pieces, alongside short runs), and one id everywhere.
    let cases = [(9, 37, 3000, 0.8), (3, 5, 2000, 1.0)];
    let mut rng = rng();
    for (vocab, dim, n, share) in cases {
        let is: Vec<u32> = (0..n)
            .map(|_| {
                let draw = rng.next_u64();
                if (draw % 1000) as f64 / 1000.0 < share {
                    2
                } else {
                    ((draw >> 32) % vocab as u64) as u32
                }
            })
            .collect();
        let gs = common::values(&mut rng, n * dim, -2.0, 2.0);
        let (want, scale) = scatter_reference(&is, &gs, vocab, dim);
        for dtype in DType::FLOATS {
            let what = format!("{dtype} vocab {vocab} dim {dim}, {n} positions");
            let mut results = Vec::new();
            for device in devices() {
                let ids = Array::from_host(&device, [n], &is).unwrap();
                let dy = Array::from_f64(&device, [n, dim], dtype, &gs).unwrap();
                let got = embedding_backward(&ids, &dy, vocab)
                    .unwrap()
                    .to_f64()
                    .unwrap();
                assert_close_scaled(&what, &got, &want, &scale, tolerance(dtype));
                results.push((device.to_string(), got));
                if device.to_string() == "cpu" {
                    // The sums' order is fixed by the input, not by the threads running them.
                    let one_thread = rayon::ThreadPoolBuilder::new().num_threads(1).build();
                    let alone = one_thread
                        .unwrap()
                        .install(|| embedding_backward(&ids, &dy, vocab))
                        .unwrap();
                    let alone = alone.to_f64().unwrap();
                    assert_eq!(alone, results[0].1, "{what}: one thread against the pool");
                }
            }
            for (device, got) in &results[1..] {
                assert_eq!(got, &results[0].1, "{what}: {device} against the CPU");
            }
        }
    }
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
fn causal_mask_matches_the_reference() {
    let shapes: [&[usize]; 6] = [
        &[1, 1],
        &[3, 3],
        &[2, 5, 5],
        &[2, 1, 4, 4],
        &[7, 7],
        &[3, 0, 0],
    ];
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for shape in shapes {
                for fill in [f64::NEG_INFINITY, 0.0, -2.5] {
                    let (x, xs) = random(&device, &mut rng, shape, dtype, -3.0, 3.0);
                    dirty(&device, dtype, xs.len());
                    let got = causal_mask(&x, fill).unwrap();
                    assert_eq!(got.shape().dims(), shape);
                    assert_eq!(got.dtype(), dtype);
                    let t = shape[shape.len() - 1];
                    let want: Vec<f64> = xs
                        .iter()
                        .enumerate()
                        .map(|(k, &v)| if k % t > (k / t) % t { fill } else { v })
                        .collect();
                    assert_eq!(got.to_f64().unwrap(), want, "{dtype} {shape:?} fill {fill}");
                }
            }
        }
    }
}

/// `assert_fails!(device; call => Kind(op, words...))`: asserts that `call` fails with
/// `Error::Kind` naming `op` (its text containing each of `words`), and leaves the device's
/// memory in use as it was.
macro_rules! assert_fails {
    ($device:expr; $call:expr => $kind:ident($op:expr $(, $word:expr)*)) => {{
        let in_use = $device.allocator().stats().in_use;
        let err = $call.expect_err(stringify!($call));
        let named = matches!(&err, Error::$kind { op, .. } if *op == $op);
        assert!(named, "{}: {err:?}", stringify!($call));
        $(assert!(err.to_string().contains($word), "{err}");)*
        assert_eq!($device.allocator().stats().in_use, in_use, "{err}: leaked");
    }};
}

#[test]
fn out_of_range_indices_are_argument_errors_that_leak_nothing() {
    let d = &devices()[0];
    let mut rng = rng();
    let (table, _) = random(d, &mut rng, &[5, 3], DType::F32, -1.0, 1.0);
    let ids = Array::from_host(d, [2, 2], &[0u32, 4, 5, 1]).unwrap();
    let (dy, _) = random(d, &mut rng, &[2, 2, 3], DType::BF16, -1.0, 1.0);
    let (logits, _) = random(d, &mut rng, &[3, 4], DType::F16, -1.0, 1.0);
    let targets = Array::from_host(d, [3], &[3u32, 0, 9]).unwrap();
    let id5 = "id 5 at position 2 is out of range for 5 rows";
    let id4 = "id 4 at position 1 is out of range for 4 rows";
    let t9 = "target 9 at position 2 is out of range for 4 classes";
    assert_fails!(d; embedding(&table, &ids) => Argument("embedding", id5));
    assert_fails!(d; embedding_backward(&ids, &dy, 5) => Argument("embedding_backward", id5));
    assert_fails!(d; embedding_backward(&ids, &dy, 4) => Argument("embedding_backward", id4));
    assert_fails!(d; cross_entropy(&logits, &targets, None) => Argument("cross_entropy", t9));
    assert_fails!(d; cross_entropy(&logits, &targets, Some(3)) => Argument("cross_entropy", t9));
    let op = "cross_entropy_backward";
    let one = dloss(d, DType::F16, 1.0);
    assert_fails!(d; cross_entropy_backward(&logits, &targets, &one, None) => Argument(op, t9));
    // Ignoring the out-of-range target makes the same call fine.
    cross_entropy(&logits, &targets, Some(9)).unwrap();
    // The device still works.
    let grad = embedding_backward(&ids, &dy, 6).unwrap();
    assert_eq!(grad.shape().dims(), [6, 3]);
}

#[test]
fn mismatched_operands_are_typed_errors_that_leak_nothing() {
    let d = &devices()[0];
    let mut rng = rng();
    let mut float = |shape: &[usize], dtype| random(d, &mut rng, shape, dtype, 0.5, 1.5).0;
    let (table, flat_table) = (float(&[5, 3], DType::F32), float(&[15], DType::F32));
    let (int_table, dy) = (float(&[5, 3], DType::U32), float(&[4, 3], DType::F64));
    let (bad_dy, vector) = (float(&[5, 3], DType::F64), float(&[5], DType::F32));
    let (logits, float_ids) = (float(&[4, 5], DType::BF16), float(&[4], DType::F32));
    let (oblong, int_square) = (float(&[2, 3, 4], DType::F32), float(&[3, 3], DType::U32));
    let mut rng = common::rng();
    let ids = random_ids(d, &mut rng, &[4], 5).0;
    let far_ids = random_ids(&devices()[0], &mut rng, &[4], 5).0;
    let long_ids = random_ids(d, &mut rng, &[5], 5).0;
    let empty = Array::from_f64(d, [0, 5], DType::F32, &[]).unwrap();
    let no_ids = Array::from_host::<u32>(d, [0], &[]).unwrap();
    let op = "embedding";
    assert_fails!(d; embedding(&int_table, &ids) => DType(op));
    assert_fails!(d; embedding(&table, &float_ids) => DType(op));
    assert_fails!(d; embedding(&flat_table, &ids) => Shape(op, "[15]"));
    assert_fails!(d; embedding(&table, &far_ids) => Device(op));
    let op = "embedding_backward";
    assert_fails!(d; embedding_backward(&float_ids, &dy, 5) => DType(op));
    assert_fails!(d; embedding_backward(&ids, &int_table, 5) => DType(op));
    assert_fails!(d; embedding_backward(&ids, &bad_dy, 5) => Shape(op, "[5, 3]", "[4]"));
    assert_fails!(d; embedding_backward(&ids, &vector, 5) => Shape(op));
    assert_fails!(d; embedding_backward(&far_ids, &dy, 5) => Device(op));
    let op = "cross_entropy";
    assert_fails!(d; cross_entropy(&logits, &long_ids, None) => Shape(op, "[4, 5]", "[5]"));
    assert_fails!(d; cross_entropy(&vector, &ids, None) => Shape(op));
    assert_fails!(d; cross_entropy(&empty, &no_ids, None) => Shape(op));
    assert_fails!(d; cross_entropy(&logits, &float_ids, None) => DType(op));
    assert_fails!(d; cross_entropy(&int_table, &ids, None) => DType(op));
    assert_fails!(d; cross_entropy(&logits, &far_ids, None) => Device(op));
    let op = "cross_entropy_backward";
    let one = dloss(d, logits.dtype(), 1.0);
    let f64_one = dloss(d, DType::F64, 1.0);
    let pair = Array::full(d, [2], loss_dtype(logits.dtype()), 1.0).unwrap();
    assert_fails!(d; cross_entropy_backward(&logits, &long_ids, &one, None) => Shape(op));
    assert_fails!(d; cross_entropy_backward(&logits, &float_ids, &one, None) => DType(op));
    assert_fails!(d; cross_entropy_backward(&logits, &ids, &f64_one, None) => Argument(op, "dloss"));
    assert_fails!(d; cross_entropy_backward(&logits, &ids, &pair, None) => Argument(op, "[2]"));
    let op = "causal_mask";
    assert_fails!(d; causal_mask(&oblong, 0.0) => Shape(op, "[2, 3, 4]"));
    assert_fails!(d; causal_mask(&vector, 0.0) => Shape(op));
    assert_fails!(d; causal_mask(&int_square, 0.0) => DType(op));
}
