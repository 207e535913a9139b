//! Parameters sharded over ranks (ZeRO-3): three ranks (threads), each holding a third of
//! every tensor and a third of the batch, get the chunks of the gradient one process gets on
//! the whole batch, with blocks gathered as they run or gathered again in a recomputation.

mod common;

use std::thread;

use common::small_llama;
use headroom_alloc::Tag;
use headroom_autograd::{Tape, Tensor, autocast};
use headroom_collectives::Collective;
use headroom_collectives::{SharedWorld, Threads};
use headroom_kernels::ops::quant::QuantFormat;
use headroom_kernels::{Array, DType, Device};
use headroom_nn::checkpoint::{self, HostArray, HostState};
use headroom_nn::lora::{self, LoraConfig};
use headroom_nn::{Family, Gpt, GptConfig, Initializer, Module, Recompute, chunk_of, hf};

const RANKS: usize = 3;
const T: usize = 6;
/// The target the losses ignore (padding), which some samples' rows hold.
const IGNORED: u32 = 3;

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

/// Sample `i`'s ids and targets, spread over a vocabulary of `vocab`.
fn sample(i: usize, vocab: usize) -> (Vec<u32>, Vec<u32>) {
    let spread = |x: usize| ((x * vocab / 11) % vocab) as u32;
    let ids = (0..T).map(|t| spread(i * 7 + t * 3)).collect();
    let targets = (0..T).map(|t| spread(i * 5 + t * 2 + 1)).collect();
    (ids, targets)
}

/// The rows of `samples` whose target is not [`IGNORED`].
fn counted(samples: &[usize], vocab: usize) -> f64 {
    let rows = samples.iter().flat_map(|&i| sample(i, vocab).1);
    rows.filter(|&t| t != IGNORED).count() as f64
}

/// The loss of `samples` (their mean over the tokens whose target is not [`IGNORED`], times
/// `weight`) and every tensor's gradient,
/// in the model's order.
fn step(gpt: &Gpt, device: &Device, samples: &[usize], weight: f64) -> (f64, Vec<Array>) {
    let (mut ids, mut targets) = (Vec::new(), Vec::new());
    for &i in samples {
        let (a, b) = sample(i, gpt.config().vocab);
        ids.extend(a);
        targets.extend(b);
    }
    let b = samples.len();
    let ids = Tensor::from_host(device, [b, T], &ids).unwrap();
    let targets = Tensor::from_host(device, [b, T], &targets).unwrap();
    let tape = Tape::new();
    let loss = tape
        .record(|| {
            gpt.loss(&ids, &targets, Some(IGNORED))?
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
    check_chunked(name, config, recompute, None);
}

/// [`check`], the fused head running `head_chunk` rows at a time where given.
fn check_chunked(name: &str, config: GptConfig, recompute: Recompute, head_chunk: Option<usize>) {
    check_in(name, config, recompute, (head_chunk, None));
}

/// [`check_chunked`], every pass under autocast to `half` where given, the whole model's too.
fn check_in(
    name: &str,
    config: GptConfig,
    recompute: Recompute,
    (head_chunk, half): (Option<usize>, Option<DType>),
) {
    let build = |device: &Device, world: Option<&SharedWorld>| {
        let mut gpt = model(device, config, recompute);
        if head_chunk.is_some() {
            gpt.set_head_chunk(head_chunk);
        }
        if let Some(world) = world {
            gpt.shard_params(world).unwrap();
        }
        gpt
    };
    check_built(name, &build, half);
}

/// Three ranks of the decoder `build` gives sharded over them (whole without a world), each on
/// a third of the batch, get the loss and the chunks of every parameter's gradient the whole
/// decoder gets on the whole batch; every pass under autocast to `half` where given.
fn check_built(
    name: &str,
    build: &(dyn Fn(&Device, Option<&SharedWorld>) -> Gpt + Sync),
    half: Option<DType>,
) {
    let device = common::device();
    let whole = build(&device, None);
    let vocab = whole.config().vocab;
    let all: Vec<usize> = (0..RANKS).collect();
    let (loss, grads) = {
        let _half = half.map(autocast);
        step(&whole, &device, &all, 1.0)
    };
    let total = counted(&all, vocab);
    // bf16 products round differently over a rank's rows than over the whole batch's.
    let tolerance = if half.is_some() { 2e-2 } else { 1e-5 };
    let devices: Vec<Device> = (0..RANKS).map(|_| common::device()).collect();
    let ranks = Threads::world(&devices);
    let results: Vec<(f64, Vec<Array>, Vec<usize>)> = thread::scope(|s| {
        let handles: Vec<_> = (ranks.into_iter().zip(&devices).enumerate())
            .map(|(rank, (world, device))| {
                s.spawn(move || {
                    let world = SharedWorld::new(Box::new(world));
                    let gpt = build(device, Some(&world));
                    let _half = half.map(autocast);
                    // Each rank's mean weighs as its share of the rows counted.
                    let share = counted(&[rank], vocab) / total;
                    let (loss, grads) = step(&gpt, device, &[rank], share);
                    let dims = gpt.parameters().iter().map(Tensor::numel).collect();
                    (loss, grads, dims)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let sharded: f64 = results.iter().map(|r| r.0).sum();
    assert!(
        (sharded - loss).abs() < tolerance * loss.abs(),
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
                    (g - w).abs() <= tolerance * scale,
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
fn under_autocast_the_blocks_matrices_are_gathered_in_bf16_and_reduced_in_f32() {
    // The gradients of a sharded model whose blocks' weights move in bf16 are the whole model's
    // under the same autocast, to f32 rounding of the reduction order.
    let llama = GptConfig {
        vocab: 66,
        ..small_llama(16, 4, 24)
    };
    for recompute in [Recompute::None, Recompute::CheapUp, Recompute::Blocks] {
        let name = format!("llama in bf16, {recompute:?}");
        check_in(&name, llama, recompute, (None, Some(DType::BF16)));
    }
    check_in(
        "gpt2 in bf16",
        gpt2(),
        Recompute::None,
        (None, Some(DType::BF16)),
    );
}

#[test]
fn a_vocabulary_larger_than_the_ids_gathered_gets_the_token_embeddings_chunks_too() {
    // 64 rows against the 18 ids of three ranks: each rank forms its own rows' gradient from
    // the gathered ids (the chunks end mid-row), where the small vocabularies above reduce the
    // whole table's; tied to the head and not.
    let tied = GptConfig {
        vocab: 64,
        ..gpt2()
    };
    check("gpt2, 64 rows", tied, Recompute::None);
    let untied = GptConfig {
        vocab: 64,
        ..small_llama(16, 4, 24)
    };
    check("llama, 64 rows", untied, Recompute::Blocks);
}

#[test]
fn a_vocabulary_the_ranks_share_by_whole_rows_runs_the_head_on_slices_of_it() {
    // 66 rows over three ranks: each rank's head spans its 22 rows of the vocabulary for every
    // rank's tokens, neither the whole weight nor its whole gradient formed.
    let tied = GptConfig {
        vocab: 66,
        ..gpt2()
    };
    check("gpt2, 66 rows", tied, Recompute::None);
    let untied = GptConfig {
        vocab: 66,
        ..small_llama(16, 4, 24)
    };
    check("llama, 66 rows", untied, Recompute::Blocks);
    // Several chunks a rank: a chunk of one row of the whole vocabulary is three of a slice,
    // two chunks of each rank's six rows.
    check_chunked("gpt2, 66 rows in chunks", tied, Recompute::None, Some(1));
}

#[test]
fn kept_gathered_copies_give_the_same_gradient_chunks_and_stay_until_released() {
    for (name, config) in [("gpt2", gpt2()), ("llama", small_llama(16, 4, 24))] {
        for recompute in [Recompute::None, Recompute::Blocks] {
            let build = |device: &Device, world: Option<&SharedWorld>| {
                let mut gpt = model(device, config, recompute);
                if let Some(world) = world {
                    gpt.shard_params(world).unwrap();
                    gpt.keep_gathered().unwrap();
                }
                gpt
            };
            check_built(&format!("{name} {recompute:?} kept"), &build, None);
        }
    }
    // The copies outlive the step's tape and gradients, and go when released.
    let device = common::device();
    let world = SharedWorld::new(Box::new(headroom_collectives::Solo::new(&device)));
    let mut gpt = model(&device, gpt2(), Recompute::None);
    gpt.shard_params(&world).unwrap();
    gpt.keep_gathered().unwrap();
    let chunks = device.allocator().stats().in_use;
    drop(step(&gpt, &device, &[0, 1], 1.0));
    let kept = device.allocator().stats().in_use;
    assert!(kept > chunks, "{kept} B kept, {chunks} B of chunks");
    gpt.param_shards().unwrap().release_gathered();
    assert_eq!(device.allocator().stats().in_use, chunks);
    let err = model(&device, gpt2(), Recompute::None)
        .keep_gathered()
        .unwrap_err();
    assert!(err.to_string().contains("not sharded"), "{err}");
}

/// Runs `f` on each of `ranks` ranks (threads), each with its world and its own device.
fn on_ranks(ranks: usize, f: impl Fn(SharedWorld, &Device) + Sync) {
    let devices: Vec<Device> = (0..ranks).map(|_| common::device()).collect();
    let worlds = Threads::world(&devices);
    thread::scope(|s| {
        for (world, device) in worlds.into_iter().zip(&devices) {
            let f = &f;
            s.spawn(move || f(SharedWorld::new(Box::new(world)), device));
        }
    });
}

/// A decoder of `config` whose blocks' weights (and untied token embedding) are stored in
/// `format` under rank-2 adapters whose `B` is drawn away from zero: drawn sharded over
/// `world` where `drawn`, cut after it is built otherwise, whole without a world.
fn qlora(
    device: &Device,
    (config, recompute, format): (GptConfig, Recompute, QuantFormat),
    (world, drawn): (Option<&SharedWorld>, bool),
) -> Gpt {
    let mut init = Initializer::new(device, DType::F32, 3);
    init.set_quantize(Some(format));
    let mut gpt = match world.filter(|_| drawn) {
        Some(world) => Gpt::new_sharded(&mut init, config, world).unwrap(),
        None => Gpt::new(&mut init, config).unwrap(),
    };
    gpt.set_recompute(recompute);
    let adapters = LoraConfig {
        rank: 2,
        alpha: 3.0,
        ..LoraConfig::default()
    };
    lora::attach(
        &mut gpt,
        &adapters,
        &mut Initializer::new(device, DType::F32, 4),
    )
    .unwrap();
    if let Some(world) = world.filter(|_| !drawn) {
        gpt.shard_params(world).unwrap();
    }
    // B of every adapter from its whole values, cut where the decoder is sharded.
    let shards = gpt.param_shards().cloned();
    gpt.visit_mut(&mut |name, t| {
        if !name.ends_with("lora_B.weight") {
            return Ok(());
        }
        let whole = shards.as_ref().and_then(|s| s.whole_shape(name));
        let whole = whole.unwrap_or(t.shape()).clone();
        let values: Vec<f64> = (0..whole.numel())
            .map(|i| ((i % 7) as f64 - 3.0) / 20.0)
            .collect();
        let mut b = Array::from_f64(t.device(), whole, DType::F32, &values)?;
        if let Some(shards) = &shards {
            let world = shards.world();
            b = chunk_of(&b, world.rank(), world.world_size())?;
        }
        *t = Tensor::variable(b);
        Ok(())
    })
    .unwrap();
    gpt
}

#[test]
fn a_quantized_base_is_sharded_by_blocks_of_codes_and_its_adapters_get_the_whole_gradients_chunks()
{
    let llama = small_llama(64, 16, 96);
    for format in [QuantFormat::Nf4, QuantFormat::Int8] {
        for recompute in [Recompute::None, Recompute::Blocks] {
            for drawn in [false, true] {
                let name = format!("{format} {recompute:?} drawn sharded {drawn}");
                let build = |device: &Device, world: Option<&SharedWorld>| {
                    qlora(device, (llama, recompute, format), (world, drawn))
                };
                check_built(&name, &build, None);
            }
        }
    }
    // Each rank keeps a third of the blocks' codes (32 bytes a block of 64 values) and of
    // their scale codes; the second-level scales, a few bytes, stay whole.
    on_ranks(RANKS, |world, device| {
        let config = (llama, Recompute::None, QuantFormat::Nf4);
        let mut gpt = qlora(device, config, (Some(&world), true));
        let stored = gpt.quantized_weights_mut();
        assert_eq!(stored.len(), 1 + 2 * 5, "the token embedding and 5 a block");
        for (name, chunk) in stored {
            let blocks = chunk.numel().div_ceil(64).div_ceil(RANKS);
            let arrays = chunk.arrays();
            assert!(chunk.is_chunk(), "{name}");
            assert_eq!(arrays[0].numel(), blocks * 32, "{name}");
            assert_eq!(arrays[1].numel(), blocks, "{name}");
        }
    });
}

/// Every tensor's values and every stored weight's arrays of `gpt`, by name.
fn contents(gpt: &mut Gpt) -> Vec<(String, Vec<f64>)> {
    let mut all = Vec::new();
    gpt.visit(&mut |n, t| all.push((n.to_owned(), t.to_f64().unwrap())));
    for (name, stored) in gpt.quantized_weights_mut() {
        for (i, array) in stored.arrays().iter().enumerate() {
            all.push((format!("{name} array {i}"), array.to_f64().unwrap()));
        }
    }
    all
}

#[test]
fn pretrained_weights_load_into_a_decoder_drawn_sharded_as_the_chunks_of_the_whole_loaded_model() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let sources = [
        ("tiny-gpt2", None),
        ("tiny-llama3", None),
        ("tiny-llama3", Some(QuantFormat::Nf4)),
        ("gguf/tiny-llama3.gguf", None),
        ("gguf/tiny-llama3.gguf", Some(QuantFormat::Int8)),
    ];
    for (source, quantize) in sources {
        let path = data.join(source);
        let pretrained = hf::Pretrained::read(&path).unwrap();
        let config = pretrained.gpt_config(0.0);
        let draw = |device: &Device| {
            let mut init = Initializer::new(device, DType::F32, 5);
            init.set_quantize(quantize);
            init
        };
        let name = format!("{source} {quantize:?}");
        on_ranks(RANKS, |world, device| {
            let mut drawn = Gpt::new_sharded(&mut draw(device), config, &world).unwrap();
            pretrained.load(&path, &mut drawn).unwrap();
            let loading_peak = device.allocator().stats().peak_in_use;
            let mut cut = Gpt::new(&mut draw(device), config).unwrap();
            pretrained.load(&path, &mut cut).unwrap();
            let whole_weights = device.allocator().stats().in_use;
            cut.shard_params(&world).unwrap();
            assert_eq!(contents(&mut drawn), contents(&mut cut), "{name}");
            assert!(
                loading_peak < whole_weights,
                "{name}: loading sharded peaked at {loading_peak} B, the whole model \
                 holds {whole_weights} B"
            );
        });
    }
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
        let (ids, targets) = sample(0, 11);
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

#[test]
fn a_decoder_drawn_sharded_holds_the_chunks_of_one_drawn_whole_and_never_the_whole_model() {
    // Both families, tied and untied, learned positions and rotary ones: each rank's chunks
    // drawn part by part equal those cut from the whole model, and the drawing peaks below the
    // whole model's weights.
    let wide = GptConfig {
        vocab: 64,
        layers: 4,
        ..small_llama(16, 4, 24)
    };
    for (name, config) in [("gpt2", gpt2()), ("llama", wide)] {
        on_ranks(RANKS, |world, device| {
            let mut init = Initializer::new(device, DType::F32, 7);
            let drawn = Gpt::new_sharded(&mut init, config, &world).unwrap();
            let drawing_peak = device.allocator().stats().peak_in_use;
            let mut cut = model(device, config, Recompute::None);
            let whole_weights = device.allocator().stats().in_use;
            cut.shard_params(&world).unwrap();
            assert!(
                drawing_peak < whole_weights,
                "{name}: drawing sharded peaked at {drawing_peak} B, the whole model \
                 holds {whole_weights} B"
            );
            let chunks = |gpt: &Gpt| -> Vec<(String, Vec<f64>)> {
                let mut all = Vec::new();
                gpt.visit(&mut |n, t| all.push((n.to_owned(), t.to_f64().unwrap())));
                all
            };
            assert_eq!(chunks(&drawn), chunks(&cut), "{name}");
            let shards = (drawn.param_shards().unwrap(), cut.param_shards().unwrap());
            for (n, _) in chunks(&cut) {
                assert_eq!(shards.0.whole_shape(&n), shards.1.whole_shape(&n), "{n}");
            }
        });
    }
}

/// Every tensor's values by its name.
type Named = Vec<(String, Vec<f64>)>;

#[test]
fn a_checkpoints_whole_copy_goes_to_the_host_one_tensor_at_a_time() {
    // Rank 0 gets every tensor whole in host memory, the others nothing; no rank's device holds
    // more than one whole tensor beside its chunks while they are gathered.
    let config = GptConfig {
        vocab: 64,
        ..small_llama(16, 4, 24)
    };
    let whole = model(&common::device(), config, Recompute::None);
    let mut want = Vec::new();
    whole.visit(&mut |n, t| want.push((n.to_owned(), t.to_f64().unwrap())));
    let largest = want.iter().map(|(_, v)| v.len() * 4).max().unwrap() as u64;
    let devices: Vec<Device> = (0..RANKS).map(|_| common::device()).collect();
    let ranks = Threads::world(&devices);
    let copies: Vec<Option<Named>> = thread::scope(|s| {
        let handles: Vec<_> = (ranks.into_iter().zip(&devices))
            .map(|(world, device)| {
                s.spawn(move || {
                    let world = SharedWorld::new(Box::new(world));
                    let mut init = Initializer::new(device, DType::F32, 7);
                    let gpt = Gpt::new_sharded(&mut init, config, &world).unwrap();
                    let host = common::device();
                    let before = device.allocator().stats().in_use;
                    device.allocator().with(|a| a.reset_peak());
                    let copy = gpt.param_shards().unwrap();
                    let copy = copy.whole_on_first_rank(&gpt, &host).unwrap();
                    let rise = device.allocator().stats().peak_in_use - before;
                    // A whole tensor beside the padded buffer it is gathered into.
                    assert!(rise <= 3 * largest, "{rise} B over {largest} B");
                    copy.map(|c| {
                        let mut all = Vec::new();
                        c.visit(&mut |n, t| {
                            assert!(t.device().same(&host), "{n} is not on the host");
                            all.push((n.to_owned(), t.to_f64().unwrap()));
                        });
                        all
                    })
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(copies[0].as_ref(), Some(&want));
    assert!(copies[1..].iter().all(Option::is_none));
}

/// Saves `config`'s decoder drawn sharded over `ranks` thread ranks, each rank its own file
/// and a state buffer (`{name}.m`, the chunk halved) beside each tensor, as a checkpoint of
/// step `step` indexed at `index`.
fn save_sharded(index: &std::path::Path, config: GptConfig, ranks: usize, step: u64) {
    on_ranks(ranks, |mut world, device| {
        let mut init = Initializer::new(device, DType::F32, 7);
        let gpt = Gpt::new_sharded(&mut init, config, &world).unwrap();
        let halved = |t: &Tensor| {
            let half: Vec<f32> = t
                .to_f64()
                .unwrap()
                .iter()
                .map(|&v| v as f32 / 2.0)
                .collect();
            HostArray::of(&Array::from_host(device, t.shape().clone(), &half).unwrap())
        };
        let buffers = gpt.named_parameters().into_iter();
        let buffers = buffers.map(|(n, t)| (format!("{n}.m"), halved(&t).unwrap()));
        let state = HostState {
            buffers: buffers.collect(),
            steps: step,
        };
        let shards = gpt.param_shards().unwrap();
        let made = checkpoint::save_rank(index, step, (&gpt, shards), &state).unwrap();
        world.barrier().unwrap();
        if world.rank() == 0 {
            made.save(index, step, &Default::default()).unwrap();
        }
    });
}

/// Each of `ranks` ranks (threads) draws a decoder of `config` sharded over them and restores
/// its chunks of `saved`; `check` gets the rank, its decoder and what the restore gave.
fn restore_on_ranks(
    saved: &checkpoint::Checkpoint,
    config: GptConfig,
    ranks: usize,
    check: &(dyn Fn(usize, Gpt, headroom_nn::Result<()>) + Sync),
) {
    on_ranks(ranks, |world, device| {
        let mut init = Initializer::new(device, DType::F32, 99);
        let mut gpt = Gpt::new_sharded(&mut init, config, &world).unwrap();
        let shards = gpt.param_shards().unwrap().clone();
        let restored = saved.restore_model_in_chunks(&mut gpt, &shards);
        check(world.rank(), gpt, restored);
    });
}

/// A checkpoint saved by three ranks, each writing its own chunks: its index gives every
/// tensor and state buffer whole, two ranks restore their chunks of it (from the rank files
/// that hold them), the next checkpoint's index commits it and removes the earlier files, the
/// files of a save that never committed are removed, a rank reads only the files that hold
/// its chunks, and a rank file that is not the one the index names is refused, naming it.
#[test]
fn a_checkpoint_saved_by_three_ranks_restores_whole_and_on_two() {
    let dir = std::env::temp_dir().join(format!("headroom-sharded-ckpt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let index = dir.join("checkpoint.safetensors");
    let config = GptConfig {
        vocab: 64,
        ..small_llama(16, 4, 24)
    };
    save_sharded(&index, config, 3, 4);
    let whole = model(&common::device(), config, Recompute::None);
    let host = common::device();
    let saved = checkpoint::load(&index, &host).unwrap();
    for (name, t) in whole.named_parameters() {
        let got = saved.array(&name, None, Tag::WEIGHTS).unwrap();
        assert_eq!(got.shape(), t.shape(), "{name}");
        assert_eq!(got.to_f64().unwrap(), t.to_f64().unwrap(), "{name}");
        let m = saved
            .array(&format!("optimizer.{name}.m"), None, Tag::WEIGHTS)
            .unwrap();
        let half: Vec<f64> = t.to_f64().unwrap().iter().map(|v| v / 2.0).collect();
        assert_eq!(m.to_f64().unwrap(), half, "{name}");
    }

    // Two ranks read their chunks of what three saved.
    restore_on_ranks(&saved, config, 2, &|rank, gpt, restored| {
        restored.unwrap();
        let mine = gpt.named_parameters().into_iter();
        for ((name, chunk), (_, t)) in mine.zip(whole.named_parameters()) {
            let want = chunk_of(t.array(), rank, 2).unwrap();
            assert_eq!(chunk.to_f64().unwrap(), want.to_f64().unwrap(), "{name}");
        }
    });

    // The next checkpoint commits and removes the files of the one before.
    save_sharded(&index, config, 3, 8);
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let want: Vec<String> = ["checkpoint.safetensors"]
        .into_iter()
        .map(String::from)
        .chain((0..3).map(|r| format!("checkpoint.step-8.rank-{r}-of-3.safetensors")))
        .collect();
    let mut want = want;
    want.sort();
    assert_eq!(files, want);

    // A save stopped before its index leaves files that the next start removes.
    let stray = [
        dir.join("checkpoint.step-9.rank-0-of-3.safetensors"),
        dir.join("checkpoint.step-9.rank-1-of-3.safetensors.tmp-4242"),
    ];
    for path in &stray {
        std::fs::copy(dir.join(&want[1]), path).unwrap();
    }
    assert_eq!(checkpoint::remove_uncommitted(&index).unwrap(), stray);
    checkpoint::load(&index, &host).unwrap();

    // A rank reads only the files that hold its chunks: with the last rank's file damaged,
    // ranks 0 and 1 of three restore theirs, and the last rank's restore names its file.
    let last = dir.join(&want[3]);
    let intact = std::fs::read(&last).unwrap();
    let mut damaged = intact.clone();
    *damaged.last_mut().unwrap() ^= 0x40;
    std::fs::write(&last, &damaged).unwrap();
    let saved = checkpoint::load(&index, &host).unwrap();
    restore_on_ranks(&saved, config, 3, &|rank, _, restored| match rank {
        2 => {
            let err = restored.unwrap_err().to_string();
            assert!(err.contains(want[3].as_str()), "{err}");
        }
        _ => restored.unwrap(),
    });
    std::fs::write(&last, &intact).unwrap();

    // A rank file swapped for another rank's is refused, naming it.
    let (one, two) = (dir.join(&want[1]), dir.join(&want[2]));
    std::fs::copy(&one, &two).unwrap();
    let err = checkpoint::load(&index, &host).unwrap_err().to_string();
    assert!(
        err.contains("rank-1-of-3") && err.contains("not rank 1 of 3 at step 8"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
