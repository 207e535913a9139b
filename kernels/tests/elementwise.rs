//! Elementwise ops against f64 references, in every float dtype, with broadcasting; derivative
//! kernels also against finite differences.

mod common;

use common::{assert_close, broadcast_at, devices, random, rng, tolerance};
use headroom_kernels::ops::elementwise::{self as ew, BinaryOp, UnaryOp};
use headroom_kernels::ops::reduce;
use headroom_kernels::{Array, DType};

const GELU_K: f64 = 0.797_884_560_802_865_4;

fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (GELU_K * (x + 0.044_715 * x.powi(3))).tanh())
}

/// The f64 reference of each unary op, with the input range where it is defined.
/// An op, its f64 reference, and the range its first input is drawn from.
type Case<Op, F> = (Op, F, f64, f64);
type UnaryCase = Case<UnaryOp, fn(f64) -> f64>;
type BinaryCase = Case<BinaryOp, fn(f64, f64) -> f64>;

fn unary_cases() -> Vec<UnaryCase> {
    vec![
        (UnaryOp::Neg, |x| -x, -2.0, 2.0),
        (UnaryOp::Relu, |x| x.max(0.0), -2.0, 2.0),
        (UnaryOp::Gelu, gelu, -3.0, 3.0),
        (UnaryOp::Exp, f64::exp, -2.0, 2.0),
        (UnaryOp::Log, f64::ln, 0.1, 4.0),
        (UnaryOp::Tanh, f64::tanh, -2.0, 2.0),
        (UnaryOp::Sqrt, f64::sqrt, 0.1, 4.0),
        (UnaryOp::Scale(-1.5), |x| -1.5 * x, -2.0, 2.0),
        (UnaryOp::Powf(1.7), |x| x.powf(1.7), 0.1, 3.0),
    ]
}

const SHAPES: [&[usize]; 5] = [&[1], &[7], &[3, 5], &[2, 1, 9], &[40_000]];

#[test]
fn unary_ops_match_the_f64_reference() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for (op, reference, lo, hi) in unary_cases() {
                for shape in SHAPES {
                    let (x, xs) = random(&device, &mut rng, shape, dtype, lo, hi);
                    let got = ew::unary(op, &x).unwrap();
                    assert_eq!(got.shape(), x.shape());
                    let want: Vec<f64> = xs.iter().map(|&v| reference(v)).collect();
                    let what = format!("{op:?} {dtype} {shape:?}");
                    assert_close(&what, &got.to_f64().unwrap(), &want, tolerance(dtype));
                }
            }
        }
    }
}

/// The f64 reference of each binary op, with the range of the first operand.
fn binary_cases() -> Vec<BinaryCase> {
    vec![
        (BinaryOp::Add, |a, b| a + b, -2.0, 2.0),
        (BinaryOp::Sub, |a, b| a - b, -2.0, 2.0),
        (BinaryOp::Mul, |a, b| a * b, -2.0, 2.0),
        (BinaryOp::Div, |a, b| a / b, -2.0, 2.0),
        (
            BinaryOp::ReluBackward,
            |x, dy| if x > 0.0 { dy } else { 0.0 },
            -2.0,
            2.0,
        ),
        (
            BinaryOp::GeluBackward,
            |x, dy| dy * gelu_derivative(x),
            -3.0,
            3.0,
        ),
        (
            BinaryOp::TanhBackward,
            |y, dy| dy * (1.0 - y * y),
            -0.9,
            0.9,
        ),
        (BinaryOp::SqrtBackward, |y, dy| dy / (2.0 * y), 0.5, 2.0),
        (
            BinaryOp::PowfBackward(1.7),
            |x, dy| dy * 1.7 * x.powf(0.7),
            0.1,
            3.0,
        ),
        (
            BinaryOp::Equal,
            |a, b| if a == b { 1.0 } else { 0.0 },
            -2.0,
            2.0,
        ),
    ]
}

#[test]
fn equal_marks_the_maximum_of_each_row() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            let (x, xs) = random(&device, &mut rng, &[4, 7], dtype, -2.0, 2.0);
            let max = reduce::reduce(reduce::ReduceOp::Max, &x, 1, true).unwrap();
            let mask = ew::equal(&x, &max).unwrap().to_f64().unwrap();
            for (row, marks) in xs.chunks(7).zip(mask.chunks(7)) {
                let top = row.iter().cloned().fold(f64::MIN, f64::max);
                let want: Vec<f64> = row.iter().map(|&v| f64::from(v == top)).collect();
                assert_eq!(marks, want, "{dtype}");
            }
            let same = ew::equal(&x, &x).unwrap().to_f64().unwrap();
            assert!(same.iter().all(|&v| v == 1.0));
        }
    }
}

/// d gelu / dx, differentiated by hand (and checked against finite differences below).
fn gelu_derivative(x: f64) -> f64 {
    let t = (GELU_K * (x + 0.044_715 * x.powi(3))).tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * 0.044_715 * x * x)
}

#[test]
fn binary_ops_broadcast_and_match_the_f64_reference() {
    let pairs: [(&[usize], &[usize]); 7] = [
        (&[3, 5], &[3, 5]),
        (&[3, 5], &[5]),
        (&[4, 1, 3], &[5, 1]),
        (&[1], &[2, 3]),
        (&[2, 3], &[1]),
        (&[7, 1], &[1, 9]),
        (&[50_000], &[50_000]),
    ];
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for (op, reference, lo, hi) in binary_cases() {
                for (a_shape, b_shape) in pairs {
                    let (a, av) = random(&device, &mut rng, a_shape, dtype, lo, hi);
                    let (b, bv) = random(&device, &mut rng, b_shape, dtype, 0.5, 2.0);
                    let got = ew::binary(op, &a, &b).unwrap();
                    let out = got.shape().clone();
                    let want: Vec<f64> = (0..out.numel())
                        .map(|i| {
                            reference(
                                broadcast_at(&av, a.shape(), &out, i),
                                broadcast_at(&bv, b.shape(), &out, i),
                            )
                        })
                        .collect();
                    let what = format!("{op:?} {dtype} {a_shape:?} with {b_shape:?}");
                    assert_close(&what, &got.to_f64().unwrap(), &want, tolerance(dtype));
                }
            }
        }
    }
}

#[test]
fn derivative_kernels_agree_with_finite_differences_of_the_forward_kernels() {
    let device = &devices()[0];
    let mut rng = rng();
    let h = 1e-6;
    type Backward = fn(&Array, &Array, &Array) -> Array;
    let cases: [Case<UnaryOp, Backward>; 5] = [
        (
            UnaryOp::Relu,
            |x, _, dy| ew::relu_backward(x, dy).unwrap(),
            0.1,
            2.0,
        ),
        (
            UnaryOp::Gelu,
            |x, _, dy| ew::gelu_backward(x, dy).unwrap(),
            -3.0,
            3.0,
        ),
        (
            UnaryOp::Tanh,
            |_, y, dy| ew::tanh_backward(y, dy).unwrap(),
            -2.0,
            2.0,
        ),
        (
            UnaryOp::Sqrt,
            |_, y, dy| ew::sqrt_backward(y, dy).unwrap(),
            0.2,
            3.0,
        ),
        (
            UnaryOp::Powf(2.5),
            |x, _, dy| ew::powf_backward(x, dy, 2.5).unwrap(),
            0.2,
            3.0,
        ),
    ];
    for (op, backward, lo, hi) in cases {
        let (x, xs) = random(device, &mut rng, &[33], DType::F64, lo, hi);
        let (dy, dys) = random(device, &mut rng, &[33], DType::F64, -1.0, 1.0);
        let y = ew::unary(op, &x).unwrap();
        let analytic = backward(&x, &y, &dy).to_f64().unwrap();
        let shifted = |delta: f64| {
            let moved: Vec<f64> = xs.iter().map(|v| v + delta).collect();
            let moved = Array::from_f64(device, [33], DType::F64, &moved).unwrap();
            ew::unary(op, &moved).unwrap().to_f64().unwrap()
        };
        let (up, down) = (shifted(h), shifted(-h));
        let numeric: Vec<f64> = (0..33)
            .map(|i| dys[i] * (up[i] - down[i]) / (2.0 * h))
            .collect();
        assert_close(&format!("{op:?} backward"), &analytic, &numeric, 1e-6);
    }
}

#[test]
fn bad_operands_are_typed_errors_naming_the_op() {
    let device = &devices()[0];
    let a = Array::zeros(device, [2, 3], DType::F32).unwrap();
    let b = Array::zeros(device, [4], DType::F32).unwrap();
    let err = ew::add(&a, &b).unwrap_err();
    assert!(
        err.to_string().contains("add") && err.to_string().contains("[2, 3]"),
        "{err}"
    );
    let c = Array::zeros(device, [2, 3], DType::BF16).unwrap();
    let err = ew::mul(&a, &c).unwrap_err();
    assert!(
        matches!(err, headroom_kernels::Error::DType { op: "mul", .. }),
        "{err}"
    );
    let ids = Array::zeros(device, [3], DType::U32).unwrap();
    assert!(ew::exp(&ids).is_err());
    let other = &devices()[0];
    let d = Array::zeros(other, [2, 3], DType::F32).unwrap();
    let err = ew::sub(&a, &d).unwrap_err();
    assert!(
        matches!(err, headroom_kernels::Error::Device { op: "sub", .. }),
        "{err}"
    );
}

#[test]
fn add_into_accumulates_in_place_without_allocating() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            let (mut acc, a) = random(&device, &mut rng, &[3, 7], dtype, -1.0, 1.0);
            let (x, xs) = random(&device, &mut rng, &[3, 7], dtype, -1.0, 1.0);
            let addr = acc.buffer().addr();
            let allocations = device.allocator().stats().allocations;
            ew::add_into(&mut acc, &x).unwrap();
            assert_eq!(device.allocator().stats().allocations, allocations);
            assert_eq!(acc.buffer().addr(), addr);
            let want: Vec<f64> = a.iter().zip(&xs).map(|(p, q)| p + q).collect();
            assert_close(
                &format!("add_into {dtype}"),
                &acc.to_f64().unwrap(),
                &want,
                tolerance(dtype),
            );
            let shared = acc.clone();
            assert!(
                ew::add_into(&mut acc, &x).is_err(),
                "a shared accumulator is refused"
            );
            drop(shared);
            let (wrong, _) = random(&device, &mut rng, &[7, 3], dtype, -1.0, 1.0);
            assert!(ew::add_into(&mut acc, &wrong).is_err());
        }
    }
}

#[test]
fn binary_into_writes_what_binary_returns_into_its_second_operand() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            for (op, _, lo, hi) in binary_cases() {
                let (a, _) = random(&device, &mut rng, &[3, 5], dtype, lo, hi);
                let (b, _) = random(&device, &mut rng, &[3, 5], dtype, -1.0, 1.0);
                let want = ew::binary(op, &a, &b).unwrap().to_bytes().unwrap();
                let mut b = b.deep_copy().unwrap();
                let allocations = device.allocator().stats().allocations;
                ew::binary_into(op, &a, &mut b).unwrap();
                assert_eq!(
                    device.allocator().stats().allocations,
                    allocations,
                    "{op:?}"
                );
                assert_eq!(b.to_bytes().unwrap(), want, "{op:?} {dtype}");
                let shared = b.clone();
                assert!(
                    ew::binary_into(op, &a, &mut b).is_err(),
                    "a shared operand is refused"
                );
                drop(shared);
            }
        }
        let (a, _) = random(&device, &mut rng, &[3, 5], DType::F32, -1.0, 1.0);
        let (mut b, _) = random(&device, &mut rng, &[5], DType::F32, -1.0, 1.0);
        assert!(
            ew::binary_into(BinaryOp::Add, &a, &mut b).is_err(),
            "no broadcasting"
        );
    }
}

#[test]
fn scale_by_into_multiplies_in_place_by_a_factor_read_on_the_device() {
    let mut rng = rng();
    for device in devices() {
        for dtype in DType::FLOATS {
            // Past one parallel chunk of 2^14 elements.
            let (x, values) = random(&device, &mut rng, &[3, 7001], dtype, -1.0, 1.0);
            let (factor, f) = random(&device, &mut rng, &[], dtype, -4.0, 4.0);
            let mut x = x.deep_copy().unwrap();
            let allocations = device.allocator().stats().allocations;
            ew::scale_by_into(&mut x, &factor).unwrap();
            assert_eq!(device.allocator().stats().allocations, allocations);
            let want: Vec<f64> = values.iter().map(|v| v * f[0]).collect();
            assert_close(
                &format!("scale_by_into {dtype}"),
                &x.to_f64().unwrap(),
                &want,
                tolerance(dtype),
            );
            let shared = x.clone();
            assert!(
                ew::scale_by_into(&mut x, &factor).is_err(),
                "a shared operand is refused"
            );
            drop(shared);
            let (two, _) = random(&device, &mut rng, &[2], dtype, -1.0, 1.0);
            assert!(ew::scale_by_into(&mut x, &two).is_err(), "one factor");
        }
    }
}
