//! Matrix products against an f64 reference: transposes, batches, shared weights, odd sizes.

mod common;

use common::{assert_close, assert_close_scaled, devices, random, rng, tolerance};
use headroom_alloc::trace::SplitMix64;
use headroom_kernels::ops::gemm::{matmul, matmul_accumulate, matmul_bias};
use headroom_kernels::{Array, DType, Device, DeviceConfig, Error};

/// Reads element (row, col) of `op(x)` for matrix `index` of a batch stored row-major.
fn element(
    x: &[f64],
    rows: usize,
    cols: usize,
    index: usize,
    trans: bool,
    r: usize,
    c: usize,
) -> f64 {
    let base = index * rows * cols;
    if trans {
        x[base + c * cols + r]
    } else {
        x[base + r * cols + c]
    }
}

/// (batch of a, batch of b, m, k, n); a batch of [] is a plain matrix.
type Case<'a> = (&'a [usize], &'a [usize], usize, usize, usize);

/// Checks `matmul` (and, given a bias, `matmul_bias`) for one case in every transpose against
/// the f64 reference.
fn check_products(
    device: &Device,
    rng: &mut SplitMix64,
    dtype: DType,
    case: Case,
    with_bias: bool,
) {
    let (a_batch, b_batch, m, k, n) = case;
    for (trans_a, trans_b) in [(false, false), (true, false), (false, true), (true, true)] {
        let a_mat = if trans_a { [k, m] } else { [m, k] };
        let b_mat = if trans_b { [n, k] } else { [k, n] };
        let a_shape = [a_batch, &a_mat[..]].concat();
        let b_shape = [b_batch, &b_mat[..]].concat();
        let (a, av) = random(device, rng, &a_shape, dtype, -1.0, 1.0);
        let (b, bv) = random(device, rng, &b_shape, dtype, -1.0, 1.0);
        let (bias, bias_values) = random(device, rng, &[n], dtype, -1.0, 1.0);
        let got = if with_bias {
            matmul_bias(&a, &b, &bias, trans_a, trans_b).unwrap()
        } else {
            matmul(&a, &b, trans_a, trans_b).unwrap()
        };
        let batch_dims = if a_batch.is_empty() { b_batch } else { a_batch };
        let batch: usize = batch_dims.iter().product();
        assert_eq!(
            got.shape().dims(),
            [batch_dims, &[m, n][..]].concat().as_slice()
        );
        let (mut want, mut scale) = (Vec::new(), Vec::new());
        for index in 0..batch {
            let ai = if a_batch.is_empty() { 0 } else { index };
            let bi = if b_batch.is_empty() { 0 } else { index };
            for r in 0..m {
                for (c, bias) in bias_values.iter().enumerate() {
                    let (mut sum, mut magnitude) = (0.0, 0.0);
                    for l in 0..k {
                        let term = element(&av, a_mat[0], a_mat[1], ai, trans_a, r, l)
                            * element(&bv, b_mat[0], b_mat[1], bi, trans_b, l, c);
                        sum += term;
                        magnitude += term.abs();
                    }
                    if with_bias {
                        sum += bias;
                        magnitude += bias.abs();
                    }
                    want.push(sum);
                    scale.push(magnitude);
                }
            }
        }
        let what = format!("{dtype} a{a_shape:?} b{b_shape:?} t=({trans_a},{trans_b})");
        let rtol = tolerance(dtype) * if dtype == DType::F32 { 4.0 } else { 1.0 };
        assert_close_scaled(&what, &got.to_f64().unwrap(), &want, &scale, rtol);
    }
}

#[test]
fn products_match_the_f64_reference_in_every_float_dtype() {
    let cases: [Case; 7] = [
        (&[], &[], 1, 1, 1),
        (&[], &[], 3, 5, 7),
        (&[], &[], 17, 1, 9),
        (&[], &[], 33, 65, 31),
        (&[2], &[2], 4, 6, 5),
        (&[2, 3], &[], 5, 7, 3),
        (&[], &[4], 6, 2, 3),
    ];
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for case in cases {
                check_products(&device, &mut rng, dtype, case, false);
            }
        }
    }
}

#[test]
fn half_products_larger_than_a_workspace_panel_match_the_reference() {
    // Half types are widened to f32 a panel (2^18 elements) at a time: these span several
    // panels of rows, of the inner dimension and of the batch, with and without a bias, and
    // (the last) bands of 256 rows and inner steps, more than a panel, with a shorter tail.
    let cases: [Case; 4] = [
        (&[], &[], 700, 300, 200),
        (&[], &[], 200, 1100, 300),
        (&[45], &[45], 64, 64, 64),
        (&[], &[], 600, 300, 1500),
    ];
    let mut rng = rng();
    for device in devices() {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            for (i, case) in cases.into_iter().enumerate() {
                check_products(&device, &mut rng, dtype, case, i % 2 == 0);
            }
        }
    }
}

#[test]
fn a_half_product_with_a_vocabulary_wide_output_multiplies_in_bands_of_256_rows() {
    // A language model's head on a CPU (1024 tokens against 49 152 rows of 576): bands of 256
    // rows and of 256 inner steps, where a panel of 2^18 elements would cut 5 at a time and
    // call hundreds of slow, thin products. f16, which every CPU widens.
    let meta = Device::meta(DeviceConfig::new(1 << 34)).unwrap();
    let kernels = || meta.planned_work().unwrap().kernels;
    let x = Array::zeros(&meta, [1024, 576], DType::F16).unwrap();
    let w = Array::zeros(&meta, [49_152, 576], DType::F16).unwrap();
    let before = kernels();
    let logits = matmul(&x, &w, false, true).unwrap();
    // The weight widened, then per band: its rows widened, multiplied and narrowed.
    assert_eq!(kernels() - before, 1 + 4 * 3);
    let before = kernels();
    matmul(&logits, &x, true, false).unwrap();
    // Per band of tokens: both operands widened and multiplied; then the output narrowed.
    assert_eq!(kernels() - before, 4 * 3 + 1);
}

#[test]
fn products_of_a_few_rows_against_a_transposed_weight_match_the_reference() {
    // Up to eight rows against a transposed weight (generation) multiply the operands as
    // stored, the weight's rows in parallel tasks of 64: inner sizes with and without a tail
    // of the 64 lanes, outputs of several tasks, a batch of rows sharing the weight.
    let cases: [Case; 4] = [
        (&[], &[], 1, 576, 130),
        (&[], &[], 8, 33, 65),
        (&[2], &[], 3, 40, 70),
        (&[], &[], 5, 1, 3),
    ];
    let mut rng = rng();
    for device in devices() {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            for (i, case) in cases.into_iter().enumerate() {
                check_products(&device, &mut rng, dtype, case, i % 2 == 1);
            }
        }
    }
}

#[test]
fn mismatched_products_are_shape_errors() {
    let device = &devices()[0];
    let a = Array::zeros(device, [3, 4], DType::F32).unwrap();
    let b = Array::zeros(device, [5, 2], DType::F32).unwrap();
    let err = matmul(&a, &b, false, false).unwrap_err();
    assert!(
        matches!(err, Error::Shape { op: "matmul", .. }) && err.to_string().contains("[3, 4]"),
        "{err}"
    );
    let v = Array::zeros(device, [4], DType::F32).unwrap();
    assert!(matmul(&a, &v, false, false).is_err());
    let batched = Array::zeros(device, [2, 4, 2], DType::F32).unwrap();
    let other = Array::zeros(device, [3, 3, 4], DType::F32).unwrap();
    assert!(matmul(&other, &batched, false, false).is_err());
}

#[test]
fn a_bias_is_added_to_every_row_in_every_float_dtype() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            let (x, _) = random(&device, &mut rng, &[2, 3, 4], dtype, -1.0, 1.0);
            let (w, _) = random(&device, &mut rng, &[5, 4], dtype, -1.0, 1.0);
            let (b, bs) = random(&device, &mut rng, &[5], dtype, -1.0, 1.0);
            let plain = matmul(&x, &w, false, true).unwrap().to_f64().unwrap();
            let fused = matmul_bias(&x, &w, &b, false, true)
                .unwrap()
                .to_f64()
                .unwrap();
            let want: Vec<f64> = plain
                .iter()
                .enumerate()
                .map(|(i, v)| v + bs[i % 5])
                .collect();
            assert_close(
                &format!("matmul_bias {dtype}"),
                &fused,
                &want,
                4.0 * tolerance(dtype),
            );
            let (wrong, _) = random(&device, &mut rng, &[4], dtype, -1.0, 1.0);
            assert!(matmul_bias(&x, &w, &wrong, false, true).is_err());
        }
    }
}

#[test]
fn accumulated_products_add_into_their_output_from_every_float_dtype() {
    // (operands, output): one dtype, or half operands added into f32, as a gradient summed over
    // chunks under autocast is.
    let pairs = [
        (DType::F32, DType::F32),
        (DType::F64, DType::F64),
        (DType::BF16, DType::F32),
        (DType::F16, DType::F32),
    ];
    let mut rng = rng();
    for device in devices() {
        for (dtype, out_dtype) in pairs {
            for (m, k, n) in [(1, 1, 1), (5, 7, 3), (33, 65, 17)] {
                for (trans_a, trans_b) in [(false, false), (true, false), (false, true)] {
                    let a_mat = if trans_a { [k, m] } else { [m, k] };
                    let b_mat = if trans_b { [n, k] } else { [k, n] };
                    let (a, av) = random(&device, &mut rng, &a_mat, dtype, -1.0, 1.0);
                    let (b, bv) = random(&device, &mut rng, &b_mat, dtype, -1.0, 1.0);
                    let (mut out, before) =
                        random(&device, &mut rng, &[m, n], out_dtype, -1.0, 1.0);
                    matmul_accumulate(&a, &b, trans_a, trans_b, &mut out).unwrap();
                    let (mut want, mut scale) = (Vec::new(), Vec::new());
                    for r in 0..m {
                        for c in 0..n {
                            let (mut sum, mut magnitude) =
                                (before[r * n + c], before[r * n + c].abs());
                            for l in 0..k {
                                let term = element(&av, a_mat[0], a_mat[1], 0, trans_a, r, l)
                                    * element(&bv, b_mat[0], b_mat[1], 0, trans_b, l, c);
                                sum += term;
                                magnitude += term.abs();
                            }
                            want.push(sum);
                            scale.push(magnitude);
                        }
                    }
                    assert_eq!(out.dtype(), out_dtype);
                    let what =
                        format!("{dtype} into {out_dtype} {m}x{k}x{n} t=({trans_a},{trans_b})");
                    // Where half types are widened, the product is rounded to them once.
                    let rtol = tolerance(dtype) * if dtype == DType::F32 { 4.0 } else { 1.0 };
                    assert_close_scaled(&what, &out.to_f64().unwrap(), &want, &scale, rtol);
                }
            }
        }
        let half = Array::zeros(&device, [2, 2], DType::BF16).unwrap();
        let mut into_half = Array::zeros(&device, [2, 2], DType::BF16).unwrap();
        let err = matmul_accumulate(&half, &half, false, false, &mut into_half).unwrap_err();
        assert!(matches!(err, Error::DType { .. }), "{err}");
        let mut into_f64 = Array::zeros(&device, [2, 2], DType::F64).unwrap();
        let single = Array::zeros(&device, [2, 2], DType::F32).unwrap();
        let err = matmul_accumulate(&single, &single, false, false, &mut into_f64).unwrap_err();
        assert!(matches!(err, Error::DType { .. }), "{err}");
    }
}

#[test]
fn a_bf16_product_takes_the_memory_its_plan_says() {
    // On a CPU with bf16 instructions the product packs its operands in workspace; on one
    // without, it widens them to f32 panel by panel. The meta device planning for this CPU
    // takes the same peak either way, in every layout and with a few rows.
    let shapes = [
        (300, 200, 130, false, true),
        (64, 700, 257, true, false),
        (6, 90, 40, false, true),
        (40, 90, 6, true, true),
    ];
    for (m, n, k, trans_a, trans_b) in shapes {
        let peak = |device: &Device| {
            let a_shape = if trans_a { [k, m] } else { [m, k] };
            let b_shape = if trans_b { [n, k] } else { [k, n] };
            let a = Array::zeros(device, a_shape, DType::BF16).unwrap();
            let b = Array::zeros(device, b_shape, DType::BF16).unwrap();
            device.allocator().with(|alloc| alloc.reset_peak());
            let before = device.allocator().stats().in_use;
            drop(matmul(&a, &b, trans_a, trans_b).unwrap());
            device.allocator().stats().peak_in_use - before
        };
        let cpu = Device::cpu(DeviceConfig::new(1 << 30)).unwrap();
        let meta = Device::meta(DeviceConfig::new(1 << 30)).unwrap();
        assert_eq!(
            peak(&cpu),
            peak(&meta),
            "{m}x{k}x{n} t=({trans_a},{trans_b})"
        );
    }
}
