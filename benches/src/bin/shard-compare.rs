//! Training with every parameter sharded over the ranks (ZeRO stage 3), per rank, to set beside
//! PyTorch FSDP2 over gloo (`benches/peers/torch_shard.py`, the same model and batch). Run under
//! `mpirun -n 2` (one rank per process, as `torchrun` runs the peer). The model is of the
//! Llama family (SmolLM2's design: rotary positions, RMSNorm, a SwiGLU MLP, grouped key/value
//! heads, the head tied to the embedding) with 8 blocks of width 512 and a vocabulary of 8192,
//! 27.4 M parameters; each rank steps on 2 windows of 128 tokens: forward, backward and an AdamW
//! update of its chunks, in f32, each block recomputed in the backward pass (`blocks`) or not
//! (`none`), each collective of the passes agreed on first as the trainer's are. Rank 0 prints a table, then one JSON line per result with the keys
//! `model, recompute, ranks, step_s, samples_per_s, peak_bytes`: the median step over the
//! ranks' slowest, and the largest peak of any rank's allocator over the timed steps.

use std::time::{Duration, Instant};

use headroom_alloc::{AllocatorConfig, GRANULE};
use headroom_autograd::{Tape, Tensor};
use headroom_collectives::{Collective, MpiCollective, ReduceOp, SharedWorld};
use headroom_kernels::ops::random::uniform;
use headroom_kernels::{Array, DType, Device, DeviceConfig};
use headroom_nn::{
    AdamW, AdamWConfig, Family, Gpt, GptConfig, Initializer, LlamaOptions, Module, Optimizer,
    Recompute,
};

/// Timed steps, after the warm-up ones.
const STEPS: usize = 10;
const WARMUP: usize = 3;
/// Windows per rank, and tokens per window.
const BATCH: usize = 2;
const CONTEXT: usize = 128;

/// The model both sides train.
fn config() -> GptConfig {
    GptConfig {
        vocab: 8192,
        context: CONTEXT,
        width: 512,
        heads: 8,
        layers: 8,
        dropout: 0.0,
        tie_embeddings: true,
        family: Family::Llama(LlamaOptions {
            kv_heads: 4,
            mlp_width: 1376,
            ..LlamaOptions::for_width(512, 8)
        }),
    }
}

/// This rank's windows: seeded tokens and their next ones.
fn batch(device: &Device, rank: usize) -> headroom_nn::Result<(Tensor, Tensor)> {
    let tokens = (BATCH * CONTEXT) as u64;
    let draw = |seed: u64| -> Vec<u32> {
        (0..tokens)
            .map(|i| (uniform(seed + 10 * rank as u64, i) * config().vocab as f64) as u32)
            .collect()
    };
    Ok((
        Tensor::from_host(device, [BATCH, CONTEXT], &draw(4))?,
        Tensor::from_host(device, [BATCH, CONTEXT], &draw(5))?,
    ))
}

/// The median over the timed steps of the slowest rank's step, and the largest peak of any
/// rank, with each block recomputed as `recompute` says.
fn time(world: &SharedWorld, recompute: Recompute) -> headroom_nn::Result<(f64, u64)> {
    let device = world.device().clone();
    let mut model = Gpt::new(&mut Initializer::new(&device, DType::F32, 1), config())?;
    model.set_recompute(recompute);
    // As the trainer shards it: each collective of the passes agreed on first, so that a
    // rank's out-of-memory stops the others' passes.
    model.shard_params(&world.agreeing().map_err(collective)?)?;
    let mut adamw = AdamW::new(&model, AdamWConfig::default())?;
    let (inputs, targets) = batch(&device, world.rank())?;
    let share = 1.0 / world.world_size() as f64;
    let mut times = Vec::with_capacity(STEPS);
    for step in 0..WARMUP + STEPS {
        if step == WARMUP {
            device.allocator().with(|a| a.reset_peak());
        }
        let start = Instant::now();
        let params = model.parameters();
        let tape = Tape::new();
        let loss = tape.record(|| {
            Ok::<_, headroom_nn::Error>(model.loss(&inputs, &targets, None)?.scale(share)?)
        })?;
        let grads = tape.gradient(&loss, &params.iter().collect::<Vec<_>>())?;
        drop((tape, loss, params));
        adamw.step(&mut model, &grads, 1.0)?;
        drop(grads);
        if step >= WARMUP {
            times.push(start.elapsed().as_secs_f64());
        }
    }
    let mut slowest = Vec::with_capacity(STEPS);
    for seconds in times {
        slowest.push(most(world, seconds)?);
    }
    slowest.sort_by(f64::total_cmp);
    let peak = most(world, device.allocator().stats().peak_in_use as f64)?;
    Ok((slowest[STEPS / 2], peak as u64))
}

/// The largest of the ranks' `value`s.
fn most(world: &SharedWorld, value: f64) -> headroom_nn::Result<f64> {
    let mut array = Array::from_f64(world.device(), [1], DType::F64, &[value])?;
    world
        .clone()
        .all_reduce(&mut array, ReduceOp::Max)
        .map_err(collective)?;
    Ok(array.to_f64()?[0])
}

fn collective(err: headroom_collectives::Error) -> headroom_nn::Error {
    headroom_nn::Error::Autograd(err.into())
}

fn main() -> headroom_nn::Result<()> {
    // As the trainer configures it: chunks split whenever anything would be left.
    let allocator = AllocatorConfig::default().with_max_internal_fragmentation(GRANULE);
    let device = Device::cpu(DeviceConfig::new(8 << 30).with_allocator(allocator))?;
    let world = MpiCollective::init(&device, Duration::from_secs(600)).map_err(collective)?;
    let world = SharedWorld::new(Box::new(world));
    let ranks = world.world_size();
    // The trainer's pool: one thread per core of this rank's share of the machine, as
    // `torchrun` gives each of its ranks.
    let pool =
        headroom_trainer::thread_pool::thread_pool().map_err(|e| headroom_nn::Error::Config {
            what: "thread pool",
            detail: e.to_string(),
        })?;
    pool.install(|| {
        let writes = world.rank() == 0;
        if writes {
            println!("{:<12} {:<9} {:>6} {:>10} {:>10} {:>14}", "model", "recompute", "ranks", "step s", "samples/s", "peak/rank");
        }
        let mut lines = Vec::new();
        let picked: Vec<String> = std::env::args().skip(1).collect();
        for (name, recompute) in [("blocks", Recompute::Blocks), ("none", Recompute::None)] {
            if !picked.is_empty() && !picked.iter().any(|p| p == name) {
                continue;
            }
            let (seconds, peak) = time(&world, recompute)?;
            let samples = (BATCH * ranks) as f64 / seconds;
            if writes {
                println!(
                    "{:<12} {name:<9} {ranks:>6} {seconds:>10.3} {samples:>10.2} {:>14}",
                    "llama-shard",
                    headroom_alloc::format_bytes(peak)
                );
            }
            lines.push(format!(
                "{{\"model\":\"llama-shard\",\"recompute\":\"{name}\",\"ranks\":{ranks},\"step_s\":{seconds:.4},\"samples_per_s\":{samples:.3},\"peak_bytes\":{peak}}}"
            ));
        }
        if writes {
            for line in lines {
                println!("{line}");
            }
        }
        Ok(())
    })
}
