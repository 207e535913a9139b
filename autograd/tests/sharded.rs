//! A weight sharded over ranks, gathered where it is used: its chunk's gradient is the whole
//! gradient's chunk, handed over as soon as the gradient is whole; a product that keeps it
//! gathered again in the backward pass holds no whole copy between the passes.

use headroom_autograd::{Tape, Tensor};
use headroom_collectives::{SharedWorld, Solo};
use headroom_kernels::{Array, DType, Device, DeviceConfig, Shape};

fn cpu() -> Device {
    Device::cpu(DeviceConfig::new(16 << 20)).unwrap()
}

fn variable(device: &Device, dims: &[usize], seed: f64) -> Tensor {
    let n: usize = dims.iter().product();
    let values: Vec<f64> = (0..n).map(|i| ((i as f64 + seed) * 0.37).sin()).collect();
    Tensor::variable(Array::from_f64(device, dims, DType::F32, &values).unwrap())
}

/// `x @ w^T` summed, plus `2 p` summed, where `p` is read between `w`'s gather and its product:
/// the gathered weight's chunk is handed over before `p`, whose rule the recording puts later
/// in the backward pass.
#[test]
fn a_gathered_weights_gradient_is_handed_over_as_soon_as_it_is_whole() {
    let device = cpu();
    let world = SharedWorld::new(Box::new(Solo::new(&device)));
    let whole = Shape::from([3, 4]);
    for again in [false, true] {
        let (chunk, p) = (variable(&device, &[12], 1.0), variable(&device, &[5], 2.0));
        let x = Tensor::new(variable(&device, &[2, 4], 3.0).into_array());
        let tape = Tape::new();
        let loss = tape
            .record(|| {
                let w = match again {
                    false => chunk.gathered(&world, &whole, DType::F32)?,
                    true => chunk.gathered_again_in_backward(&world, &whole, DType::F32)?,
                };
                let u = p.scale(2.0)?.sum_all()?;
                x.linear(&w, None)?.sum_all()?.add(&u)
            })
            .unwrap();
        let mut handed = Vec::new();
        let seed = Array::full(&device, [], DType::F32, 1.0).unwrap();
        tape.gradient_each(&loss, seed, &[chunk.id(), p.id()], |index, grad| {
            handed.push((index, grad.to_f64()?));
            Ok::<(), headroom_autograd::Error>(())
        })
        .unwrap();
        let order: Vec<usize> = handed.iter().map(|(i, _)| *i).collect();
        assert_eq!(order, [0, 1], "again: {again}");
        // d/dw of sum(x @ w^T) is each row of w getting the column sums of x.
        let xs = x.array().to_f64().unwrap();
        let column = |k: usize| xs[k] + xs[4 + k];
        let want: Vec<f64> = (0..12).map(|i| column(i % 4)).collect();
        for (got, want) in handed[0].1.iter().zip(&want) {
            assert!((got - want).abs() < 1e-6, "again: {again}: {got} vs {want}");
        }
        assert_eq!(handed[1].1, [2.0; 5]);
    }
}

#[test]
fn a_chunk_of_the_wrong_size_is_refused() {
    let device = cpu();
    let world = SharedWorld::new(Box::new(Solo::new(&device)));
    let chunk = variable(&device, &[11], 1.0);
    let err = chunk
        .gathered(&world, &Shape::from([3, 4]), DType::F32)
        .unwrap_err()
        .to_string();
    assert!(err.contains("expected [12]"), "{err}");
}

/// Gathered in bf16 under autocast, a weight's product and its chunk's f32 gradient are bit for
/// bit those of the f32 gather that autocast casts (the same rounding, the gradient cast back
/// to f32 before the reduction), while the gathered copy holds half the bytes.
#[test]
fn a_weight_gathered_in_bf16_gives_what_autocast_gives_the_f32_gather() {
    let device = cpu();
    let world = SharedWorld::new(Box::new(Solo::new(&device)));
    let whole = Shape::from([3, 4]);
    let x = Tensor::new(variable(&device, &[2, 4], 3.0).into_array());
    let run = |dtype: DType| {
        let chunk = variable(&device, &[12], 1.0);
        let _half = headroom_autograd::autocast(DType::BF16);
        let tape = Tape::new();
        let mut copy = None;
        let loss = tape
            .record(|| {
                let w = chunk.gathered_again_in_backward(&world, &whole, dtype)?;
                copy = Some((w.dtype(), w.numel() * w.dtype().size()));
                let y = x.linear(&w, None)?;
                y.mul(&y)?.sum_all()
            })
            .unwrap();
        let grads = tape.gradient(&loss, &[&chunk]).unwrap();
        let grad = grads.get(&chunk).unwrap().clone();
        (
            loss.to_f64().unwrap(),
            grad.dtype(),
            grad.to_f64().unwrap(),
            copy.unwrap(),
        )
    };
    let (half_loss, half_dtype, half_grad, half_copy) = run(DType::BF16);
    let (f32_loss, f32_dtype, f32_grad, f32_copy) = run(DType::F32);
    assert_eq!(half_loss, f32_loss);
    assert_eq!((half_dtype, f32_dtype), (DType::F32, DType::F32));
    assert_eq!(half_grad, f32_grad);
    assert_eq!(half_copy, (DType::BF16, 24));
    assert_eq!(f32_copy, (DType::F32, 48));
}
