//! Recomputed segments (gradient checkpointing): the same gradients as a plain pass, bit for
//! bit, for a fraction of the activation memory.

mod common;

use common::{Mlp, batch, device};
use headroom_alloc::Tag;
use headroom_autograd::{Gradients, Tape, Tensor, autocast, recompute};
use headroom_kernels::{DType, Device};

/// The gradients of the mean cross-entropy for the MLP's parameters and the input `x`.
fn gradients(mlp: &Mlp, x: &Tensor, targets: &Tensor, recomputed: bool) -> Gradients {
    let tape = Tape::new();
    tape.watch(x);
    let loss = tape
        .record(|| {
            let logits = if recomputed {
                mlp.recomputed_forward(x)?
            } else {
                mlp.forward(x)?
            };
            logits.cross_entropy(targets, None)
        })
        .unwrap();
    let mut sources = mlp.variables();
    sources.push(x);
    tape.gradient(&loss, &sources).unwrap()
}

#[test]
fn recomputed_segments_give_the_same_gradients_bit_for_bit() {
    let device = device();
    let mlp = Mlp::new(&device, &[12, 32, 32, 32, 32, 5], DType::F32, 7);
    let (x, targets) = batch(&device, 9, 12, 5, 8);
    for policy in [None, Some(DType::BF16)] {
        let _policy = policy.map(autocast);
        let plain = gradients(&mlp, &x, &targets, false);
        let recomputed = gradients(&mlp, &x, &targets, true);
        let mut sources = mlp.variables();
        sources.push(&x);
        for (i, source) in sources.into_iter().enumerate() {
            let want = plain.get(source).unwrap().to_f64().unwrap();
            let got = recomputed.get(source).unwrap().to_f64().unwrap();
            assert_eq!(got, want, "source {i} under {policy:?}");
        }
    }
}

/// Bytes asked for by the live allocations under `tag` (each rounded to the 256-byte granule;
/// the allocator may hand out a larger chunk than that).
fn live(device: &Device, tag: Tag) -> u64 {
    let snapshot = device.allocator().snapshot();
    let chunks = snapshot.regions.iter().flat_map(|r| &r.chunks);
    chunks
        .filter(|c| c.in_use && c.tag == Some(tag))
        .map(|c| c.requested.div_ceil(256) * 256)
        .sum()
}

#[test]
fn recomputed_segments_keep_only_their_inputs_and_peak_lower() {
    let device = device();
    // Many rows of few features: activations outweigh the weights and their gradients.
    let (rows, width, layers) = (2048, 64, 8);
    let mlp = Mlp::new(&device, &vec![width; layers + 1], DType::F32, 3);
    let (x, targets) = batch(&device, rows, width, width, 4);
    let activation = (rows * width * 4) as u64;
    let mut saved = Vec::new();
    let mut peaks = Vec::new();
    for recomputed in [false, true] {
        let held = device.allocator().stats().in_use;
        device.allocator().with(|a| a.reset_peak());
        let tape = Tape::new();
        let loss = tape
            .record(|| {
                let logits = if recomputed {
                    mlp.recomputed_forward(&x)?
                } else {
                    mlp.forward(&x)?
                };
                logits.cross_entropy(&targets, None)
            })
            .unwrap();
        saved.push(live(&device, Tag::ACTIVATIONS));
        let grads = tape.gradient(&loss, &mlp.variables()).unwrap();
        peaks.push(device.allocator().stats().peak_in_use - held);
        drop((grads, loss, tape));
        assert_eq!(
            device.allocator().stats().in_use,
            held,
            "everything released"
        );
    }
    // Plainly, every layer's input stays (the input and each ReLU output), and the logits;
    // recomputed, only each two-layer segment's input, and the logits (with the targets and
    // the loss, a few KiB).
    let segments = layers as u64 / 2;
    assert!(saved[0] >= (layers as u64 + 1) * activation, "{saved:?}");
    assert!(
        saved[1] <= (segments + 1) * activation + (16 << 10),
        "recomputed forward kept {} bytes, {segments} segments' inputs and the logits are {}",
        saved[1],
        (segments + 1) * activation
    );
    // The backward pass holds one segment's activations at a time, not every layer's: here
    // about 9.0 activations' worth plainly and 7.1 recomputed.
    assert!(
        peaks[1] + 3 * activation / 2 <= peaks[0],
        "peaks: plain {}, recomputed {}",
        peaks[0],
        peaks[1]
    );
}

#[test]
fn without_a_recording_tape_a_segment_is_a_plain_call() {
    let device = device();
    let mlp = Mlp::new(&device, &[4, 6, 3], DType::F32, 1);
    let (x, _) = batch(&device, 2, 4, 3, 2);
    let plain = mlp.forward(&x).unwrap().array().to_f64().unwrap();
    let segment = mlp.recomputed_forward(&x).unwrap();
    assert_eq!(segment.array().to_f64().unwrap(), plain);
    // A tape that tracks neither the input nor (no variables given) anything the segment
    // reads records nothing.
    let tape = Tape::new();
    let y = tape
        .record(|| recompute(&[&x], &[], |x| x[0].scale(2.0)))
        .unwrap();
    assert!(tape.is_empty() && !tape.tracks(&y));
    // A segment that hands its input back records nothing: the gradient flows straight on.
    let w = &mlp.params[0].0;
    let tape = Tape::new();
    let y = tape
        .record(|| recompute(&[w], &[], |x| Ok(x[0].clone()))?.sum_all())
        .unwrap();
    let grad = tape.gradient(&y, &[w]).unwrap().remove(w).unwrap();
    assert!(grad.to_f64().unwrap().iter().all(|&g| g == 1.0));
}

#[test]
fn offloaded_inputs_come_back_one_segment_ahead_of_their_rule_or_as_it_starts() {
    use std::sync::{Arc, Mutex};
    let (device, host) = (device(), device());
    let w = Tensor::variable(
        headroom_kernels::Array::from_f64(&device, [16, 16], DType::F32, &[0.01; 256]).unwrap(),
    );
    let x = Tensor::from_f64(&device, [8, 16], DType::F32, &[0.5; 128]).unwrap();
    for ahead in [true, false] {
        // The activations live on the device each time a segment runs: three forward, then
        // three again in the backward pass, last segment first.
        let seen = Arc::new(Mutex::new(Vec::new()));
        let segment = |input: &Tensor| {
            let (device, seen, weight) = (device.clone(), Arc::clone(&seen), w.clone());
            headroom_autograd::recompute_offloaded(&[input], &[&w], &host, ahead, move |inputs| {
                seen.lock().unwrap().push(live(&device, Tag::ACTIVATIONS));
                inputs[0].matmul(&weight)?.tanh()
            })
        };
        let tape = Tape::new();
        tape.watch(&x);
        let loss = tape
            .record(|| segment(&segment(&segment(&x)?)?)?.sum_all())
            .unwrap();
        let grads = tape.gradient(&loss, &[&w, &x]).unwrap();
        assert!(grads.get(&w).is_some() && grads.get(&x).is_some());
        let seen = seen.lock().unwrap();
        // Fetched ahead, the last segment's rule holds its input and has brought back the one
        // before, which brings back the first; the first has nothing earlier to bring. Each
        // rule holds its own input alone otherwise.
        let earlier = if ahead { 8 * 16 * 4 } else { 0 };
        assert_eq!(seen.len(), 6, "{seen:?}");
        assert_eq!(seen[3], seen[5] + earlier, "ahead {ahead}: {seen:?}");
        assert_eq!(seen[4], seen[5] + earlier, "ahead {ahead}: {seen:?}");
    }
}
