//! Training-step throughput and peak memory of Headroom, to set beside PyTorch's
//! (`benches/peers/torch_train.py`, the same models and settings). One full step each: forward,
//! backward and an AdamW update, with the products in f32 or bf16 (autocast). Prints a table,
//! then one JSON line per result with the keys
//! `model, precision, samples_per_s, tokens_per_s, peak_bytes`. `gpt-recompute` is the GPT with
//! each block recomputed in the backward pass (activation checkpointing). `gpt-text` is a GPT of
//! the real-text job's size (4 layers of width 256, context 256, vocabulary 4096, batch 16, the
//! head tied to the token embedding, as nanoGPT ties it), in f32 only; `llama-text` is a model of
//! the Llama family of the same size (SmolLM2's design: rotary positions, RMSNorm, a SwiGLU MLP
//! of 768, 2 key/value heads for 4 query heads, tied), beside transformers' `LlamaForCausalLM`.

use std::time::Instant;

use headroom_alloc::{AllocatorConfig, GRANULE};
use headroom_autograd::{Tape, Tensor, autocast};
use headroom_kernels::ops::random::uniform;
use headroom_kernels::{DType, Device, DeviceConfig};
use headroom_nn::loss::cross_entropy;
use headroom_nn::{
    Activation, AdamW, AdamWConfig, Family, Gpt, GptConfig, Initializer, LlamaOptions, Module,
    Optimizer, Recompute, mlp,
};

/// Timed steps, after the warm-up ones.
const STEPS: usize = 10;
const WARMUP: usize = 3;

/// One model and its batch.
struct Case {
    name: &'static str,
    model: Box<dyn Module>,
    inputs: Tensor,
    targets: Tensor,
    samples: usize,
    tokens: usize,
}

fn mlp_case(device: &Device) -> headroom_nn::Result<Case> {
    let model = mlp(
        &mut Initializer::new(device, DType::F32, 1),
        &[784, 1024, 1024, 10],
        Activation::Relu,
    )?;
    let x: Vec<f64> = (0..256 * 784).map(|i| 2.0 * uniform(2, i) - 1.0).collect();
    let y: Vec<u32> = (0..256).map(|i| (uniform(3, i) * 10.0) as u32).collect();
    Ok(Case {
        name: "mlp",
        model: Box::new(model),
        inputs: Tensor::from_f64(device, [256, 784], DType::F32, &x)?,
        targets: Tensor::from_host(device, [256], &y)?,
        samples: 256,
        tokens: 256,
    })
}

fn gpt_case(device: &Device) -> headroom_nn::Result<Case> {
    gpt_case_with(device, false)
}

/// The GPT with each block recomputed in the backward pass (`Gpt::set_recompute`).
fn gpt_recompute_case(device: &Device) -> headroom_nn::Result<Case> {
    gpt_case_with(device, true)
}

fn gpt_case_with(device: &Device, recompute: bool) -> headroom_nn::Result<Case> {
    let config = GptConfig {
        vocab: 64,
        context: 64,
        width: 256,
        heads: 4,
        layers: 4,
        dropout: 0.0,
        tie_embeddings: false,
        family: Family::Gpt2,
    };
    let name = if recompute { "gpt-recompute" } else { "gpt" };
    let recompute = if recompute {
        Recompute::Blocks
    } else {
        Recompute::None
    };
    gpt_of(device, name, config, 32, recompute)
}

/// The GPT of the real-text job's size (`gpt-mini` with a vocabulary of 4096), on a batch of 16.
fn gpt_text_case(device: &Device) -> headroom_nn::Result<Case> {
    gpt_of(
        device,
        "gpt-text",
        text_sized(Family::Gpt2),
        16,
        Recompute::None,
    )
}

/// A Llama-family model of `gpt-text`'s size: SmolLM2's design (2 key/value heads for 4 query
/// heads, a SwiGLU MLP of 8/3 the width rounded up to 256, tied), on a batch of 16.
fn llama_text_case(device: &Device) -> headroom_nn::Result<Case> {
    let family = Family::Llama(LlamaOptions {
        kv_heads: 2,
        ..LlamaOptions::for_width(256, 4)
    });
    gpt_of(
        device,
        "llama-text",
        text_sized(family),
        16,
        Recompute::None,
    )
}

/// A model of `family` of the real-text job's size: 4 layers of width 256, 4 heads, context
/// 256, a vocabulary of 4096, the head tied to the token embedding.
fn text_sized(family: Family) -> GptConfig {
    GptConfig {
        vocab: 4096,
        context: 256,
        width: 256,
        heads: 4,
        layers: 4,
        dropout: 0.0,
        tie_embeddings: true,
        family,
    }
}

/// A GPT of `config` and a batch of `batch` full-context windows of seeded tokens.
fn gpt_of(
    device: &Device,
    name: &'static str,
    config: GptConfig,
    batch: usize,
    recompute: Recompute,
) -> headroom_nn::Result<Case> {
    let (vocab, context) = (config.vocab, config.context);
    let mut model = Gpt::new(&mut Initializer::new(device, DType::F32, 1), config)?;
    model.set_recompute(recompute);
    let tokens = (batch * context) as u64;
    let ids: Vec<u32> = (0..tokens)
        .map(|i| (uniform(4, i) * vocab as f64) as u32)
        .collect();
    let next: Vec<u32> = (0..tokens)
        .map(|i| (uniform(5, i) * vocab as f64) as u32)
        .collect();
    Ok(Case {
        name,
        model: Box::new(model),
        inputs: Tensor::from_host(device, [batch, context], &ids)?,
        targets: Tensor::from_host(device, [batch, context], &next)?,
        samples: batch,
        tokens: tokens as usize,
    })
}

/// Builds a model and its batch on a device.
type MakeCase = fn(&Device) -> headroom_nn::Result<Case>;

/// The median seconds of a step, and the peak bytes in use over the timed steps.
fn time(
    device: &Device,
    case: &mut Case,
    precision: Option<DType>,
) -> headroom_nn::Result<(f64, u64)> {
    let mut adamw = AdamW::new(&*case.model, AdamWConfig::default())?;
    let mut times = Vec::with_capacity(STEPS);
    for step in 0..WARMUP + STEPS {
        if step == WARMUP {
            device.allocator().with(|a| a.reset_peak());
        }
        let start = Instant::now();
        let params = case.model.parameters();
        let tape = Tape::new();
        let loss = {
            let _policy = precision.map(autocast);
            tape.record(|| cross_entropy(&case.model.forward(&case.inputs)?, &case.targets, None))?
        };
        let grads = tape.gradient(&loss, &params.iter().collect::<Vec<_>>())?;
        drop((tape, loss, params));
        adamw.step(case.model.as_mut(), &grads, 1.0)?;
        drop(grads);
        if step >= WARMUP {
            times.push(start.elapsed().as_secs_f64());
        }
    }
    times.sort_by(f64::total_cmp);
    Ok((times[STEPS / 2], device.allocator().stats().peak_in_use))
}

fn main() -> headroom_nn::Result<()> {
    // Kernels called from inside the pool hand no work across threads per call.
    let pool = rayon::ThreadPoolBuilder::new()
        .build()
        .map_err(|e| headroom_nn::Error::Config {
            what: "thread pool",
            detail: e.to_string(),
        })?;
    pool.install(|| {
        println!("{:<13} {:<6} {:>12} {:>12} {:>14}", "model", "dtype", "samples/s", "tokens/s", "peak");
        let mut lines = Vec::new();
        // Arguments, if any, pick models and precisions by name: `train-compare gpt f32`.
        let picked: Vec<String> = std::env::args().skip(1).collect();
        let keep = |name: &str, among: &[&str]| {
            let asked: Vec<&String> = picked.iter().filter(|p| among.contains(&p.as_str())).collect();
            asked.is_empty() || asked.iter().any(|p| *p == name)
        };
        let models = [
            ("mlp", mlp_case as MakeCase),
            ("gpt", gpt_case),
            ("gpt-recompute", gpt_recompute_case),
            ("gpt-text", gpt_text_case),
            ("llama-text", llama_text_case),
        ];
        let names = models.map(|(model, _)| model);
        for (model, make) in models {
            for (name, precision) in [("f32", None), ("bf16", Some(DType::BF16))] {
                let f32_only = model.ends_with("-text") && precision.is_some();
                if f32_only || !keep(model, &names) || !keep(name, &["f32", "bf16"]) {
                    continue;
                }
                // As the trainer configures it: chunks split whenever anything would be left.
                let allocator = AllocatorConfig::default().with_max_internal_fragmentation(GRANULE);
                let device = Device::cpu(DeviceConfig::new(4 << 30).with_allocator(allocator))?;
                let mut case = make(&device)?;
                let (seconds, peak) = time(&device, &mut case, precision)?;
                let (samples, tokens) = (case.samples as f64 / seconds, case.tokens as f64 / seconds);
                println!(
                    "{:<13} {name:<6} {samples:>12.1} {tokens:>12.1} {:>14}",
                    case.name,
                    headroom_alloc::format_bytes(peak)
                );
                lines.push(format!(
                    "{{\"model\":\"{}\",\"precision\":\"{name}\",\"samples_per_s\":{samples:.2},\"tokens_per_s\":{tokens:.2},\"peak_bytes\":{peak}}}",
                    case.name
                ));
            }
        }
        for line in lines {
            println!("{line}");
        }
        Ok(())
    })
}
