//! Permutations, transposes, broadcasts, slices and concatenation against a reference, in every
//! dtype.

mod common;

use common::{broadcast_at, devices, random, rng};
use headroom_kernels::ops::layout::{broadcast_to, concat, narrow, permute, split, transpose};
use headroom_kernels::{Array, DType, Error, Shape};

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
    // The last two keep a last axis long enough to move 16 bytes at a time on a GPU, where
    // every run starts on 16 bytes (64 elements of any size) and where not (65).
    let cases: [(&[usize], &[usize]); 8] = [
        (&[5], &[0]),
        (&[3, 4], &[1, 0]),
        (&[2, 3, 4], &[2, 0, 1]),
        (&[2, 1, 3, 5], &[0, 2, 1, 3]),
        (&[1, 7, 1], &[2, 1, 0]),
        (&[4, 3, 2, 5], &[3, 2, 1, 0]),
        (&[2, 3, 64], &[1, 0, 2]),
        (&[3, 2, 65], &[1, 0, 2]),
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

#[test]
fn slices_pick_and_concatenation_restores_every_element() {
    // The last two slice and join runs that a GPU moves 16 bytes at a time where every run
    // starts on 16 bytes (8 and 136 elements of two bytes or more), and one element at a time
    // where not (65 elements).
    let cases: [(&[usize], usize, &[usize]); 7] = [
        (&[7], 0, &[3, 4]),
        (&[2, 6], 1, &[1, 2, 3]),
        (&[4, 3, 5], 0, &[2, 2]),
        (&[2, 3, 5], 1, &[3]),
        (&[2, 1, 9], 2, &[4, 0, 5]),
        (&[3, 200], 1, &[8, 136, 56]),
        (&[2, 3, 130], 2, &[65, 65]),
    ];
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::ALL {
            for (shape, axis, sizes) in cases {
                let (x, xs) = random(&device, &mut rng, shape, dtype, 1.0, 100.0);
                let pieces = split(&x, axis, sizes).unwrap();
                let inner: usize = shape[axis + 1..].iter().product();
                let mut start = 0;
                for (piece, &len) in pieces.iter().zip(sizes) {
                    let mut dims = shape.to_vec();
                    dims[axis] = len;
                    assert_eq!(piece.shape().dims(), dims.as_slice());
                    // Reference: each outer row keeps elements start..start+len of the axis.
                    let want: Vec<f64> = xs
                        .chunks(shape[axis] * inner)
                        .flat_map(|row| row[start * inner..(start + len) * inner].to_vec())
                        .collect();
                    assert_eq!(
                        piece.to_f64().unwrap(),
                        want,
                        "{dtype} {shape:?} axis {axis}"
                    );
                    let alone = narrow(&x, axis, start, len).unwrap();
                    assert_eq!(alone.to_f64().unwrap(), want);
                    start += len;
                }
                let refs: Vec<&Array> = pieces.iter().collect();
                let joined = concat(&refs, axis).unwrap();
                assert_eq!(joined.shape(), x.shape());
                assert_eq!(joined.to_f64().unwrap(), xs, "{dtype} {shape:?} round trip");
            }
        }
    }
}

#[test]
fn bad_slices_and_concatenations_are_typed_errors() {
    let device = &devices()[0];
    let mut rng = rng();
    let (x, _) = random(device, &mut rng, &[2, 3], DType::F32, -1.0, 1.0);
    let (y, _) = random(device, &mut rng, &[3, 3], DType::F32, -1.0, 1.0);
    let (h, _) = random(device, &mut rng, &[2, 3], DType::BF16, -1.0, 1.0);
    assert!(matches!(
        narrow(&x, 1, 2, 2),
        Err(Error::Argument { op: "narrow", .. })
    ));
    assert!(matches!(
        narrow(&x, 2, 0, 1),
        Err(Error::Argument { op: "narrow", .. })
    ));
    assert!(matches!(
        split(&x, 1, &[1, 1]),
        Err(Error::Argument { op: "split", .. })
    ));
    assert!(matches!(
        concat(&[&x, &y], 1),
        Err(Error::Shape { op: "concat", .. })
    ));
    assert!(matches!(
        concat(&[&x, &h], 0),
        Err(Error::DType { op: "concat", .. })
    ));
    assert!(matches!(
        concat(&[], 0),
        Err(Error::Argument { op: "concat", .. })
    ));
    assert_eq!(concat(&[&x, &y], 0).unwrap().shape().dims(), [5, 3]);
}
