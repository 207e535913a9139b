//! How much of GPT-2 small fits a training step with every memory technique of the trainer on
//! (memory-efficient attention, the fused head and loss, the tied head, cheap recomputation),
//! on the CPU or a CUDA GPU, in f32 and under bf16 autocast: the peer of
//! `benches/peers/torch_fit.py` (PyTorch as nanoGPT writes it).
//!
//! For each precision it trains whole steps (forward, backward, AdamW) of GPT-2 small (12
//! layers, width 768, 12 heads, context 1024, vocabulary 50257, tied head) on uniform tokens:
//! - the peak bytes in use of a step at one and at two samples and at the micro-batch, from
//!   the allocator (weights, gradients, optimizer state and activations, every tag), beside the
//!   planner's prediction for the same step on the meta device;
//! - the activation bytes per sample: the peak's growth from one sample to two;
//! - samples and tokens per second at the micro-batch, the median of timed steps.
//!
//! ```text
//! fit-compare [--preset NAME] [--context N] [--device cpu|cuda:N] [--precision f32|bf16]...
//!             [--micro-batch N] [--steps N] [--recompute cheap|cheap-up|blocks]
//!             [--lora RANK [--base bf16|f32|nf4|int8]]
//!             [--offload optimizer|weights|weights-in-turn]
//!             [--update after|in-backward]
//! fit-compare [--preset NAME] [--context N] --limit SIZE [--limit SIZE]... [--at N]...
//!             [--precision f32|bf16]...
//! fit-compare --largest-preset SIZE [--precision f32|bf16]...
//! fit-compare [--preset NAME] --longest-context SIZE [--most N] [--confirm yes|no]
//!             [--precision f32|bf16]...
//! ```
//!
//! `--preset` picks another model than GPT-2 small (`smollm2-135m`, `llama-3.2-1b`, ...), and
//! `--context` its positions per sample (by default the preset's). `--recompute cheap-up` has a
//! Llama-family model run its MLPs' up projections again too (by default `cheap`). `--lora
//! RANK` trains LoRA adapters of that rank (alpha twice the rank) on every linear layer of the
//! blocks over the frozen model, kept in `--base` (bf16 by default; `nf4` and `int8` store the
//! blocks' weights quantized under a bf16 model: QLoRA), as `torch_fit.py --lora` runs PEFT;
//! its JSON lines gain `lora` and `base`. `--offload optimizer` keeps the optimizer's state and
//! updates in the host tier (ZeRO-Offload), `--offload weights` the blocks' weights too,
//! streamed to the device block by block (with `--recompute blocks`), each block's fetched one
//! block ahead, or as the block starts with `--offload weights-in-turn`
//! (`model.fetch_ahead = false`); their JSON lines gain
//! `offload`, and their peaks are the device's. `--update in-backward` updates each parameter
//! as its gradient completes (`optimizer.in_backward`, clipping off), where an offloaded
//! optimizer's host thread runs each update while the device goes on with the backward pass;
//! its JSON lines gain `"update":"in_backward"`.
//!
//! `--limit` asks what fits under each limit (on the CPU's simulated device, or a GPU), with gradient
//! clipping off (so the optimizer step in the backward pass may be chosen): the largest
//! micro-batch of GPT-2 small the memory policy fits as a whole step, with every technique and
//! without whole-block recomputation, each confirmed by one real step; and a real step at the
//! size `--at` gives for that limit (PyTorch's largest; by default 1 under the first limit and
//! 4 under the second, as PyTorch's peaks of 2.93 and 4.36 GB at one and two samples allow).
//! `--largest-preset` asks which GPT-2 presets train at a micro-batch of one under the limit,
//! and confirms the largest with a real step. `--longest-context` asks for the longest context
//! (a multiple of 1024 tokens up to `--most`, 1 Mi by default) whose step of one sample the
//! memory policy fits under the limit with every technique, the host tier included; with
//! `--confirm yes` (the default on a GPU; a CPU's step at such lengths takes hours) one real
//! step at that context checks the peak against the prediction. Each prints one JSON line per
//! result, with a `bench` key (`largest-micro-batch`, `at-size`, `largest-preset`,
//! `longest-context`).
//!
//! On the CPU the defaults are both precisions and micro-batches of 4; on a GPU bf16 and 8.
//! Prints a table, then one JSON line per precision with the keys `model, device, precision,
//! micro_batch, peak_bytes, activation_bytes_per_sample, samples_per_s, tokens_per_s,
//! predicted_peak_bytes, predicted_exactly` (the peak and prediction at the micro-batch;
//! `predicted_exactly` when the planner's prediction was within one granule of the measured
//! peak at every size measured).

use std::time::Instant;

use headroom_benches::fit_limits::{
    Subject, Techniques, config as limit_config, confirm, largest, whole_batch_policy,
};
use headroom_benches::longest_context::{STEP, longest_context};
use headroom_nn::lora::{LoraConfig, QuantizedBase};
use headroom_trainer::config::{
    DataKind, ParamDtype, PrecisionKind, Preset, Recompute, TrainConfig,
};
use headroom_trainer::{Result, Trainer};

/// What to measure, from the command line.
struct Args {
    /// The model and its context.
    subject: Subject,
    device: String,
    precisions: Vec<PrecisionKind>,
    micro: usize,
    steps: usize,
    /// What the measured steps compute again.
    recompute: Recompute,
    /// LoRA adapters of this rank over a frozen base of this dtype, its blocks' weights stored
    /// quantized if so named.
    lora: Option<(usize, ParamDtype, Option<QuantizedBase>)>,
    /// What the measured steps keep in the host tier.
    offload: Offload,
    /// The measured steps update each parameter in the backward pass.
    in_backward: bool,
    /// Limits to find the largest micro-batch under.
    limits: Vec<u64>,
    /// For each limit, the size to time a step at.
    at: Vec<usize>,
    /// The limit to find the largest preset under.
    largest_preset: Option<u64>,
    /// The limit to find the longest context under, the longest tried, and whether to
    /// confirm it by a real step.
    longest: Option<(u64, usize, bool)>,
}

impl Args {
    fn parse() -> std::result::Result<Self, String> {
        let mut device = "cpu".to_owned();
        let (mut preset, mut context) = (Preset::named("gpt2").expect("a preset"), None);
        let (mut precisions, mut micro, mut steps) = (Vec::new(), None, 3);
        let mut recompute = Recompute::Cheap;
        let (mut rank, mut base) = (None, (ParamDtype::Bf16, None));
        let (mut limits, mut at, mut largest_preset) = (Vec::new(), Vec::new(), None);
        let (mut longest, mut most, mut confirm_longest) = (None, 1 << 20, None);
        let (mut offload, mut in_backward) = (Offload::Nothing, false);
        let size = |flag: &str, value: &str| {
            headroom_alloc::parse_size(value).map_err(|e| format!("{flag} {value}: {e}"))
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let number = || {
                value
                    .parse::<usize>()
                    .map_err(|e| format!("{flag} {value}: {e}"))
            };
            match flag.as_str() {
                "--device" => device = value.clone(),
                "--preset" => {
                    preset = Preset::named(&value)
                        .ok_or_else(|| format!("--preset {value}: not a preset's name"))?
                }
                "--context" => context = Some(number()?.max(1)),
                "--precision" => precisions.push(match value.as_str() {
                    "f32" => PrecisionKind::F32,
                    "bf16" => PrecisionKind::Bf16,
                    other => return Err(format!("--precision {other}: f32 or bf16")),
                }),
                "--micro-batch" => micro = Some(number()?.max(2)),
                "--steps" => steps = number()?.max(1),
                "--recompute" => {
                    recompute = match value.as_str() {
                        "cheap" => Recompute::Cheap,
                        "cheap-up" => Recompute::CheapUp,
                        "blocks" => Recompute::Blocks,
                        other => {
                            return Err(format!("--recompute {other}: cheap, cheap-up or blocks"));
                        }
                    }
                }
                "--lora" => rank = Some(number()?.max(1)),
                "--base" => {
                    base = match value.as_str() {
                        "bf16" => (ParamDtype::Bf16, None),
                        "f32" => (ParamDtype::F32, None),
                        "nf4" => (ParamDtype::Bf16, Some(QuantizedBase::Nf4)),
                        "int8" => (ParamDtype::Bf16, Some(QuantizedBase::Int8)),
                        other => return Err(format!("--base {other}: bf16, f32, nf4 or int8")),
                    }
                }
                "--offload" => {
                    offload = match value.as_str() {
                        "optimizer" => Offload::Optimizer,
                        "weights" => Offload::Weights,
                        "weights-in-turn" => Offload::WeightsInTurn,
                        other => {
                            return Err(format!(
                                "--offload {other}: optimizer, weights or weights-in-turn"
                            ));
                        }
                    }
                }
                "--update" => {
                    in_backward = match value.as_str() {
                        "after" => false,
                        "in-backward" => true,
                        other => return Err(format!("--update {other}: after or in-backward")),
                    }
                }
                "--limit" => limits.push(size(&flag, &value)?),
                "--at" => at.push(number()?.max(1)),
                "--largest-preset" => largest_preset = Some(size(&flag, &value)?),
                "--longest-context" => longest = Some(size(&flag, &value)?),
                "--most" => most = number()?.max(1),
                "--confirm" => {
                    confirm_longest = match value.as_str() {
                        "yes" => Some(true),
                        "no" => Some(false),
                        other => return Err(format!("--confirm {other}: yes or no")),
                    }
                }
                other => return Err(format!("unknown flag {other}")),
            }
        }
        let gpu = device != "cpu";
        if at.is_empty() {
            at = vec![1, 4];
        }
        if precisions.is_empty() && longest.is_some() {
            precisions = vec![PrecisionKind::Bf16];
        }
        if precisions.is_empty() && (!limits.is_empty() || largest_preset.is_some()) {
            precisions = vec![if gpu {
                PrecisionKind::Bf16
            } else {
                PrecisionKind::F32
            }];
        }
        if precisions.is_empty() {
            precisions = if gpu {
                vec![PrecisionKind::Bf16]
            } else {
                vec![PrecisionKind::F32, PrecisionKind::Bf16]
            };
        }
        let micro = micro.unwrap_or(if gpu { 8 } else { 4 });
        Ok(Self {
            subject: Subject { preset, context },
            device,
            precisions,
            micro,
            steps,
            recompute,
            lora: rank.map(|rank| (rank, base.0, base.1)),
            offload,
            in_backward,
            limits,
            at,
            largest_preset,
            longest: longest.map(|limit| (limit, most, confirm_longest.unwrap_or(gpu))),
        })
    }
}

/// What a measured step keeps in the host tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Offload {
    /// Nothing: every byte on the device.
    Nothing,
    /// The optimizer's state and updates (`optimizer.offload`).
    Optimizer,
    /// The optimizer's, and the blocks' weights, streamed (`model.offload_weights`), each
    /// block's fetched one block ahead.
    Weights,
    /// [`Offload::Weights`], each block's brought back as it starts (`model.fetch_ahead =
    /// false`).
    WeightsInTurn,
}

impl Offload {
    /// The name the command line and the JSON lines give it.
    fn name(self) -> &'static str {
        match self {
            Self::Nothing => "none",
            Self::Optimizer => "optimizer",
            Self::Weights => "weights",
            Self::WeightsInTurn => "weights-in-turn",
        }
    }
}

/// A step's precision, recomputation, LoRA rank and base if any, offload, and whether it
/// updates in the backward pass.
type How = (
    PrecisionKind,
    Recompute,
    Option<(usize, ParamDtype, Option<QuantizedBase>)>,
    Offload,
    bool,
);

/// A run of `subject` on `device` in `precision` with batches of `samples`, in a directory of
/// its own.
fn config(
    subject: Subject,
    device: &str,
    (precision, recompute, lora, offload, in_backward): How,
    samples: usize,
) -> TrainConfig {
    let mut config = subject.config();
    config.run_dir = Some(std::env::temp_dir().join(format!(
        "headroom-fit-{}-{}-{samples}",
        std::process::id(),
        precision.name()
    )));
    config.device = device.to_owned();
    config.precision.dtype = precision;
    config.model.recompute = Some(recompute);
    if let Some((rank, dtype, base)) = lora {
        config.model.lora = Some(LoraConfig {
            rank,
            alpha: 2.0 * rank as f64,
            base,
            ..LoraConfig::default()
        });
        config.model.param_dtype = dtype;
    }
    config.optimizer.offload = Some(offload != Offload::Nothing);
    let streamed = matches!(offload, Offload::Weights | Offload::WeightsInTurn);
    config.model.offload_weights = Some(streamed);
    config.model.fetch_ahead = Some(offload != Offload::WeightsInTurn);
    config.optimizer.in_backward = Some(in_backward);
    if in_backward {
        // Clipping by the global norm needs every gradient before the first update.
        config.optimizer.clip = 0.0;
    }
    config.data.kind = DataKind::UniformTokens;
    config.data.train_size = 64;
    config.data.eval_size = 1;
    config.batch.size = samples;
    config.batch.micro = None;
    if device == "cpu" {
        // A GPU's memory is what its driver reports; the CPU's is simulated.
        config.memory.capacity = headroom_alloc::ByteSize::gib(64);
        config.memory.limit = Some(headroom_alloc::ByteSize::gib(64));
    }
    config.memory.history = 0;
    config.memory.trace = false;
    config.eval_every = 0;
    config
}

/// The measured and the predicted peak of one step at `samples`, and the trainer, for more.
fn measured(
    subject: Subject,
    device: &str,
    how: How,
    samples: usize,
) -> Result<(u64, u64, Trainer)> {
    let mut trainer = Trainer::builder()
        .config(config(subject, device, how, samples))
        .overwrite()
        .build()?;
    let predicted = trainer.plan().map_or(0, |p| p.predicted_peak);
    trainer.train_step()?;
    let peak = trainer.device().allocator().stats().peak_in_use;
    std::fs::remove_dir_all(trainer.run_dir()).ok();
    Ok((peak, predicted, trainer))
}

/// What fits under each of `args.limits`: the largest micro-batch with each family of
/// techniques, confirmed, and a step at PyTorch's largest size.
fn under_limits(args: &Args) -> Result<()> {
    let device = args.device.as_str();
    let model = args.subject.preset.name();
    println!(
        "{:<6} {:>10} {:<16} {:>6} {:>12} {:>12} {:>10}  policy",
        "prec", "limit", "bench", "micro", "peak", "predicted", "samples/s"
    );
    let mut lines = Vec::new();
    for &precision in &args.precisions {
        for (at, &limit) in args.limits.iter().enumerate() {
            let name = precision.name();
            let mut report = |bench: &str,
                              micro: usize,
                              confirmed: &headroom_benches::fit_limits::Confirmed,
                              extra: &str| {
                let samples_per_s = micro as f64 / confirmed.seconds;
                println!(
                    "{name:<6} {:>10} {bench:<16} {micro:>6} {:>12} {:>12} {samples_per_s:>10.3}  {}",
                    headroom_alloc::format_bytes(limit),
                    confirmed.peak,
                    confirmed.predicted,
                    confirmed.policy
                );
                lines.push(format!(
                    "{{\"bench\":\"{bench}\",\"model\":\"{model}\",\"device\":\"{device}\",\"precision\":\"{name}\",\"limit_bytes\":{limit},{extra}\"micro_batch\":{micro},\"peak_bytes\":{},\"predicted_peak_bytes\":{},\"samples_per_s\":{samples_per_s:.4},\"policy\":\"{}\"}}",
                    confirmed.peak, confirmed.predicted, confirmed.policy
                ));
            };
            for techniques in [Techniques::Any, Techniques::NoBlocks] {
                let found = largest(device, args.subject, precision, limit, techniques, 64)?;
                let Some((micro, policy)) = found else {
                    println!(
                        "{name:<6} {limit:>10} largest          none fits ({})",
                        techniques.name()
                    );
                    continue;
                };
                // The plan confirmed with those techniques pinned, by one step.
                let mut config =
                    limit_config(device, args.subject, precision, micro, limit, techniques);
                policy.apply(&mut config);
                let confirmed = confirm(config, 0)?;
                let extra = format!("\"techniques\":\"{}\",", techniques.name());
                report("largest-micro-batch", micro, &confirmed, &extra);
            }
            if let Some(&size) = args.at.get(at) {
                let config = limit_config(
                    device,
                    args.subject,
                    precision,
                    size,
                    limit,
                    Techniques::Any,
                );
                let confirmed = confirm(config, args.steps)?;
                report("at-size", size, &confirmed, "");
            }
        }
    }
    for line in lines {
        println!("{line}");
    }
    Ok(())
}

/// Which GPT-2 presets train at a micro-batch of one under `limit`, the largest confirmed.
fn largest_preset(args: &Args, limit: u64) -> Result<()> {
    let presets = [
        Preset::named("gpt2").expect("a preset"),
        Preset::named("gpt2-medium").expect("a preset"),
        Preset::named("gpt2-large").expect("a preset"),
        Preset::named("gpt2-xl").expect("a preset"),
    ];
    let mut lines = Vec::new();
    for &precision in &args.precisions {
        let name = precision.name();
        let mut fitting = None;
        for preset in presets {
            let subject = Subject {
                preset,
                context: None,
            };
            let mut config =
                limit_config(&args.device, subject, precision, 1, limit, Techniques::Any);
            let plan = whole_batch_policy(&config)?;
            let policy = plan
                .as_ref()
                .map_or_else(|| "does not fit".to_owned(), |(p, _)| p.describe());
            let predicted = plan.as_ref().map_or(0, |&(_, peak)| peak);
            if let Some((chosen, _)) = &plan {
                chosen.apply(&mut config);
            }
            println!("{name:<6} {:<12} {:>14} {policy}", preset.name(), predicted);
            lines.push(format!(
                "{{\"bench\":\"largest-preset\",\"precision\":\"{name}\",\"limit_bytes\":{limit},\"preset\":\"{}\",\"fits\":{},\"predicted_peak_bytes\":{predicted},\"policy\":\"{policy}\"}}",
                preset.name(),
                plan.is_some()
            ));
            if plan.is_some() {
                fitting = Some(config);
            }
        }
        if let Some(config) = fitting {
            let preset = config.model.preset.map_or("", |p| p.name());
            let confirmed = confirm(config, 0)?;
            println!(
                "{name:<6} {preset}: one real step peaked at {} (predicted {}) in {:.1} s",
                confirmed.peak, confirmed.predicted, confirmed.seconds
            );
            lines.push(format!(
                "{{\"bench\":\"largest-preset-step\",\"precision\":\"{name}\",\"limit_bytes\":{limit},\"preset\":\"{preset}\",\"peak_bytes\":{},\"predicted_peak_bytes\":{},\"seconds\":{:.2},\"policy\":\"{}\"}}",
                confirmed.peak, confirmed.predicted, confirmed.seconds, confirmed.policy
            ));
        }
    }
    for line in lines {
        println!("{line}");
    }
    Ok(())
}

/// The longest context of `args`' preset under `limit`, for each precision, confirmed by a
/// real step when `confirm`.
fn longest(args: &Args, (limit, most, confirm_it): (u64, usize, bool)) -> Result<()> {
    let (device, preset) = (args.device.as_str(), args.subject.preset);
    let mut lines = Vec::new();
    for &precision in &args.precisions {
        let name = precision.name();
        let found = longest_context(device, preset, precision, limit, most)?;
        let Some(found) = found else {
            println!("{name:<6} {}: not even {STEP} tokens fit", preset.name());
            continue;
        };
        let (context, predicted) = (found.context, found.predicted_peak);
        println!(
            "{name:<6} {}: {context} tokens, predicted peak {} ({})",
            preset.name(),
            headroom_alloc::format_bytes(predicted),
            found.policy
        );
        let measured = match confirm_it {
            true => {
                let confirmed = confirm(found.config, 0)?;
                println!(
                    "{name:<6} one real step peaked at {} in {:.1} s",
                    headroom_alloc::format_bytes(confirmed.peak),
                    confirmed.seconds
                );
                confirmed.peak.to_string()
            }
            false => "null".to_owned(),
        };
        lines.push(format!(
            "{{\"bench\":\"longest-context\",\"model\":\"{}\",\"device\":\"{device}\",\"precision\":\"{name}\",\"limit_bytes\":{limit},\"micro_batch\":1,\"context\":{context},\"predicted_peak_bytes\":{predicted},\"peak_bytes\":{measured},\"policy\":\"{}\"}}",
            preset.name(),
            found.policy
        ));
    }
    for line in lines {
        println!("{line}");
    }
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse().unwrap_or_else(|message| {
        eprintln!("fit-compare: {message}");
        std::process::exit(2)
    });
    if let Some(longest_under) = args.longest {
        return longest(&args, longest_under);
    }
    if !args.limits.is_empty() {
        return under_limits(&args);
    }
    if let Some(limit) = args.largest_preset {
        return largest_preset(&args, limit);
    }
    let (device, micro) = (args.device.as_str(), args.micro);
    let model = args.subject.preset.name();
    println!(
        "{:<8} {:<6} {:>6} {:>14} {:>14} {:>16} {:>10} {:>10}",
        "device", "prec", "micro", "peak", "predicted", "activation/smp", "samples/s", "tokens/s"
    );
    let mut lines = Vec::new();
    for precision in args.precisions {
        let subject = args.subject;
        let how = (
            precision,
            args.recompute,
            args.lora,
            args.offload,
            args.in_backward,
        );
        let (one, one_predicted, _) = measured(subject, device, how, 1)?;
        let (two, two_predicted, _) = measured(subject, device, how, 2)?;
        let (peak, predicted, mut trainer) = measured(subject, device, how, micro)?;
        let exactly = [
            (one, one_predicted),
            (two, two_predicted),
            (peak, predicted),
        ]
        .iter()
        .all(|&(m, p)| m.abs_diff(p) <= headroom_alloc::GRANULE);
        let context = subject.context();
        let mut times = Vec::new();
        for _ in 0..args.steps {
            let started = Instant::now();
            // A step ends by reading its loss back, so the device has finished it.
            trainer.train_step()?;
            times.push(started.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let samples_per_s = micro as f64 / times[times.len() / 2];
        let tokens_per_s = samples_per_s * context as f64;
        let per_sample = two.saturating_sub(one);
        let (name, recompute) = (precision.name(), args.recompute);
        let adapters = args.lora.map_or(String::new(), |(rank, dtype, base)| {
            let base = base.map_or(dtype.name(), |b| b.format().name());
            format!(",\"lora\":{rank},\"base\":\"{base}\"")
        });
        let offloaded = match args.offload {
            Offload::Nothing => String::new(),
            offload => format!(",\"offload\":\"{}\"", offload.name()),
        };
        let update = match args.in_backward {
            true => ",\"update\":\"in_backward\"",
            false => "",
        };
        println!(
            "{device:<8} {name:<6} {micro:>6} {peak:>14} {predicted:>14} {per_sample:>16} \
             {samples_per_s:>10.3} {tokens_per_s:>10.0}"
        );
        lines.push(format!(
            "{{\"model\":\"{model}\",\"device\":\"{device}\",\"precision\":\"{name}\",\"recompute\":\"{recompute}\",\"micro_batch\":{micro},\"peak_bytes\":{peak},\"activation_bytes_per_sample\":{per_sample},\"samples_per_s\":{samples_per_s:.4},\"tokens_per_s\":{tokens_per_s:.1},\"predicted_peak_bytes\":{predicted},\"predicted_exactly\":{exactly}{adapters}{offloaded}{update}}}"
        ));
    }
    for line in lines {
        println!("{line}");
    }
    Ok(())
}
