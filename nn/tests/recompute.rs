//! A GPT whose blocks are recomputed segments: the same losses and gradients as the plain
//! model, bit for bit, dropout masks included, with less kept from the forward pass.

mod common;

use common::device;
use headroom_alloc::{AllocatorConfig, GRANULE};
use headroom_autograd::{Tape, Tensor, autocast};
use std::sync::{Arc, Mutex};

use headroom_kernels::ops::quant::{QuantFormat, Quantized};
use headroom_kernels::{DType, Device, DeviceConfig};
use headroom_nn::{
    DropoutCounter, Family, Gpt, GptConfig, Initializer, Linear, Module, Placement, Recompute,
    Streamed, recomputed_streamed,
};

/// One step's loss, gradients (in parameter order) and the activation bytes the forward pass
/// left for the backward pass.
fn step(gpt: &Gpt, ids: &Tensor, targets: &Tensor) -> (Vec<f64>, Vec<Vec<f64>>, u64) {
    common::recorded_step(gpt, ids.device(), || {
        let logits = gpt.forward(ids)?;
        let [b, t, v] = logits.dims()[..] else {
            unreachable!("logits are [B, T, vocab]")
        };
        Ok(logits.reshape([b * t, v])?.cross_entropy(targets, None)?)
    })
}

#[test]
fn recomputed_blocks_give_the_same_step_bit_for_bit_with_dropout_and_keep_less() {
    let device = device();
    let config = GptConfig {
        vocab: 11,
        context: 16,
        width: 32,
        heads: 4,
        layers: 3,
        dropout: 0.1,
        tie_embeddings: false,
        family: Family::Gpt2,
    };
    let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 5), config).unwrap();
    let ids: Vec<u32> = (0..4 * 16).map(|i| (i * 7 % 11) as u32).collect();
    let targets: Vec<u32> = ids.iter().map(|&i| (i + 1) % 11).collect();
    let ids = Tensor::from_host(&device, [4, 16], &ids).unwrap();
    let targets = Tensor::from_host(&device, [64], &targets).unwrap();
    for policy in [None, Some(DType::BF16)] {
        let _policy = policy.map(autocast);
        let start = gpt.dropout_counter().get();
        gpt.set_recompute(Recompute::None);
        let (plain_loss, plain_grads, plain_kept) = step(&gpt, &ids, &targets);
        let drawn = gpt.dropout_counter().get() - start;
        assert!(drawn > 0, "dropout drew masks");

        gpt.dropout_counter().set(start);
        gpt.set_recompute(Recompute::Blocks);
        let (loss, grads, kept) = step(&gpt, &ids, &targets);
        assert_eq!(loss, plain_loss, "{policy:?}");
        assert!(grads == plain_grads, "{policy:?}: the gradients differ");
        // The recomputation draws its masks again without moving the counter on.
        assert_eq!(gpt.dropout_counter().get() - start, drawn, "{policy:?}");
        assert!(
            3 * kept < plain_kept,
            "{policy:?}: kept {kept} bytes recomputed, {plain_kept} plainly"
        );
    }
}

#[test]
fn memory_efficient_attention_gives_the_materialized_step_and_keeps_no_weights() {
    let device = device();
    let config = GptConfig {
        vocab: 11,
        context: 80,
        width: 32,
        heads: 4,
        layers: 2,
        dropout: 0.1,
        tie_embeddings: true,
        family: Family::Gpt2,
    };
    let (b, t) = (3, 70);
    let ids: Vec<u32> = (0..b * t).map(|i| (i * 7 % 11) as u32).collect();
    let targets: Vec<u32> = ids.iter().map(|&i| (i + 3) % 11).collect();
    let ids = Tensor::from_host(&device, [b, t], &ids).unwrap();
    let targets = Tensor::from_host(&device, [b * t], &targets).unwrap();
    let run = |materialized: bool| {
        let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 9), config).unwrap();
        gpt.set_materialized_attention(materialized);
        step(&gpt, &ids, &targets)
    };
    let (flash_loss, flash_grads, flash_kept) = run(false);
    let (loss, grads, kept) = run(true);
    assert!(
        (flash_loss[0] - loss[0]).abs() < 1e-5,
        "{flash_loss:?} {loss:?}"
    );
    for (a, b) in flash_grads.iter().flatten().zip(grads.iter().flatten()) {
        assert!((a - b).abs() <= 2e-5 * b.abs().max(1e-2), "{a} against {b}");
    }
    // The materialized path keeps each layer's [B, H, T, T] weights (and their dropout);
    // the memory-efficient one keeps none of them.
    let weights = (config.layers * b * config.heads * t * t * 4) as u64;
    assert!(
        kept >= flash_kept + weights,
        "{kept} against {flash_kept} + {weights}"
    );
}

#[test]
fn the_fused_head_gives_the_unfused_loss_and_gradients() {
    let device = device();
    let config = GptConfig {
        vocab: 50,
        context: 12,
        width: 16,
        heads: 2,
        layers: 1,
        dropout: 0.0,
        tie_embeddings: true,
        family: Family::Gpt2,
    };
    let (b, t) = (3, 12);
    let ids: Vec<u32> = (0..b * t).map(|i| (i * 7 % 50) as u32).collect();
    // Every fifth target is ignored (a prompt position).
    let targets: Vec<u32> = (0..b * t)
        .map(|i| {
            if i % 5 == 0 {
                u32::MAX
            } else {
                (i * 3 % 50) as u32
            }
        })
        .collect();
    let ids = Tensor::from_host(&device, [b, t], &ids).unwrap();
    let targets = Tensor::from_host(&device, [b, t], &targets).unwrap();
    let run = |chunk: Option<usize>| {
        let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 4), config).unwrap();
        gpt.set_head_chunk(chunk);
        let tape = Tape::new();
        let loss = tape
            .record(|| gpt.loss(&ids, &targets, Some(u32::MAX)))
            .unwrap();
        let parameters = gpt.parameters();
        let sources: Vec<&Tensor> = parameters.iter().collect();
        let grads = tape.gradient(&loss, &sources).unwrap();
        let grads: Vec<Vec<f64>> = sources
            .iter()
            .map(|p| grads.get(p).unwrap().to_f64().unwrap())
            .collect();
        (loss.to_f64().unwrap()[0], grads)
    };
    let (loss, grads) = run(None);
    for chunk in [Some(5), Some(7), None] {
        let (fused, fused_grads) = run(chunk);
        assert!(
            (fused - loss).abs() < 1e-5,
            "{chunk:?}: {fused} against {loss}"
        );
        for (a, b) in fused_grads.iter().flatten().zip(grads.iter().flatten()) {
            assert!(
                (a - b).abs() <= 1e-5 * b.abs().max(1e-2),
                "{chunk:?}: {a} against {b}"
            );
        }
    }
    // A default GPT fuses them.
    let gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 4), config).unwrap();
    assert!(gpt.head_chunk().is_some());
}

#[test]
fn cheap_recomputation_gives_the_same_step_bit_for_bit_and_keeps_less() {
    // Every chunk split, so that the bytes kept are the requests rounded to the granule, with no
    // padding of chunks handed out whole.
    let allocator = AllocatorConfig::default().with_max_internal_fragmentation(GRANULE);
    let device = Device::cpu(DeviceConfig::new(512 << 20).with_allocator(allocator)).unwrap();
    let config = GptConfig {
        vocab: 11,
        context: 16,
        width: 32,
        heads: 4,
        layers: 3,
        dropout: 0.1,
        tie_embeddings: false,
        family: Family::Gpt2,
    };
    let ids: Vec<u32> = (0..4 * 16).map(|i| (i * 7 % 11) as u32).collect();
    let targets: Vec<u32> = ids.iter().map(|&i| (i + 1) % 11).collect();
    let ids = Tensor::from_host(&device, [4, 16], &ids).unwrap();
    let targets = Tensor::from_host(&device, [64], &targets).unwrap();
    for policy in [None, Some(DType::BF16)] {
        let run = |recompute: Recompute| {
            let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 5), config).unwrap();
            gpt.set_recompute(recompute);
            let _policy = policy.map(autocast);
            step(&gpt, &ids, &targets)
        };
        let (loss, grads, kept) = run(Recompute::None);
        let (cheap_loss, cheap_grads, cheap_kept) = run(Recompute::Cheap);
        assert_eq!(loss, cheap_loss, "{policy:?}");
        assert!(grads == cheap_grads, "{policy:?}: the gradients differ");
        // Per layer and token: two norms' outputs of the width and the GELU's output of four
        // times it, in the products' dtype.
        let size = if policy.is_some() { 2 } else { 4 };
        let saved = (config.layers * 64 * 6 * config.width * size) as u64;
        assert!(
            kept >= cheap_kept + saved,
            "{policy:?}: {kept} against {cheap_kept} + {saved}"
        );
    }
}

#[test]
fn a_tiled_mlp_gives_the_recomputed_step_and_peaks_lower() {
    // GPT-2's MLP and a wide SwiGLU one, over 4 x 32 rows of tokens in tiles of 16.
    let wide_llama = GptConfig {
        context: 32,
        ..common::small_llama(32, 8, 512)
    };
    let gpt2 = GptConfig {
        vocab: 11,
        context: 32,
        width: 64,
        heads: 4,
        layers: 2,
        dropout: 0.1,
        tie_embeddings: false,
        family: Family::Gpt2,
    };
    for config in [gpt2, wide_llama] {
        let device = device();
        let ids: Vec<u32> = (0..4 * 32).map(|i| (i * 7 % 11) as u32).collect();
        let targets: Vec<u32> = ids.iter().map(|&i| (i + 1) % 11).collect();
        let ids = Tensor::from_host(&device, [4, 32], &ids).unwrap();
        let targets = Tensor::from_host(&device, [128], &targets).unwrap();
        let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 5), config).unwrap();
        // Dropout draws a mask per tile where the untiled MLP draws one: compare without it.
        gpt.set_training(false);
        let mut run = |recompute: Recompute| {
            gpt.set_recompute(recompute);
            device.allocator().with(|a| a.reset_peak());
            let (loss, grads, _) = step(&gpt, &ids, &targets);
            (loss, grads, device.allocator().stats().peak_in_use)
        };
        let (loss, grads, peak) = run(Recompute::Blocks);
        let (tiled_loss, tiled_grads, tiled_peak) = run(Recompute::BlocksTiledMlp { rows: 16 });
        let close = |a: &[f64], b: &[f64]| {
            a.iter()
                .zip(b)
                .all(|(x, y)| (x - y).abs() <= 1e-5 * (1.0 + x.abs().max(y.abs())))
        };
        assert!(close(&loss, &tiled_loss), "{loss:?} against {tiled_loss:?}");
        for (g, t) in grads.iter().zip(&tiled_grads) {
            assert!(close(g, t), "the gradients differ");
        }
        // The untiled MLP holds its intermediate for all 128 rows, the tiled for 16.
        assert!(tiled_peak < peak, "tiled {tiled_peak} against {peak} bytes");
    }
}

#[test]
fn a_tiled_mlp_in_recomputed_blocks_draws_its_dropout_masks_again_the_same() {
    let device = device();
    let config = GptConfig {
        vocab: 11,
        context: 32,
        width: 32,
        heads: 4,
        layers: 2,
        dropout: 0.2,
        tie_embeddings: false,
        family: Family::Gpt2,
    };
    let ids: Vec<u32> = (0..2 * 32).map(|i| (i * 5 % 11) as u32).collect();
    let targets: Vec<u32> = ids.iter().map(|&i| (i + 3) % 11).collect();
    let ids = Tensor::from_host(&device, [2, 32], &ids).unwrap();
    let targets = Tensor::from_host(&device, [64], &targets).unwrap();
    let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 9), config).unwrap();
    let start = gpt.dropout_counter().get();
    // Tiles in blocks that keep their activations: each tile draws its masks once.
    for block in &mut gpt.blocks {
        block.set_mlp_tile(Some(24));
    }
    let (loss, grads, _) = step(&gpt, &ids, &targets);
    let drawn = gpt.dropout_counter().get() - start;
    gpt.dropout_counter().set(start);
    gpt.set_recompute(Recompute::BlocksTiledMlp { rows: 24 });
    let (tiled_loss, tiled_grads, _) = step(&gpt, &ids, &targets);
    assert_eq!(loss, tiled_loss);
    assert!(grads == tiled_grads, "the gradients differ");
    assert_eq!(gpt.dropout_counter().get() - start, drawn);
}

#[test]
fn offloaded_block_inputs_give_the_same_step_bit_for_bit_and_live_on_the_host() {
    let (device, host) = (device(), device());
    let config = GptConfig {
        context: 32,
        ..common::small_llama(32, 8, 96)
    };
    let ids: Vec<u32> = (0..2 * 32).map(|i| (i * 7 % 11) as u32).collect();
    let targets: Vec<u32> = ids.iter().map(|&i| (i + 1) % 11).collect();
    let ids = Tensor::from_host(&device, [2, 32], &ids).unwrap();
    let targets = Tensor::from_host(&device, [64], &targets).unwrap();
    let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 5), config).unwrap();
    for (recompute, policy) in [
        (Recompute::Blocks, None),
        (Recompute::BlocksTiledMlp { rows: 24 }, Some(DType::BF16)),
    ] {
        let _policy = policy.map(autocast);
        gpt.set_recompute(recompute);
        gpt.set_offload_activations(None);
        let (loss, grads, kept) = step(&gpt, &ids, &targets);
        gpt.set_offload_activations(Some(host.clone()));
        let on_host = || host.allocator().stats().in_use;
        let (host_loss, host_grads, host_kept) = common::recorded_step(&gpt, &device, || {
            let logits = gpt.forward(&ids)?;
            // Each block's input, [2, 32, 32] f32, waits on the host.
            assert_eq!(on_host(), (config.layers * 2 * 32 * 32 * 4) as u64);
            Ok(logits.reshape([64, 11])?.cross_entropy(&targets, None)?)
        });
        assert_eq!(loss, host_loss, "{recompute:?}");
        assert!(grads == host_grads, "{recompute:?}: the gradients differ");
        // The device keeps the blocks' inputs no longer: two of [2, 32, 32] f32.
        assert_eq!(kept - host_kept, (config.layers * 2 * 32 * 32 * 4) as u64);
        assert_eq!(on_host(), 0, "the backward pass frees what it fetched");
    }
}

#[test]
fn streamed_block_weights_give_the_same_step_bit_for_bit_and_live_on_the_host() {
    let (device, host) = (device(), device());
    let config = GptConfig {
        context: 32,
        ..common::small_llama(32, 8, 96)
    };
    let ids: Vec<u32> = (0..2 * 32).map(|i| (i * 5 % 11) as u32).collect();
    let targets: Vec<u32> = ids.iter().map(|&i| (i + 3) % 11).collect();
    let ids = Tensor::from_host(&device, [2, 32], &ids).unwrap();
    let targets = Tensor::from_host(&device, [64], &targets).unwrap();
    let weights = |d: &Device| {
        let tags = d.allocator().stats().tags;
        let weights = tags
            .iter()
            .filter(|u| u.tag == headroom_alloc::Tag::WEIGHTS);
        weights.map(|u| u.live).sum::<u64>()
    };
    let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 5), config).unwrap();
    let all = weights(&device);
    let init = &mut Initializer::new(&device, DType::F32, 5);
    let mut streamed = Gpt::new_offloaded(init, config, &host).unwrap();
    let block_bytes: u64 = streamed
        .blocks
        .iter()
        .flat_map(|b| b.parameters())
        .map(|p| (p.array().buffer().bytes() as u64).next_multiple_of(GRANULE))
        .sum();
    // The blocks' weights were drawn on the host alone, and are the same.
    assert_eq!(weights(&host), block_bytes);
    assert_eq!(weights(&device), 2 * all - block_bytes);
    let values = |g: &Gpt| {
        g.parameters()
            .iter()
            .map(|p| p.to_f64().unwrap())
            .collect::<Vec<_>>()
    };
    assert!(values(&gpt) == values(&streamed), "the weights differ");
    for (recompute, policy, activations) in [
        (Recompute::Blocks, None, None),
        (
            Recompute::BlocksTiledMlp { rows: 24 },
            Some(DType::BF16),
            Some(host.clone()),
        ),
    ] {
        let _policy = policy.map(autocast);
        gpt.set_recompute(recompute);
        streamed.set_recompute(recompute);
        streamed.set_offload_activations(activations);
        let (loss, grads, _) = step(&gpt, &ids, &targets);
        let (streamed_loss, streamed_grads, _) = step(&streamed, &ids, &targets);
        assert_eq!(loss, streamed_loss, "{recompute:?}");
        assert!(
            grads == streamed_grads,
            "{recompute:?}: the gradients differ"
        );
        // Nothing fetched outlives the step.
        assert_eq!(weights(&device), 2 * all - block_bytes, "{recompute:?}");
    }
    // Generation streams the blocks too.
    let mut cache = gpt.kv_cache(2);
    let mut streamed_cache = streamed.kv_cache(2);
    let prompt = ids.narrow(1, 0, 5).unwrap();
    let plain = gpt
        .forward_cached(&prompt, &mut cache)
        .unwrap()
        .to_f64()
        .unwrap();
    let fetched = streamed
        .forward_cached(&prompt, &mut streamed_cache)
        .unwrap();
    assert_eq!(plain, fetched.to_f64().unwrap());
    // And back on the device, the blocks' weights leave the host.
    let tensors = |d: &Device| {
        let tags = d.allocator().stats().tags;
        let weights = tags
            .iter()
            .filter(|u| u.tag == headroom_alloc::Tag::WEIGHTS);
        weights.map(|u| u.live_allocations).sum::<u64>()
    };
    let (before, moved) = (tensors(&device), tensors(&host));
    streamed.set_offload_weights(None).unwrap();
    assert_eq!((weights(&host), tensors(&host)), (0, 0));
    assert_eq!(tensors(&device), before + moved);
    assert!(values(&gpt) == values(&streamed), "the weights differ");
}

#[test]
fn a_streamed_block_holds_two_blocks_of_weights_on_the_device_at_a_time() {
    let (device, host) = (device(), device());
    let config = GptConfig {
        layers: 6,
        ..common::small_llama(64, 16, 192)
    };
    let ids = Tensor::from_host(&device, [1, 8], &[1u32, 2, 3, 4, 5, 6, 7, 8]).unwrap();
    let targets = Tensor::from_host(&device, [8], &[2u32, 3, 4, 5, 6, 7, 8, 9]).unwrap();
    let peak = |streamed: bool| {
        let init = &mut Initializer::new(&device, DType::F32, 1);
        let gpt = match streamed {
            true => Gpt::new_offloaded(init, config, &host).unwrap(),
            false => Gpt::new(init, config).unwrap(),
        };
        let mut gpt = gpt;
        gpt.set_recompute(Recompute::Blocks);
        device.allocator().with(|a| a.reset_peak());
        let before = device.allocator().stats().in_use;
        step(&gpt, &ids, &targets);
        device.allocator().stats().peak_in_use - before
    };
    let block: u64 = {
        let gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 1), config).unwrap();
        gpt.blocks[0]
            .parameters()
            .iter()
            .map(|p| p.numel() as u64 * 4)
            .sum()
    };
    let (plain, streamed) = (peak(false), peak(true));
    // The plain step's gradients of all six blocks (its weights are there before it starts)
    // against the streamed step's two blocks' weights (one running, one fetched ahead) and
    // one block's gradient at a time: at least two blocks' weights less.
    assert!(
        plain >= streamed + 2 * block,
        "plain {plain}, streamed {streamed}, block {block}"
    );
}

/// A module that notes, each time it runs, how many weights' arrays its device holds: a dense
/// linear layer and one stored quantized.
#[derive(Debug, Clone)]
struct Probe {
    dense: Linear,
    quantized: Linear,
    seen: Arc<Mutex<Vec<u64>>>,
}

impl Module for Probe {
    fn forward(&self, x: &Tensor) -> headroom_nn::Result<Tensor> {
        let tags = x.device().allocator().stats().tags;
        let weights = tags
            .iter()
            .filter(|u| u.tag == headroom_alloc::Tag::WEIGHTS);
        let arrays = weights.map(|u| u.live_allocations).sum();
        self.seen.lock().unwrap().push(arrays);
        self.quantized.forward(&self.dense.forward(x)?)
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        self.dense.visit(f);
        self.quantized.visit(f);
    }

    fn visit_mut(
        &mut self,
        f: &mut dyn FnMut(&str, &mut Tensor) -> headroom_nn::Result<()>,
    ) -> headroom_nn::Result<()> {
        self.dense.visit_mut(f)?;
        self.quantized.visit_mut(f)
    }

    fn visit_quantized_mut(
        &mut self,
        f: &mut dyn FnMut(&mut Quantized) -> headroom_nn::Result<()>,
    ) -> headroom_nn::Result<()> {
        self.quantized.visit_quantized_mut(f)
    }
}

#[test]
fn streamed_modules_fetch_the_weights_of_the_one_that_runs_next_while_they_run() {
    let (device, host) = (device(), device());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let init = &mut Initializer::new(&host, DType::F32, 1);
    let probes: Vec<Probe> = (0..3)
        .map(|_| {
            init.set_quantize(None);
            let dense = Linear::new(init, 64, 64, true).unwrap();
            init.set_quantize(Some(QuantFormat::Nf4));
            let quantized = Linear::new(init, 64, 64, false).unwrap();
            let seen = Arc::clone(&seen);
            Probe {
                dense,
                quantized,
                seen,
            }
        })
        .collect();
    let parameters: Vec<Tensor> = probes.iter().flat_map(|p| p.parameters()).collect();
    let x = Tensor::from_f64(&device, [2, 64], DType::F32, &[0.25; 128]).unwrap();
    let counter = DropoutCounter::default();
    let weights = || {
        let tags = device.allocator().stats().tags;
        let weights = tags
            .iter()
            .filter(|u| u.tag == headroom_alloc::Tag::WEIGHTS);
        weights.map(|u| u.live_allocations).sum::<u64>()
    };
    // One module's arrays: the dense weight and bias, the codes and the three of the scales.
    let one = {
        let _fetched = headroom_nn::fetched(&probes[0], &device).unwrap();
        weights()
    };
    assert_eq!(one, 6);
    for ahead in [true, false] {
        seen.lock().unwrap().clear();
        let tape = Tape::new();
        let pass = Streamed::pass(&probes, ahead);
        let y = tape
            .record(|| {
                let mut x = x.clone();
                for module in &pass {
                    x = recomputed_streamed(module, &counter, &x, None)?;
                }
                Ok::<_, headroom_nn::Error>(x.sum_all()?)
            })
            .unwrap();
        drop(pass);
        let grads = tape
            .gradient(&y, &parameters.iter().collect::<Vec<_>>())
            .unwrap();
        assert_eq!(grads.len(), parameters.len());
        // Fetched ahead: forward, the first two modules run beside the next one's weights,
        // the last alone; backward, in the reverse order, the last two beside the earlier
        // one's, the first alone. Else each module's alone.
        let seen = seen.lock().unwrap().clone();
        let two = if ahead { 2 * one } else { one };
        assert_eq!(seen, [two, two, one, two, two, one], "ahead {ahead}");
        assert_eq!(weights(), 0, "ahead {ahead}: nothing fetched stays");
    }
}

#[test]
fn a_placement_given_whole_places_the_model_as_its_parts_do() {
    let (device, host) = (device(), device());
    let config = GptConfig {
        context: 16,
        ..common::small_llama(32, 8, 96)
    };
    let ids: Vec<u32> = (0..2 * 16).map(|i| (i * 5 % 11) as u32).collect();
    let targets: Vec<u32> = ids.iter().map(|&i| (i + 3) % 11).collect();
    let ids = Tensor::from_host(&device, [2, 16], &ids).unwrap();
    let targets = Tensor::from_host(&device, [32], &targets).unwrap();
    let new = || Gpt::new(&mut Initializer::new(&device, DType::F32, 5), config).unwrap();
    let mut by_parts = new();
    by_parts.set_recompute(Recompute::BlocksTiledMlp { rows: 8 });
    by_parts.set_offload_activations(Some(host.clone()));
    by_parts.set_offload_weights(Some(host.clone())).unwrap();
    by_parts.set_fetch_ahead(false);
    by_parts.set_head_chunk(Some(5));
    let mut whole = new();
    whole
        .set_placement(Placement {
            recompute: Recompute::BlocksTiledMlp { rows: 8 },
            offload_activations: Some(host.clone()),
            offload_weights: Some(host.clone()),
            fetch_ahead: false,
            head_chunk: Some(5),
            shards: None,
        })
        .unwrap();
    assert!(whole.blocks.iter().all(|b| b.mlp_tile() == Some(8)));
    let on_host = |gpt: &Gpt| gpt.blocks[0].attn.qkv.weight.device().same(&host);
    assert!(on_host(&whole) && on_host(&by_parts));
    // The same loss and gradients (the bytes kept differ by what a device's first step sets up).
    let (a, b) = (
        step(&whole, &ids, &targets),
        step(&by_parts, &ids, &targets),
    );
    assert!(a.0 == b.0 && a.1 == b.1, "the steps differ");
    // The default placement brings the blocks back and runs their MLPs whole.
    whole.set_placement(Placement::for_vocab(11)).unwrap();
    assert!(!on_host(&whole) && whole.blocks.iter().all(|b| b.mlp_tile().is_none()));
    assert_eq!(whole.head_chunk(), Placement::for_vocab(11).head_chunk);
}
