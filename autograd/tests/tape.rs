//! What the tape promises: which tensors it tracks, how gradients accumulate, what it refuses.

mod common;

use common::shared_device;
use headroom_autograd::{Error, Tape, Tensor, no_grad};
use headroom_kernels::{Array, DType};

fn variable(values: &[f64]) -> Tensor {
    let device = shared_device();
    Tensor::variable(Array::from_f64(&device, [values.len()], DType::F64, values).unwrap())
}

#[test]
fn a_tensor_used_several_times_accumulates_and_unused_variables_get_none() {
    let (x, unused) = (variable(&[1.0, -2.0, 3.0]), variable(&[5.0]));
    let tape = Tape::new();
    // f = sum(x * x * x) + sum(3 x): df/dx = 3 x^2 + 3.
    let f = tape
        .record(|| {
            x.mul(&x)?
                .mul(&x)?
                .sum_all()?
                .add(&x.scale(3.0)?.sum_all()?)
        })
        .unwrap();
    let grads = tape.gradient(&f, &[&x, &unused]).unwrap();
    assert_eq!(grads.get(&x).unwrap().to_f64().unwrap(), [6.0, 15.0, 30.0]);
    assert!(grads.get(&unused).is_none());
    assert_eq!(
        grads.get_or_zeros(&unused).unwrap().to_f64().unwrap(),
        [0.0]
    );
    assert_eq!(grads.len(), 1);
}

#[test]
fn constants_are_not_tracked_unless_watched_and_detach_stops_gradients() {
    let device = shared_device();
    let c = Tensor::from_f64(&device, [2], DType::F64, &[2.0, 4.0]).unwrap();
    let w = variable(&[1.0, 1.0]);
    let tape = Tape::new();
    tape.watch(&c);
    let f = tape
        .record(|| {
            let stopped = w.scale(10.0)?.detach();
            c.mul(&w)?.add(&stopped)?.sum_all()
        })
        .unwrap();
    assert!(tape.tracks(&c) && tape.tracks(&w) && tape.tracks(&f));
    let grads = tape.gradient(&f, &[&c, &w]).unwrap();
    assert_eq!(grads.get(&c).unwrap().to_f64().unwrap(), [1.0, 1.0]);
    // Only through c * w: the detached branch contributes nothing.
    assert_eq!(grads.get(&w).unwrap().to_f64().unwrap(), [2.0, 4.0]);
}

#[test]
fn nothing_is_recorded_outside_a_tape_or_under_no_grad() {
    let w = variable(&[1.0, 2.0]);
    let outside = w.scale(2.0).unwrap();
    let tape = Tape::new();
    let _recording = tape.start();
    let tracked = w.scale(2.0).unwrap();
    let paused = {
        let _off = no_grad();
        w.scale(2.0).unwrap()
    };
    assert!(!tape.tracks(&outside) && !tape.tracks(&paused) && tape.tracks(&tracked));
    assert_eq!(tape.len(), 1);
    assert!(matches!(
        tape.gradient(&paused, &[&w]),
        Err(Error::NotRecorded)
    ));
}

#[test]
fn a_tape_computes_gradients_once() {
    let w = variable(&[3.0]);
    let tape = Tape::new();
    let f = tape.record(|| w.mul(&w)).unwrap();
    tape.gradient(&f, &[&w]).unwrap();
    assert!(matches!(tape.gradient(&f, &[&w]), Err(Error::TapeUsed)));
    assert!(tape.is_empty());
    // Ops on a used tape are not recorded: a new step needs a new tape.
    let again = tape.record(|| w.scale(2.0)).unwrap();
    assert!(!tape.tracks(&again));
}

#[test]
fn a_seed_weights_the_gradient_and_must_match_the_target() {
    let device = shared_device();
    let w = variable(&[3.0, -1.0]);
    let tape = Tape::new();
    let f = tape.record(|| w.mul(&w)).unwrap();
    let seed = Array::from_f64(&device, [2], DType::F64, &[0.5, 2.0]).unwrap();
    let grads = tape.gradient_with(&f, seed, &[&w]).unwrap();
    assert_eq!(grads.get(&w).unwrap().to_f64().unwrap(), [3.0, -4.0]);
    let tape = Tape::new();
    let f = tape.record(|| w.mul(&w)).unwrap();
    let wrong = Array::from_f64(&device, [3], DType::F64, &[1.0; 3]).unwrap();
    let err = tape.gradient_with(&f, wrong, &[&w]).unwrap_err();
    assert!(err.to_string().contains("seed"), "{err}");
}

#[test]
fn mixed_dtypes_meet_in_the_wider_and_gradients_keep_each_inputs_dtype() {
    let device = shared_device();
    let a = Tensor::variable(Array::full(&device, [2], DType::BF16, 1.5).unwrap());
    let b = Tensor::variable(Array::full(&device, [2], DType::F32, 2.0).unwrap());
    let tape = Tape::new();
    let f = tape.record(|| a.mul(&b)?.sum_all()).unwrap();
    assert_eq!(f.dtype(), DType::F32);
    let grads = tape.gradient(&f, &[&a, &b]).unwrap();
    let (ga, gb) = (grads.get(&a).unwrap(), grads.get(&b).unwrap());
    assert_eq!((ga.dtype(), gb.dtype()), (DType::BF16, DType::F32));
    assert_eq!(ga.to_f64().unwrap(), [2.0, 2.0]);
    assert_eq!(gb.to_f64().unwrap(), [1.5, 1.5]);
}

#[test]
fn kernel_errors_name_the_op_and_record_nothing() {
    let (a, b) = (variable(&[1.0, 2.0]), variable(&[1.0, 2.0, 3.0]));
    let tape = Tape::new();
    let err = tape.record(|| a.add(&b)).unwrap_err();
    assert!(
        err.to_string().starts_with("add: shapes do not fit"),
        "{err}"
    );
    assert!(tape.is_empty());
}

#[test]
fn accumulating_gradients_sums_them_even_when_two_sources_share_one_array() {
    let (a, b) = (variable(&[1.0, 2.0]), variable(&[3.0, 4.0]));
    let mut total = headroom_autograd::Gradients::default();
    for _ in 0..3 {
        let tape = Tape::new();
        // d(sum(a + b))/da and /db are the same array of ones.
        let f = tape.record(|| a.add(&b)?.sum_all()).unwrap();
        total
            .accumulate(tape.gradient(&f, &[&a, &b]).unwrap())
            .unwrap();
    }
    assert_eq!(total.get(&a).unwrap().to_f64().unwrap(), [3.0, 3.0]);
    assert_eq!(total.get(&b).unwrap().to_f64().unwrap(), [3.0, 3.0]);
}

#[test]
fn the_tape_says_what_each_op_saved_and_counts_a_shared_buffer_once() {
    // A device of its own: the tags of its buffers are this test's.
    let device = common::device();
    let x = Tensor::from_f64(&device, [4, 8], DType::F32, &[0.5; 32]).unwrap();
    let (w1, w2) = (
        Tensor::variable(Array::full(&device, [8, 8], DType::F32, 0.1).unwrap()),
        Tensor::variable(Array::full(&device, [8, 8], DType::F32, 0.2).unwrap()),
    );
    let tape = Tape::new();
    let f = tape
        .record(|| {
            // Both products keep x (w1 and w2 need its gradient) but not the weights (the
            // constant x needs none); the GELU keeps its input; sums and reshapes keep nothing.
            let a = x.matmul(&w1)?.gelu()?;
            let b = x.matmul(&w2)?;
            a.add(&b)?.sum_all()
        })
        .unwrap();
    let saved = tape.saved();
    let ops: Vec<(&str, usize)> = saved.ops.iter().map(|o| (o.op, o.arrays.len())).collect();
    assert_eq!(
        ops,
        [
            ("matmul", 1),
            ("gelu", 1),
            ("matmul", 1),
            ("add", 0),
            ("reshape", 0),
            ("sum", 0)
        ]
    );
    let x_bytes = x.array().buffer().reserved_bytes();
    assert_eq!(saved.ops[0].arrays[0].addr, saved.ops[2].arrays[0].addr);
    assert_eq!(saved.ops[0].arrays[0].shape.dims(), [4, 8]);
    // x once, and the GELU's [4, 8] input once.
    assert_eq!(saved.bytes(), 2 * x_bytes);
    assert_eq!(
        saved.activation_bytes_by_op(),
        [("gelu", x_bytes), ("matmul", x_bytes)]
    );
    assert!(saved.to_string().contains("6 ops saved"), "{saved}");
    // The backward pass releases it all.
    tape.gradient(&f, &[&w1, &w2]).unwrap();
    assert!(tape.saved().ops.is_empty());
}
