//! Embedding and causal masking against f64 references, and their errors. (Memory planning and
//! OOM behaviour: `memory.rs`.)

#[macro_use]
mod common;

use common::{assert_close_scaled, devices, dirty, random, random_ids, rng, tolerance};
use headroom_kernels::ops::index::{
    causal_mask, embedding, embedding_backward, embedding_backward_rows,
};
use headroom_kernels::{Array, DType, Error};

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

#[test]
fn a_range_of_the_gradients_rows_is_those_rows_of_the_whole_to_the_bit() {
    // A frequent id among the positions, so that long runs are cut into pieces inside and
    // outside the range alike.
    let (vocab, dim, n) = (23, 6, 1500);
    let mut rng = rng();
    let is: Vec<u32> = (0..n)
        .map(|p| match p % 3 {
            0 => 7,
            _ => (rng.next_u64() % vocab as u64) as u32,
        })
        .collect();
    let gs = common::values(&mut rng, n * dim, -2.0, 2.0);
    for device in devices() {
        for dtype in DType::FLOATS {
            let ids = Array::from_host(&device, [n], &is).unwrap();
            let dy = Array::from_f64(&device, [n, dim], dtype, &gs).unwrap();
            let whole = embedding_backward(&ids, &dy, vocab)
                .unwrap()
                .to_f64()
                .unwrap();
            for rows in [0..vocab, 0..1, 5..12, 7..8, 22..23, 9..9] {
                let what = format!("{device} {dtype} rows {rows:?}");
                let got = embedding_backward_rows(&ids, &dy, vocab, rows.clone()).unwrap();
                assert_eq!(got.shape().dims(), [rows.len(), dim], "{what}");
                let want = &whole[rows.start * dim..rows.end * dim];
                assert_eq!(got.to_f64().unwrap(), want, "{what}");
            }
        }
    }
    let d = &devices()[0];
    let ids = Array::from_host(d, [2], &[0u32, 3]).unwrap();
    let (dy, _) = random(d, &mut rng, &[2, 4], DType::F32, -1.0, 1.0);
    let op = "embedding_backward";
    let past = "rows 3..6 of a table of 5 rows";
    assert_fails_leaking_nothing!(d; embedding_backward_rows(&ids, &dy, 5, 3..6) => Argument(op, past));
    // Ids outside the rows are still checked against the table.
    let far = Array::from_host(d, [2], &[0u32, 5]).unwrap();
    let id5 = "id 5 at position 1 is out of range for 5 rows";
    assert_fails_leaking_nothing!(d; embedding_backward_rows(&far, &dy, 5, 0..2) => Argument(op, id5));
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

#[test]
fn out_of_range_indices_are_argument_errors_that_leak_nothing() {
    let d = &devices()[0];
    let mut rng = rng();
    let (table, _) = random(d, &mut rng, &[5, 3], DType::F32, -1.0, 1.0);
    let ids = Array::from_host(d, [2, 2], &[0u32, 4, 5, 1]).unwrap();
    let (dy, _) = random(d, &mut rng, &[2, 2, 3], DType::BF16, -1.0, 1.0);
    let id5 = "id 5 at position 2 is out of range for 5 rows";
    let id4 = "id 4 at position 1 is out of range for 4 rows";
    assert_fails_leaking_nothing!(d; embedding(&table, &ids) => Argument("embedding", id5));
    assert_fails_leaking_nothing!(d; embedding_backward(&ids, &dy, 5) => Argument("embedding_backward", id5));
    assert_fails_leaking_nothing!(d; embedding_backward(&ids, &dy, 4) => Argument("embedding_backward", id4));
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
    let float_ids = float(&[4], DType::F32);
    let (oblong, int_square) = (float(&[2, 3, 4], DType::F32), float(&[3, 3], DType::U32));
    let mut rng = common::rng();
    let ids = random_ids(d, &mut rng, &[4], 5).0;
    let far_ids = random_ids(&devices()[0], &mut rng, &[4], 5).0;
    let op = "embedding";
    assert_fails_leaking_nothing!(d; embedding(&int_table, &ids) => DType(op));
    assert_fails_leaking_nothing!(d; embedding(&table, &float_ids) => DType(op));
    assert_fails_leaking_nothing!(d; embedding(&flat_table, &ids) => Shape(op, "[15]"));
    assert_fails_leaking_nothing!(d; embedding(&table, &far_ids) => Device(op));
    let op = "embedding_backward";
    assert_fails_leaking_nothing!(d; embedding_backward(&float_ids, &dy, 5) => DType(op));
    assert_fails_leaking_nothing!(d; embedding_backward(&ids, &int_table, 5) => DType(op));
    assert_fails_leaking_nothing!(d; embedding_backward(&ids, &bad_dy, 5) => Shape(op, "[5, 3]", "[4]"));
    assert_fails_leaking_nothing!(d; embedding_backward(&ids, &vector, 5) => Shape(op));
    assert_fails_leaking_nothing!(d; embedding_backward(&far_ids, &dy, 5) => Device(op));
    let op = "causal_mask";
    assert_fails_leaking_nothing!(d; causal_mask(&oblong, 0.0) => Shape(op, "[2, 3, 4]"));
    assert_fails_leaking_nothing!(d; causal_mask(&vector, 0.0) => Shape(op));
    assert_fails_leaking_nothing!(d; causal_mask(&int_square, 0.0) => DType(op));
}
