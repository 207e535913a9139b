//! Dropout: the mask's statistics, determinism, scaling, and its backward.

mod common;

use common::{assert_close, devices, random, rng};
use headroom_kernels::ops::random::{dropout, dropout_backward, keeps};
use headroom_kernels::{Array, DType, Error};

#[test]
fn dropout_keeps_about_one_minus_p_and_scales_the_rest() {
    let n = 200_000;
    for device in devices() {
        for dtype in DType::FLOATS {
            for p in [0.1, 0.5, 0.9] {
                let x = Array::full(&device, [n], dtype, 1.0).unwrap();
                let y = dropout(&x, p, 7).unwrap().to_f64().unwrap();
                let kept = y.iter().filter(|&&v| v != 0.0).count() as f64 / n as f64;
                // Binomial standard deviation at n = 200 000 is at most 0.0012; allow 5 of them.
                assert!(
                    (kept - (1.0 - p)).abs() < 0.006,
                    "{dtype} p={p}: kept {kept}"
                );
                let scale = Array::from_f64(&device, [1], dtype, &[1.0 / (1.0 - p)]).unwrap();
                let scale = scale.to_f64().unwrap()[0];
                assert!(y.iter().all(|&v| v == 0.0 || v == scale), "{dtype} p={p}");
            }
        }
    }
}

#[test]
fn the_mask_is_a_function_of_seed_and_index_shared_by_forward_and_backward() {
    let mut rng = rng();
    for device in devices() {
        let (x, xs) = random(&device, &mut rng, &[3, 37], DType::F64, -2.0, 2.0);
        let p = 0.3;
        let y = dropout(&x, p, 123).unwrap().to_f64().unwrap();
        let want: Vec<f64> = xs
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                if keeps(123, i as u64, p) {
                    v / (1.0 - p)
                } else {
                    0.0
                }
            })
            .collect();
        assert_close("dropout", &y, &want, 1e-15);
        assert_eq!(y, dropout(&x, p, 123).unwrap().to_f64().unwrap());
        assert_ne!(y, dropout(&x, p, 124).unwrap().to_f64().unwrap());
        // The backward applies the same mask and scale to the upstream gradient.
        let (dy, dys) = random(&device, &mut rng, &[3, 37], DType::F64, -1.0, 1.0);
        let dx = dropout_backward(&dy, p, 123).unwrap().to_f64().unwrap();
        for i in 0..dx.len() {
            assert_eq!(dx[i] == 0.0, y[i] == 0.0, "element {i}");
            if dx[i] != 0.0 {
                assert!((dx[i] - dys[i] / (1.0 - p)).abs() < 1e-15);
            }
        }
        let identity = dropout(&x, 0.0, 9).unwrap().to_f64().unwrap();
        assert_eq!(identity, xs);
    }
}

#[test]
fn probabilities_outside_zero_to_one_are_argument_errors() {
    let device = &devices()[0];
    let x = Array::full(device, [4], DType::F32, 1.0).unwrap();
    for p in [-0.1, 1.0, 1.5, f64::NAN] {
        let err = dropout(&x, p, 1).unwrap_err();
        assert!(
            matches!(err, Error::Argument { op: "dropout", .. }),
            "{p}: {err}"
        );
    }
}
