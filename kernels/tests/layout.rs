//! Permutations, transposes and broadcasts against a reference, in every dtype.

mod common;

use common::{broadcast_at, devices, random, rng};
use headroom_kernels::ops::layout::{broadcast_to, permute, transpose};
use headroom_kernels::{DType, Error, Shape};

/// The reference: element at output multi-index `o` is the input at `o` un-permuted.
fn permuted(values: &[f64], shape: &[usize], axes: &[usize]) -> Vec<f64> {
    let strides = Shape::new(shape).strides();
    let dims: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
    (0..values.len())
        .map(|mut index| {
            let mut offset = 0;
            for d in (0..dims.len()).rev() {
                offset += (index % dims[d]) * strides[axes[d]];
                index /= dims[d];
            }
            values[offset]
        })
        .collect()
}

#[test]
fn permutations_move_every_element_in_every_dtype() {
    let cases: [(&[usize], &[usize]); 6] = [
        (&[5], &[0]),
        (&[3, 4], &[1, 0]),
        (&[2, 3, 4], &[2, 0, 1]),
        (&[2, 1, 3, 5], &[0, 2, 1, 3]),
        (&[1, 7, 1], &[2, 1, 0]),
        (&[4, 3, 2, 5], &[3, 2, 1, 0]),
    ];
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::ALL {
            for (shape, axes) in cases {
                let (x, xs) = random(&device, &mut rng, shape, dtype, 1.0, 100.0);
                let got = permute(&x, axes).unwrap();
                let dims: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
                assert_eq!(got.shape().dims(), dims.as_slice());
                assert_eq!(
                    got.to_f64().unwrap(),
                    permuted(&xs, shape, axes),
                    "{dtype} {shape:?} {axes:?}"
                );
            }
        }
        let (x, xs) = random(&device, &mut rng, &[2, 3, 4], DType::F32, -1.0, 1.0);
        let t = transpose(&x, 1, 2).unwrap();
        assert_eq!(t.to_f64().unwrap(), permuted(&xs, &[2, 3, 4], &[0, 2, 1]));
        let back = transpose(&t, 1, 2).unwrap();
        assert_eq!(
            back.to_f64().unwrap(),
            xs,
            "transposing twice is the identity"
        );
    }
}

#[test]
fn bad_permutations_are_argument_errors() {
    let device = &devices()[0];
    let mut rng = rng();
    let (x, _) = random(device, &mut rng, &[2, 3], DType::F32, -1.0, 1.0);
    for axes in [&[0][..], &[0, 0], &[0, 2], &[1, 0, 2]] {
        let err = permute(&x, axes).unwrap_err();
        assert!(
            matches!(err, Error::Argument { op: "permute", .. }),
            "{axes:?}: {err}"
        );
    }
    assert!(transpose(&x, 0, 2).is_err());
}

#[test]
fn broadcasts_repeat_every_element_in_every_dtype() {
    let cases: [(&[usize], &[usize]); 6] = [
        (&[1], &[4]),
        (&[3], &[2, 3]),
        (&[2, 1], &[2, 5]),
        (&[1, 3, 1], &[2, 3, 4]),
        (&[], &[2, 2]),
        (&[2, 3], &[2, 3]),
    ];
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::ALL {
            for (shape, to) in cases {
                let (x, xs) = random(&device, &mut rng, shape, dtype, 1.0, 100.0);
                let got = broadcast_to(&x, to).unwrap();
                assert_eq!(got.shape().dims(), to);
                let out = Shape::new(to);
                let want: Vec<f64> = (0..out.numel())
                    .map(|i| broadcast_at(&xs, x.shape(), &out, i))
                    .collect();
                assert_eq!(got.to_f64().unwrap(), want, "{dtype} {shape:?} to {to:?}");
            }
        }
        let (x, _) = random(&device, &mut rng, &[2, 3], DType::F32, -1.0, 1.0);
        for to in [&[3][..], &[2, 2], &[4, 3], &[3, 2]] {
            let err = broadcast_to(&x, to).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Shape {
                        op: "broadcast_to",
                        ..
                    }
                ),
                "{to:?}: {err}"
            );
        }
    }
}
