//! Memory discipline, measured with the allocator's own statistics: saved tensors and
//! intermediate gradients go as soon as they have served, and dropping a step's tape returns
//! memory to exactly the parameters.

mod common;

use common::{Mlp, batch, device};
use headroom_alloc::Tag;
use headroom_autograd::{Tape, Tensor};
use headroom_kernels::DType;

/// `bytes` rounded up to the allocator's 256-byte granule.
fn rounded(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(256) * 256
}

/// Bytes asked for by the live allocations tagged `tag`, each rounded to the granule (the
/// allocator may hand out a larger chunk rather than split off a sliver; that padding is not
/// what a tensor holds).
fn live(device: &headroom_kernels::Device, tag: Tag) -> u64 {
    let snapshot = device.allocator().snapshot();
    let chunks = snapshot.regions.iter().flat_map(|r| &r.chunks);
    chunks
        .filter(|c| c.in_use && c.tag == Some(tag))
        .map(|c| rounded(c.requested as usize))
        .sum()
}

#[test]
fn backward_peak_stays_within_forward_peak_plus_one_layer_and_the_tape_keeps_nothing() {
    let device = device();
    let (rows, width, layers) = (128, 128, 8);
    let sizes = vec![width; layers + 1];
    let mlp = Mlp::new(&device, &sizes, DType::F32, 1);
    let params = device.allocator().stats().in_use;
    let (x, targets) = batch(&device, rows, width, width, 2);

    device.allocator().with(|a| a.reset_peak());
    let tape = Tape::new();
    let loss = tape
        .record(|| mlp.forward(&x)?.cross_entropy(&targets, None))
        .unwrap();
    let forward_peak = device.allocator().stats().peak_in_use;
    let saved = live(&device, Tag::ACTIVATIONS);

    device.allocator().with(|a| a.reset_peak());
    let grads = tape.gradient(&loss, &mlp.variables()).unwrap();
    let backward_peak = device.allocator().stats().peak_in_use;

    // One layer's backward holds its weight and bias gradients and, at most, two
    // activation-sized temporaries (the incoming gradient and the outgoing one).
    let weight = rounded(width * width * 4);
    let bias = rounded(width * 4);
    let activation = rounded(rows * width * 4);
    let one_layer = weight + bias + 2 * activation;
    assert!(
        backward_peak <= forward_peak + one_layer,
        "backward peak {backward_peak} above forward peak {forward_peak} + one layer {one_layer}"
    );
    // Keeping the saved activations to the end would have cost every layer's gradients on top.
    let all_grads = layers as u64 * (weight + bias);
    assert!(one_layer < all_grads, "the bound tells the two apart");

    // The tape released every tensor it saved as its rules ran: what is left of the
    // activations is what the caller holds (the inputs and the loss).
    let held = rounded(x.array().buffer().bytes())
        + rounded(targets.array().buffer().bytes())
        + rounded(4);
    assert!(
        saved > held + (layers as u64 - 1) * activation,
        "the forward saved its activations"
    );
    assert_eq!(live(&device, Tag::ACTIVATIONS), held);
    assert_eq!(
        live(&device, Tag::GRADIENTS),
        layers as u64 * (weight + bias)
    );

    drop((grads, loss, tape));
    drop((x, targets));
    assert_eq!(
        device.allocator().stats().in_use,
        params,
        "back to exactly the parameters"
    );
}

#[test]
fn dropping_a_tape_without_running_it_releases_everything() {
    let device = device();
    let mlp = Mlp::new(&device, &[32, 64, 64, 10], DType::F32, 3);
    let params = device.allocator().stats().in_use;
    let (x, targets) = batch(&device, 16, 32, 10, 4);
    let tape = Tape::new();
    let loss = tape
        .record(|| mlp.forward(&x)?.cross_entropy(&targets, None))
        .unwrap();
    assert!(device.allocator().stats().in_use > params);
    drop((tape, loss, x, targets));
    assert_eq!(device.allocator().stats().in_use, params);
}

#[test]
fn ops_that_do_not_need_their_inputs_keep_nothing() {
    let device = device();
    let w = Tensor::variable(
        headroom_kernels::Array::full(&device, [256, 256], DType::F32, 0.5).unwrap(),
    );
    let before = device.allocator().stats().in_use;
    let tape = Tape::new();
    // add, scale, reshape, transpose and sum keep no tensor: only the final scalar stays.
    let y = tape
        .record(|| {
            w.add(&w)?
                .scale(2.0)?
                .reshape([65536])?
                .reshape([256, 256])?
                .transpose(0, 1)?
                .sum_all()
        })
        .unwrap();
    assert_eq!(device.allocator().stats().in_use, before + rounded(4));
    drop((y, tape));
}

#[test]
fn elementwise_gradients_reuse_the_upstream_gradients_memory() {
    let device = device();
    let w = Tensor::variable(
        headroom_kernels::Array::full(&device, [512, 512], DType::F32, 0.5).unwrap(),
    );
    let tape = Tape::new();
    let y = tape
        .record(|| w.relu()?.gelu()?.tanh()?.exp()?.sum_all())
        .unwrap();
    let before = device.allocator().stats().allocations;
    let grads = tape.gradient(&y, &[&w]).unwrap();
    // The seed and the broadcast of the sum's gradient; exp, tanh, gelu and relu then work in
    // that one array, which becomes w's gradient.
    assert_eq!(device.allocator().stats().allocations - before, 2);
    assert_eq!(grads.get(&w).unwrap().shape().dims(), [512, 512]);
}

#[test]
fn a_tensor_used_twice_sums_its_gradients_in_place() {
    let device = device();
    let w = Tensor::variable(
        headroom_kernels::Array::full(&device, [512, 512], DType::F32, 0.5).unwrap(),
    );
    let branch_gradient = |relu: bool| {
        let tape = Tape::new();
        let y = tape
            .record(|| if relu { w.relu() } else { w.gelu() }?.sum_all())
            .unwrap();
        let grads = tape.gradient(&y, &[&w]).unwrap();
        grads.get(&w).unwrap().to_f64().unwrap()
    };
    let (from_relu, from_gelu) = (branch_gradient(true), branch_gradient(false));

    let tape = Tape::new();
    let y = tape
        .record(|| w.relu()?.sum_all()?.add(&w.gelu()?.sum_all()?))
        .unwrap();
    let before = device.allocator().stats();
    device.allocator().with(|a| a.reset_peak());
    let grads = tape.gradient(&y, &[&w]).unwrap();
    let after = device.allocator().stats();
    // The seed and each branch's broadcast of its sum's gradient (relu and gelu work in place
    // there); the second branch's gradient is then added into the first, not into a third array.
    assert_eq!(after.allocations - before.allocations, 3);
    // Two w-sized gradients at most, and a few scalars (the seed, the sums' gradients).
    let grad = rounded(512 * 512 * 4);
    assert!(
        after.peak_in_use <= before.in_use + 2 * grad + 4 * rounded(4),
        "peak {} above two gradients over {}",
        after.peak_in_use,
        before.in_use
    );
    let got = grads.get(&w).unwrap().to_f64().unwrap();
    for ((g, r), e) in got.iter().zip(&from_relu).zip(&from_gelu) {
        assert_eq!(*g as f32, (r + e) as f32);
    }
}

#[test]
fn gradients_handed_out_as_they_complete_are_each_the_full_gradient_and_can_be_freed_at_once() {
    let device = device();
    let (rows, width, layers) = (64, 128, 8);
    let mlp = Mlp::new(&device, &vec![width; layers + 1], DType::F32, 5);
    let (x, targets) = batch(&device, rows, width, width, 6);
    let forward = |tape: &Tape| {
        tape.record(|| mlp.forward(&x)?.cross_entropy(&targets, None))
            .unwrap()
    };
    let variables = mlp.variables();
    let tape = Tape::new();
    let loss = forward(&tape);
    let whole = tape.gradient(&loss, &variables).unwrap();
    let want: Vec<Vec<f64>> = variables
        .iter()
        .map(|v| whole.get(v).unwrap().to_f64().unwrap())
        .collect();
    drop((whole, loss, tape));

    let ids: Vec<_> = variables.iter().map(|v| v.id()).collect();
    let tape = Tape::new();
    let loss = forward(&tape);
    device.allocator().with(|a| a.reset_peak());
    let seed = headroom_kernels::Array::full(&device, [], DType::F32, 1.0).unwrap();
    let mut order = Vec::new();
    let mut most_live = 0;
    tape.gradient_each(&loss, seed, &ids, |index, grad| {
        assert_eq!(grad.to_f64().unwrap(), want[index], "source {index}");
        order.push(index);
        // Handed over, nothing else holds it: dropping it frees it.
        assert!(!grad.is_shared());
        most_live = most_live.max(live(&device, Tag::GRADIENTS));
        Ok::<_, headroom_autograd::Error>(())
    })
    .unwrap();
    // Each layer's weight and bias, from the last layer to the first.
    let expected: Vec<usize> = (0..layers).rev().flat_map(|l| [2 * l, 2 * l + 1]).collect();
    let mut got = order.clone();
    for pair in got.chunks_mut(2) {
        pair.sort_unstable();
    }
    assert_eq!(got, expected);
    // At most one layer's gradients (and the gradient flowing between layers) were alive at once.
    let weight = rounded(width * width * 4);
    let bias = rounded(width * 4);
    let activation = rounded(rows * width * 4);
    assert!(
        most_live <= 2 * (weight + bias) + 2 * activation,
        "{most_live} bytes of gradients alive at once"
    );
    assert!(2 * (weight + bias) + 2 * activation < layers as u64 * (weight + bias));
    assert_eq!(live(&device, Tag::GRADIENTS), 0, "every gradient was freed");
    drop(loss);
}
