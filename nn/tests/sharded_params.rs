//! Parameters sharded over ranks (ZeRO-3): three ranks (threads), each holding a third of
//! every tensor and a third of the batch, get the chunks of the gradient one process gets on
//! the whole batch, with blocks gathered as they run or gathered again in a recomputation.

mod common;

use std::thread;

use common::small_llama;
use headroom_autograd::{Tape, Tensor};
use headroom_collectives::{SharedWorld, Threads};
use headroom_kernels::{Array, DType, Device};
use headroom_nn::{Family, Gpt, GptConfig, Initializer, Module, Recompute, chunk_of};

const RANKS: usize = 3;
const T: usize = 6;

fn gpt2() -> GptConfig {
    GptConfig {
        vocab: 11,
        context: 8,
        width: 10,
        heads: 2,
        layers: 2,
        dropout: 0.0,
        tie_embeddings: true,
        family: Family::Gpt2,
    }
}

/// Sample `i`'s ids and targets.
fn sample(i: usize) -> (Vec<u32>, Vec<u32>) {
    let ids: Vec<u32> = (0..T).map(|t| ((i * 7 + t * 3) % 11) as u32).collect();
    let targets: Vec<u32> = (0..T).map(|t| ((i * 5 + t * 2 + 1) % 11) as u32).collect();
    (ids, targets)
}

/// The loss of `samples` (their mean over tokens, times `weight`) and every tensor's gradient,
/// in the model's order.
fn step(gpt: &Gpt, device: &Device, samples: &[usize], weight: f64) -> (f64, Vec<Array>) {
    let (mut ids, mut targets) = (Vec::new(), Vec::new());
    for &i in samples {
        let (a, b) = sample(i);
        ids.extend(a);
        targets.extend(b);
    }
    let b = samples.len();
    let ids = Tensor::from_host(device, [b, T], &ids).unwrap();
    let targets = Tensor::from_host(device, [b, T], &targets).unwrap();
    let tape = Tape::new();
    let loss = tape
        .record(|| {
            gpt.loss(&ids, &targets, None)?
                .scale(weight)
                .map_err(Into::into)
        })
        .map_err(|e: headroom_nn::Error| e)
        .unwrap();
    let params = gpt.parameters();
    let grads = tape
        .gradient(&loss, &params.iter().collect::<Vec<_>>())
        .unwrap();
    let grads = params
        .iter()
        .map(|p| grads.get(p).unwrap().clone())
        .collect();
    (loss.to_f64().unwrap()[0], grads)
}

fn model(device: &Device, config: GptConfig, recompute: Recompute) -> Gpt {
    let mut gpt = Gpt::new(&mut Initializer::new(device, DType::F32, 7), config).unwrap();
    gpt.set_recompute(recompute);
    gpt
}

fn check(name: &str, config: GptConfig, recompute: Recompute) {
    let device = common::device();
    let whole = model(&device, config, recompute);
    let (loss, grads) = step(&whole, &device, &[0, 1, 2], 1.0);
    let devices: Vec<Device> = (0..RANKS).map(|_| common::device()).collect();
    let ranks = Threads::world(&devices);
    let results: Vec<(f64, Vec<Array>, Vec<usize>)> = thread::scope(|s| {
        let handles: Vec<_> = (ranks.into_iter().zip(&devices).enumerate())
            .map(|(rank, (world, device))| {
                s.spawn(move || {
                    let world = SharedWorld::new(Box::new(world));
                    let mut gpt = model(device, config, recompute);
                    gpt.shard_params(&world).unwrap();
                    let (loss, grads) = step(&gpt, device, &[rank], 1.0 / RANKS as f64);
                    let dims = gpt.parameters().iter().map(Tensor::numel).collect();
                    (loss, grads, dims)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let sharded: f64 = results.iter().map(|r| r.0).sum();
    assert!(
        (sharded - loss).abs() < 1e-5 * loss.abs(),
        "{name}: {sharded} vs {loss}"
    );
    for (rank, (_, chunks, sizes)) in results.iter().enumerate() {
        assert_eq!(chunks.len(), grads.len(), "{name}");
        for (i, (chunk, whole)) in chunks.iter().zip(&grads).enumerate() {
            assert_eq!(
                sizes[i],
                whole.numel().div_ceil(RANKS),
                "{name}: tensor {i}"
            );
            let want = chunk_of(whole, rank, RANKS).unwrap().to_f64().unwrap();
            let got = chunk.to_f64().unwrap();
            let scale = want.iter().fold(1e-3f64, |m, v| m.max(v.abs()));
            for (g, w) in got.iter().zip(&want) {
                assert!(
                    (g - w).abs() <= 1e-5 * scale,
                    "{name}: tensor {i} rank {rank}: {g} vs {w}"
                );
            }
        }
    }
}

#[test]
fn three_ranks_of_a_sharded_gpt2_get_the_chunks_of_the_whole_gradient() {
    check("gpt2", gpt2(), Recompute::None);
    check("gpt2 recomputed", gpt2(), Recompute::Blocks);
}

#[test]
fn three_ranks_of_a_sharded_llama_get_the_chunks_of_the_whole_gradient() {
    let llama = small_llama(16, 4, 24);
    check("llama", llama, Recompute::None);
    check("llama recomputed", llama, Recompute::Blocks);
}

#[test]
fn a_decoder_is_sharded_once_and_not_with_streamed_weights() {
    let device = common::device();
    let world = SharedWorld::new(Box::new(headroom_collectives::Solo::new(&device)));
    let mut gpt = model(&device, gpt2(), Recompute::None);
    gpt.shard_params(&world).unwrap();
    let err = gpt.shard_params(&world).unwrap_err().to_string();
    assert!(err.contains("sharded already"), "{err}");
    let host = Device::cpu(headroom_kernels::DeviceConfig::new(64 << 20)).unwrap();
    let mut streamed = model(&device, gpt2(), Recompute::None);
    streamed.set_offload_weights(Some(host)).unwrap();
    let err = streamed.shard_params(&world).unwrap_err().to_string();
    assert!(err.contains("host tier"), "{err}");
}

/// Blocks that are not recomputed are gathered as they run, and the tape holds none of their
/// whole weights until the backward pass: each product's rule gathers its weight again (FSDP's
/// resharding after the forward pass). The embedding, read again by the tied head, stays whole.
#[test]
fn the_tape_holds_no_whole_block_weight_between_the_passes() {
    let device = common::device();
    let world = SharedWorld::new(Box::new(headroom_collectives::Solo::new(&device)));
    for (name, config) in [("gpt2", gpt2()), ("llama", small_llama(16, 4, 24))] {
        let mut gpt = model(&device, config, Recompute::None);
        gpt.shard_params(&world).unwrap();
        let (ids, targets) = sample(0);
        let ids = Tensor::from_host(&device, [1, T], &ids).unwrap();
        let targets = Tensor::from_host(&device, [1, T], &targets).unwrap();
        let tape = Tape::new();
        let loss = tape.record(|| gpt.loss(&ids, &targets, None)).unwrap();
        let embedding = [config.vocab, config.width];
        let saved = tape.saved();
        let whole_weights: Vec<_> = (saved.ops.iter())
            .flat_map(|op| op.arrays.iter().map(move |a| (op.op, a)))
            .filter(|(_, a)| a.tag == headroom_alloc::Tag::WEIGHTS && a.shape.rank() == 2)
            .filter(|(_, a)| a.shape.dims() != embedding)
            .map(|(op, a)| format!("{op}: {}", a.shape))
            .collect();
        assert!(whole_weights.is_empty(), "{name}: {whole_weights:?}");
        let params = gpt.parameters();
        let grads = tape
            .gradient(&loss, &params.iter().collect::<Vec<_>>())
            .unwrap();
        assert!(params.iter().all(|p| grads.get(p).is_some()), "{name}");
    }
}

/// Greedy generation over a sharded decoder gathers each block as it runs: every rank gets the
/// logits of the whole model, token after token.
#[test]
fn cached_generation_over_shards_gives_the_whole_models_logits() {
    let device = common::device();
    let whole = model(&device, small_llama(16, 4, 24), Recompute::None);
    let logits = |gpt: &Gpt, device: &Device| -> Vec<f64> {
        let mut cache = gpt.kv_cache(1);
        let prompt = Tensor::from_host(device, [1, 3], &[1u32, 2, 3]).unwrap();
        let mut out = gpt
            .forward_cached(&prompt, &mut cache)
            .unwrap()
            .to_f64()
            .unwrap();
        let next = Tensor::from_host(device, [1, 1], &[4u32]).unwrap();
        out.extend(
            gpt.forward_cached(&next, &mut cache)
                .unwrap()
                .to_f64()
                .unwrap(),
        );
        out
    };
    let want = logits(&whole, &device);
    let devices: Vec<Device> = (0..RANKS).map(|_| common::device()).collect();
    let ranks = Threads::world(&devices);
    thread::scope(|s| {
        let handles: Vec<_> = (ranks.into_iter().zip(&devices))
            .map(|(world, device)| {
                s.spawn(move || {
                    let mut gpt = model(device, small_llama(16, 4, 24), Recompute::None);
                    gpt.shard_params(&SharedWorld::new(Box::new(world)))
                        .unwrap();
                    logits(&gpt, device)
                })
            })
            .collect();
        for handle in handles {
            assert_eq!(handle.join().unwrap(), want);
        }
    });
}
