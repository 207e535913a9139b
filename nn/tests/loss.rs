//! Losses against references, and their operand checks.

mod common;

use common::device;
use headroom_autograd::{Tape, Tensor};
use headroom_kernels::DType;
use headroom_nn::loss::{cross_entropy, mse};

#[test]
fn mse_is_the_mean_square_and_its_gradient_is_twice_the_difference_over_n() {
    let device = device();
    let p = Tensor::variable(
        headroom_kernels::Array::from_f64(&device, [2, 2], DType::F64, &[1.0, 2.0, 3.0, 4.0])
            .unwrap(),
    );
    let t = Tensor::from_f64(&device, [2, 2], DType::F64, &[0.0, 2.0, 5.0, 3.0]).unwrap();
    let tape = Tape::new();
    let loss = tape.record(|| mse(&p, &t)).unwrap();
    assert_eq!(loss.to_f64().unwrap(), [(1.0 + 0.0 + 4.0 + 1.0) / 4.0]);
    let grads = tape.gradient(&loss, &[&p]).unwrap();
    assert_eq!(
        grads.get(&p).unwrap().to_f64().unwrap(),
        [0.5, 0.0, -1.0, 0.5]
    );
    let wrong = Tensor::from_f64(&device, [4], DType::F64, &[0.0; 4]).unwrap();
    assert!(mse(&p, &wrong).unwrap_err().to_string().contains("[4]"));
}

#[test]
fn cross_entropy_flattens_leading_axes_and_checks_targets() {
    let device = device();
    let logits = Tensor::from_f64(&device, [2, 3, 4], DType::F32, &[0.25; 24]).unwrap();
    let targets = Tensor::from_host(&device, [2, 3], &[0u32, 1, 2, 3, 0, 1]).unwrap();
    let loss = cross_entropy(&logits, &targets, None)
        .unwrap()
        .to_f64()
        .unwrap()[0];
    assert!(
        (loss - 4f64.ln()).abs() < 1e-6,
        "uniform logits: ln 4, got {loss}"
    );
    let flat = Tensor::from_host(&device, [6], &[0u32; 6]).unwrap();
    let err = cross_entropy(&logits, &flat, None).unwrap_err();
    assert!(
        err.to_string().contains("[2, 3, 4]") && err.to_string().contains("[6]"),
        "{err}"
    );
}
