//! Rotary position embeddings against an f64 reference on every backend and float dtype, the
//! backward as the inverse and the adjoint of the forward, the positions a cache offset gives,
//! the host frequencies (Llama 3's scaling against values computed in Python) and operand
//! checks. (Memory planning and OOM behaviour: `memory.rs`.)

mod common;

use common::{
    assert_close, assert_close_scaled, assert_fails, devices, dot, random, rng, tolerance,
};
use headroom_kernels::ops::rotary::{Llama3Scaling, freq_dtype, inv_freq, rotary, rotary_backward};
use headroom_kernels::{Array, DType, Device, DeviceConfig, Error};

/// Llama 3.2's scaling (its `config.json`'s `rope_scaling`).
const LLAMA_3_2: Llama3Scaling = Llama3Scaling {
    factor: 32.0,
    low_freq_factor: 1.0,
    high_freq_factor: 4.0,
    original_max_position_embeddings: 8192,
};

/// A case: the input's shape (`[..., len, head]`), the first row's position, `rope_theta`, the
/// scaling.
type Case = (&'static [usize], usize, f64, Option<Llama3Scaling>);

/// Odd lengths and positions, several leading axes, heads of 2 to 128 features, offsets past
/// a cache of thousands of rows, more pairs than one pass of a GPU's grid covers.
const CASES: [Case; 8] = [
    (&[1, 2], 0, 10_000.0, None),
    (&[3, 4], 1, 10_000.0, None),
    (&[2, 3, 5, 8], 7, 10_000.0, None),
    (&[2, 1, 7, 6], 4093, 500_000.0, Some(LLAMA_3_2)),
    (&[3, 2, 64], 0, 500_000.0, Some(LLAMA_3_2)),
    (&[2, 2, 9, 128], 130, 1_000_000.0, None),
    (&[4, 33, 64], 20_001, 100_000.0, None),
    (&[1, 300, 2, 96], 5, 10_000.0, None),
];

/// The frequencies of a case for inputs of `dtype`, uploaded, and as stored.
fn frequencies(device: &Device, head: usize, case: &Case, dtype: DType) -> (Array, Vec<f64>) {
    let freqs = inv_freq(head, case.2, case.3).unwrap();
    let array = Array::from_f64(device, [head / 2], freq_dtype(dtype), &freqs).unwrap();
    let stored = array.to_f64().unwrap();
    (array, stored)
}

/// The angle of `position` and frequency `freq` as the kernels form it: one product rounded
/// to the compute type (f32 for every dtype but f64), as Hugging Face forms it in f32.
fn angle(position: usize, freq: f64, dtype: DType) -> f64 {
    if dtype == DType::F64 {
        position as f64 * freq
    } else {
        f64::from(position as f32 * freq as f32)
    }
}

/// The rotation of `x` (`[rows, head]`, row `r` at `offset + r % len`) by `sign` times each
/// angle, in f64, and each element's scale (`|a| + |b|` of its pair).
fn reference(
    x: &[f64],
    freqs: &[f64],
    (len, head, offset): (usize, usize, usize),
    sign: f64,
    dtype: DType,
) -> (Vec<f64>, Vec<f64>) {
    let half = head / 2;
    let (mut out, mut scale) = (vec![0.0; x.len()], vec![0.0; x.len()]);
    for (r, row) in x.chunks(head).enumerate() {
        for i in 0..half {
            let a = angle(offset + r % len, freqs[i], dtype);
            let (cos, sin) = (a.cos(), sign * a.sin());
            let (x1, x2) = (row[i], row[i + half]);
            out[r * head + i] = x1 * cos - x2 * sin;
            out[r * head + i + half] = x2 * cos + x1 * sin;
            scale[r * head + i] = x1.abs() + x2.abs();
            scale[r * head + i + half] = x1.abs() + x2.abs();
        }
    }
    (out, scale)
}

/// `(len, head)` of a case's shape.
fn len_head(shape: &[usize]) -> (usize, usize) {
    (shape[shape.len() - 2], shape[shape.len() - 1])
}

#[test]
fn rotary_and_its_backward_match_the_f64_reference() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for case in CASES {
                let (shape, offset, ..) = case;
                let (len, head) = len_head(shape);
                let (x, xs) = random(&device, &mut rng, shape, dtype, -2.0, 2.0);
                let (freq, fs) = frequencies(&device, head, &case, dtype);
                for (name, sign) in [("rotary", 1.0), ("rotary_backward", -1.0)] {
                    let out = if sign > 0.0 {
                        rotary(&x, &freq, offset)
                    } else {
                        rotary_backward(&x, &freq, offset)
                    }
                    .unwrap();
                    assert_eq!((out.shape().dims(), out.dtype()), (shape, dtype));
                    let (want, scale) = reference(&xs, &fs, (len, head, offset), sign, dtype);
                    let what = format!("{name} {device} {dtype} {shape:?} offset {offset}");
                    let got = out.to_f64().unwrap();
                    assert_close_scaled(&what, &got, &want, &scale, tolerance(dtype));
                }
            }
        }
    }
}

#[test]
fn the_backward_undoes_the_forward_and_is_its_adjoint() {
    let mut rng = rng();
    for device in devices() {
        for dtype in [DType::F64, DType::F32] {
            for case in CASES {
                let (shape, offset, ..) = case;
                let head = len_head(shape).1;
                let (x, xs) = random(&device, &mut rng, shape, dtype, -2.0, 2.0);
                let (y, ys) = random(&device, &mut rng, shape, dtype, -2.0, 2.0);
                let (freq, _) = frequencies(&device, head, &case, dtype);
                let rotated = rotary(&x, &freq, offset).unwrap();
                let back = rotary_backward(&rotated, &freq, offset).unwrap();
                let what = format!("{device} {dtype} {shape:?} offset {offset}");
                let tol = 4.0 * tolerance(dtype);
                assert_close(
                    &format!("inverse {what}"),
                    &back.to_f64().unwrap(),
                    &xs,
                    tol,
                );
                // <R x, y> = <x, R^T y>: the backward is the gradient of the forward.
                let lhs = dot(&rotated.to_f64().unwrap(), &ys);
                let y_back = rotary_backward(&y, &freq, offset)
                    .unwrap()
                    .to_f64()
                    .unwrap();
                let rhs = dot(&xs, &y_back);
                let magnitude = xs.iter().zip(&ys).map(|(a, b)| (a * b).abs()).sum::<f64>();
                assert_close_scaled(
                    &format!("adjoint {what}"),
                    &[lhs],
                    &[rhs],
                    &[magnitude],
                    tol,
                );
            }
        }
    }
}

#[test]
fn an_offset_rotates_rows_as_the_positions_they_continue() {
    // Generation with a key/value cache: the last 3 of 8 rows, rotated at offset 5, are the
    // last 3 rows of the whole rotated at offset 0.
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            let (x, xs) = random(&device, &mut rng, &[2, 8, 6], dtype, -2.0, 2.0);
            let freqs = inv_freq(6, 10_000.0, None).unwrap();
            let freq = Array::from_f64(&device, [3], freq_dtype(dtype), &freqs).unwrap();
            let whole = rotary(&x, &freq, 0).unwrap().to_f64().unwrap();
            let tail: Vec<f64> = xs.chunks(8 * 6).flat_map(|h| h[5 * 6..].to_vec()).collect();
            let tail = Array::from_f64(&device, [2, 3, 6], dtype, &tail).unwrap();
            let got = rotary(&tail, &freq, 5).unwrap().to_f64().unwrap();
            let want: Vec<f64> = whole
                .chunks(8 * 6)
                .flat_map(|h| h[5 * 6..].to_vec())
                .collect();
            assert_eq!(got, want, "{device} {dtype}");
        }
    }
}

#[test]
fn empty_operands_do_not_panic() {
    for device in devices() {
        for dtype in DType::FLOATS {
            for shape in [&[0, 4][..], &[3, 0], &[2, 0, 4], &[0, 3, 2]] {
                let head = shape[shape.len() - 1];
                let x = Array::zeros(&device, shape, dtype).unwrap();
                let freq = Array::zeros(&device, [head / 2], freq_dtype(dtype)).unwrap();
                assert_eq!(rotary(&x, &freq, 3).unwrap().shape().dims(), shape);
                assert_eq!(rotary_backward(&x, &freq, 3).unwrap().shape().dims(), shape);
            }
        }
    }
}

// ---------- the host frequencies ----------

#[test]
fn plain_frequencies_are_powers_of_theta() {
    assert_eq!(inv_freq(2, 10_000.0, None).unwrap(), [1.0]);
    assert_eq!(inv_freq(4, 10_000.0, None).unwrap(), [1.0, 0.01]);
    let f = inv_freq(8, 10_000.0, None).unwrap();
    assert_close("theta 1e4, head 8", &f, &[1.0, 0.1, 0.01, 0.001], 1e-15);
    assert!(inv_freq(0, 10_000.0, None).unwrap().is_empty());
}

#[test]
fn llama3_scaling_matches_transformers_rule() {
    // Llama 3.2 1B (head_dim 64, rope_theta 500000, factor 32, low 1, high 4, original 8192),
    // computed in f64 by a transcription of transformers' `_compute_llama3_parameters` into
    // plain Python (`math`, no torch): pairs 0..=14 keep their frequency (wavelength under
    // 8192 / 4), 15..=17 are smoothed, 18.. are divided by 32 (wavelength over 8192 / 1).
    let want: [(usize, f64); 9] = [
        (0, 1.0),
        (1, 0.6636012376960885),
        (10, 0.016560440080994446),
        (15, 0.001290547928209264),
        (16, 0.00042955679655936815),
        (17, 9.70828780262767e-05),
        (18, 1.9461638184831125e-05),
        (22, 3.7740542941082826e-06),
        (31, 9.418306725434909e-08),
    ];
    let got = inv_freq(64, 500_000.0, Some(LLAMA_3_2)).unwrap();
    assert_eq!(got.len(), 32);
    for (i, value) in want {
        // Relative: the low frequencies are tiny.
        let error = (got[i] / value - 1.0).abs();
        assert!(error < 1e-14, "pair {i}: {} vs {value}", got[i]);
    }
    // Below the high-frequency wavelength nothing changes.
    let plain = inv_freq(64, 500_000.0, None).unwrap();
    assert_eq!(got[..15], plain[..15]);
}

#[test]
fn bad_frequency_settings_are_argument_errors() {
    let bad = |head, theta, scaling| match inv_freq(head, theta, scaling) {
        Err(err @ Error::Argument { op: "inv_freq", .. }) => err.to_string(),
        other => panic!("{other:?}"),
    };
    assert!(bad(5, 10_000.0, None).contains("odd"));
    assert!(bad(4, 0.0, None).contains("theta"));
    assert!(bad(4, f64::NAN, None).contains("theta"));
    let with = |f: fn(&mut Llama3Scaling)| {
        let mut s = LLAMA_3_2;
        f(&mut s);
        Some(s)
    };
    assert!(bad(4, 1e4, with(|s| s.factor = 0.0)).contains("factor"));
    assert!(bad(4, 1e4, with(|s| s.high_freq_factor = 1.0)).contains("high_freq_factor"));
    assert!(bad(4, 1e4, with(|s| s.original_max_position_embeddings = 0)).contains("original"));
}

// ---------- operand checks ----------

#[test]
fn bad_operands_give_typed_errors_naming_the_op() {
    let device = Device::cpu(DeviceConfig::new(64 << 20)).unwrap();
    let array = |shape: &[usize], dtype| Array::full(&device, shape, dtype, 0.5).unwrap();
    let x = array(&[2, 3, 4], DType::BF16);
    let freq = array(&[2], DType::F32);
    let in_use = device.allocator().stats().in_use;
    for op in ["rotary", "rotary_backward"] {
        let run = |x: &Array, freq: &Array, offset| {
            if op == "rotary" {
                rotary(x, freq, offset)
            } else {
                rotary_backward(x, freq, offset)
            }
        };
        let err = assert_fails(run(&array(&[2, 3, 5], DType::F32), &freq, 0), op, &["odd"]);
        assert!(matches!(err, Error::Shape { .. }), "{err:?}");
        let err = assert_fails(
            run(&array(&[4], DType::F32), &freq, 0),
            op,
            &["[..., len, head]"],
        );
        assert!(matches!(err, Error::Shape { .. }), "{err:?}");
        let err = assert_fails(
            run(&x, &array(&[3], DType::F32), 0),
            op,
            &["inv_freq", "[3]"],
        );
        assert!(matches!(err, Error::Shape { .. }), "{err:?}");
        // Frequencies of the compute type: f32 for a bf16 input, not bf16.
        let err = assert_fails(
            run(&x, &array(&[2], DType::BF16), 0),
            op,
            &["inv_freq", "f32"],
        );
        assert!(matches!(err, Error::DType { .. }), "{err:?}");
        let ids = Array::from_host(&device, [2, 2], &[0u32, 1, 2, 3]).unwrap();
        let err = assert_fails(run(&ids, &freq, 0), op, &["float"]);
        assert!(matches!(err, Error::DType { .. }), "{err:?}");
        let err = assert_fails(run(&x, &freq, usize::MAX - 1), op, &["offset"]);
        assert!(matches!(err, Error::Argument { .. }), "{err:?}");
    }
    // Nothing was allocated on the way to any of these errors.
    assert_eq!(device.allocator().stats().in_use, in_use);
}
