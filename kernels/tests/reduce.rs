//! Reductions against f64 references.

mod common;

use common::{assert_close_scaled, broadcast_at, devices, random, rng, tolerance};
use headroom_kernels::ops::reduce::{ReduceOp, reduce, sum_to};
use headroom_kernels::{Array, DType, Error, Shape};

#[test]
fn reductions_over_every_axis_match_the_f64_reference() {
    // [2, 3000] and [3, 700, 40] reach past one block of threads per output and per column;
    // on a GPU the last two reduce long rows, and [3, 700, 40] long columns,
    // in parts (`ReduceSpec::parts`).
    let shapes: [&[usize]; 9] = [
        &[1],
        &[9],
        &[3, 5],
        &[2, 1, 7],
        &[4, 3, 1, 5],
        &[2, 3000],
        &[3, 700, 40],
        &[35_000],
        &[2, 33_000],
    ];
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for shape in shapes {
                for axis in 0..shape.len() {
                    let (x, xs) = random(&device, &mut rng, shape, dtype, -2.0, 2.0);
                    let outer: usize = shape[..axis].iter().product();
                    let inner: usize = shape[axis + 1..].iter().product();
                    let len = shape[axis];
                    let item = |o: usize, a: usize, i: usize| xs[(o * len + a) * inner + i];
                    for op in [
                        ReduceOp::Sum,
                        ReduceOp::Mean,
                        ReduceOp::Max,
                        ReduceOp::SumSquares,
                    ] {
                        let mut want = Vec::new();
                        let mut scale = Vec::new();
                        for o in 0..outer {
                            for i in 0..inner {
                                let column: Vec<f64> = (0..len).map(|a| item(o, a, i)).collect();
                                let magnitude: f64 = match op {
                                    ReduceOp::SumSquares => column.iter().map(|v| v * v).sum(),
                                    _ => column.iter().map(|v| v.abs()).sum(),
                                };
                                want.push(match op {
                                    ReduceOp::Sum => column.iter().sum(),
                                    ReduceOp::Mean => column.iter().sum::<f64>() / len as f64,
                                    ReduceOp::Max => {
                                        column.iter().cloned().fold(f64::MIN, f64::max)
                                    }
                                    ReduceOp::SumSquares => column.iter().map(|v| v * v).sum(),
                                });
                                scale.push(magnitude);
                            }
                        }
                        for keep_dim in [false, true] {
                            let got = reduce(op, &x, axis, keep_dim).unwrap();
                            let mut dims = shape.to_vec();
                            if keep_dim {
                                dims[axis] = 1;
                            } else {
                                dims.remove(axis);
                            }
                            assert_eq!(got.shape().dims(), dims.as_slice());
                            let what = format!("{op:?} {dtype} {shape:?} axis {axis}");
                            assert_close_scaled(
                                &what,
                                &got.to_f64().unwrap(),
                                &want,
                                &scale,
                                tolerance(dtype),
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn a_nan_wins_the_max_of_its_row_and_its_column() {
    let nan = f64::NAN;
    for device in devices() {
        for dtype in DType::FLOATS {
            let x =
                Array::from_f64(&device, [2, 3], dtype, &[1.0, nan, 3.0, 4.0, 5.0, 6.0]).unwrap();
            let rows = reduce(ReduceOp::Max, &x, 1, false)
                .unwrap()
                .to_f64()
                .unwrap();
            assert!(
                rows[0].is_nan() && rows[1] == 6.0,
                "{device} {dtype} rows: {rows:?}"
            );
            let columns = reduce(ReduceOp::Max, &x, 0, false)
                .unwrap()
                .to_f64()
                .unwrap();
            assert!(
                columns[0] == 4.0 && columns[1].is_nan() && columns[2] == 6.0,
                "{device} {dtype} columns: {columns:?}"
            );
        }
    }
}

#[test]
fn an_axis_past_the_rank_is_an_argument_error() {
    let device = &devices()[0];
    let mut rng = rng();
    let (x, _) = random(device, &mut rng, &[2, 3], DType::F32, -1.0, 1.0);
    let err = reduce(ReduceOp::Sum, &x, 2, false).unwrap_err();
    assert!(
        err.to_string().contains("axis 2") && err.to_string().contains("sum"),
        "{err}"
    );
}

#[test]
fn sums_to_a_broadcastable_shape_match_the_f64_reference() {
    let targets: [&[usize]; 8] = [
        &[4],
        &[3, 1],
        &[1, 3, 1],
        &[2, 1, 4],
        &[],
        &[2, 3, 4],
        &[1],
        &[2, 3, 1],
    ];
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            let (x, xs) = random(&device, &mut rng, &[2, 3, 4], dtype, -2.0, 2.0);
            for to in targets {
                let got = sum_to(&x, to).unwrap();
                assert_eq!(got.shape().dims(), to);
                // Each element of x adds into the element of the result it broadcasts from.
                let target = Shape::new(to);
                let mut want = vec![0.0; target.numel()];
                let mut scale = vec![0.0; target.numel()];
                let index: Vec<f64> = (0..target.numel()).map(|i| i as f64).collect();
                for (i, &v) in xs.iter().enumerate() {
                    let j = broadcast_at(&index, &target, x.shape(), i) as usize;
                    want[j] += v;
                    scale[j] += v.abs();
                }
                let what = format!("{dtype} [2, 3, 4] to {to:?}");
                assert_close_scaled(
                    &what,
                    &got.to_f64().unwrap(),
                    &want,
                    &scale,
                    tolerance(dtype),
                );
            }
            for bad in [&[3][..], &[2, 2, 3, 4], &[2, 4]] {
                let err = sum_to(&x, bad).unwrap_err();
                assert!(
                    matches!(err, Error::Shape { op: "sum_to", .. }),
                    "{bad:?}: {err}"
                );
            }
        }
    }
}

/// A value computed from a row of values.
type RowFn = fn(&[f64]) -> f64;

#[test]
fn a_long_axis_reduced_whole_matches_the_f64_reference() {
    // A gradient's squared norm reduces one long axis (in parallel chunks); rows of two such
    // axes, a length no chunk divides, and a NaN that wins its row's maximum.
    let mut rng = rng();
    let len = 3 * (1 << 14) + 5;
    for device in devices() {
        for dtype in [DType::F32, DType::BF16] {
            let (x, values) = random(&device, &mut rng, &[2, len], dtype, -1.0, 1.0);
            let rows: Vec<&[f64]> = values.chunks(len).collect();
            let abs_sum = |r: &[f64]| r.iter().map(|v| v.abs()).sum::<f64>();
            // Each op's reference and the magnitude its rounding is measured against.
            let wants: [(ReduceOp, RowFn, RowFn); 4] = [
                (ReduceOp::Sum, |r| r.iter().sum(), abs_sum),
                (
                    ReduceOp::Mean,
                    |r| r.iter().sum::<f64>() / r.len() as f64,
                    |r| r.iter().map(|v| v.abs()).sum::<f64>() / r.len() as f64,
                ),
                (
                    ReduceOp::SumSquares,
                    |r| r.iter().map(|v| v * v).sum(),
                    |r| r.iter().map(|v| v * v).sum(),
                ),
                (
                    ReduceOp::Max,
                    |r| r.iter().copied().fold(f64::MIN, f64::max),
                    |_| 1.0,
                ),
            ];
            for (op, want, magnitude) in wants {
                let got = reduce(op, &x, 1, false).unwrap().to_f64().unwrap();
                let want: Vec<f64> = rows.iter().map(|r| want(r)).collect();
                let scale: Vec<f64> = rows.iter().map(|r| magnitude(r)).collect();
                let what = format!("{op:?} {dtype}");
                assert_close_scaled(&what, &got, &want, &scale, tolerance(dtype));
            }
            let mut with_nan = values.clone();
            with_nan[len + 7] = f64::NAN;
            let x = Array::from_f64(&device, [2, len], dtype, &with_nan).unwrap();
            let max = reduce(ReduceOp::Max, &x, 1, false)
                .unwrap()
                .to_f64()
                .unwrap();
            assert!(!max[0].is_nan() && max[1].is_nan(), "{max:?}");
        }
    }
}
