//! Command-line flags that override the configuration file.

use std::path::PathBuf;

use headroom_alloc::ByteSize;
use serde::Deserialize;

use headroom_nn::lora::LoraTargets;

use super::{
    DataKind, ModelKind, ParamDtype, PrecisionKind, Preset, RatesKind, Recompute, ScheduleKind,
    StateKind, TrainConfig, Warmup,
};

/// Flags that override the configuration (file or defaults), setting by setting; `--preset`
/// goes under the file instead (preset < file < flag), through [`Overrides::configure`].
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct Overrides {
    /// A published shape: gpt2, gpt2-medium, gpt2-large, gpt2-xl, gpt-mini, smollm2-135m,
    /// smollm2-360m, smollm2-1.7b, qwen2.5-0.5b, qwen2.5-1.5b, qwen3-0.6b, llama-3.2-1b,
    /// llama-3.2-3b, llama-3.1-8b or llama-3.1-70b (what the file and the other flags set wins
    /// over it).
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_preset))]
    pub preset: Option<Preset>,
    /// GPT: start from a Hugging Face model directory (GPT-2, Llama, Qwen2, Qwen3 or
    /// Mistral; one file or shards; or a Hugging Face cache entry) or a GGUF file (llama,
    /// mistral, qwen2, qwen3; its tokenizer from its metadata), whose shape wins over --preset.
    #[cfg_attr(feature = "cli", arg(long))]
    pub init_from: Option<PathBuf>,
    /// GPT: positions, the window length of token data.
    #[cfg_attr(feature = "cli", arg(long))]
    pub context: Option<usize>,
    /// Optimizer steps to run.
    #[cfg_attr(feature = "cli", arg(long))]
    pub steps: Option<u64>,
    /// Epochs to run (instead of steps).
    #[cfg_attr(feature = "cli", arg(long))]
    pub epochs: Option<u64>,
    /// Samples per optimizer step (the effective batch).
    #[cfg_attr(feature = "cli", arg(long))]
    pub batch_size: Option<usize>,
    /// The first micro-batch size (otherwise the planner picks it).
    #[cfg_attr(feature = "cli", arg(long))]
    pub micro_batch: Option<usize>,
    /// The peak learning rate, 0 or more (0 leaves the weights as they are, for sanity runs).
    #[cfg_attr(feature = "cli", arg(long))]
    pub lr: Option<f64>,
    /// Linear warmup of the learning rate: steps (50) or a fraction of the run (0.1)
    /// (optimizer.warmup; default 0.03 of the run).
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_warmup))]
    pub warmup: Option<Warmup>,
    /// The learning-rate schedule: warmup-cosine (the default) or constant
    /// (optimizer.schedule).
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_schedule))]
    pub schedule: Option<ScheduleKind>,
    /// Weight decay, decoupled for AdamW, L2 for SGD (optimizer.weight_decay; default 0.01).
    #[cfg_attr(feature = "cli", arg(long, allow_negative_numbers = true))]
    pub weight_decay: Option<f64>,
    /// Precision of matrix products: f32, bf16 or f16.
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_precision))]
    pub precision: Option<PrecisionKind>,
    /// The most memory the run may use, e.g. 2GiB (default: the whole device; 24MiB for the
    /// addition task).
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_limit))]
    pub memory_limit: Option<ByteSize>,
    /// Or a fraction of the device's memory, e.g. 0.8.
    #[cfg_attr(feature = "cli", arg(long, conflicts_with = "memory_limit"))]
    pub memory_fraction: Option<f64>,
    /// The device to train on: cpu, cuda or cuda:N.
    #[cfg_attr(feature = "cli", arg(long))]
    pub device: Option<String>,
    /// The simulated device's memory on the CPU, e.g. 8GiB (memory.capacity).
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_capacity))]
    pub device_memory: Option<ByteSize>,
    /// Reserve memory as it is needed (the default).
    #[cfg_attr(feature = "cli", arg(long, conflicts_with_all = ["preallocate", "expandable_segments"]))]
    pub allow_growth: bool,
    /// Reserve the whole limit up front.
    #[cfg_attr(feature = "cli", arg(long))]
    pub preallocate: bool,
    /// On a GPU, grow one region in place a 2 MiB page at a time (PyTorch's expandable
    /// segments; on-demand growth already does so where memory can be mapped). Refused on the
    /// CPU, whose default already grows host memory in place on Linux.
    #[cfg_attr(feature = "cli", arg(long, conflicts_with = "preallocate"))]
    pub expandable_segments: bool,
    /// Keep each recomputed block's input in the host tier between the forward and the
    /// backward pass (model.offload_activations; needs whole blocks recomputed).
    #[cfg_attr(feature = "cli", arg(long))]
    pub offload_activations: bool,
    /// Keep the blocks' weights in the host tier and stream them to the device block by block,
    /// ZeRO-Infinity's parameter offload (model.offload_weights, with optimizer.offload; needs
    /// whole blocks recomputed).
    #[cfg_attr(feature = "cli", arg(long))]
    pub offload_weights: bool,
    /// Bring offloaded block inputs and streamed weights back as each block starts instead of
    /// one block ahead: less device memory, the copies not hidden (model.fetch_ahead = false).
    #[cfg_attr(feature = "cli", arg(long))]
    pub no_fetch_ahead: bool,
    /// The most the host tier may hold, e.g. 64GiB (memory.host_limit).
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_host_limit))]
    pub host_limit: Option<ByteSize>,
    /// Compute again in the backward pass instead of keeping: none, cheap (each norm's and
    /// GELU's output), cheap-up (and a SwiGLU MLP's up projection), blocks (each GPT block
    /// run again; the value when none is given) or blocks-tiled (and each MLP over tiles of
    /// the sequence, for long contexts).
    #[cfg_attr(feature = "cli", arg(long, num_args = 0..=1, default_missing_value = "blocks", value_parser = parse_recompute))]
    pub recompute: Option<Recompute>,
    /// f32 or bf16: the dtype a GPT keeps its parameters in (model.param_dtype; bf16 rounds
    /// each update stochastically).
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_param_dtype))]
    pub param_dtype: Option<ParamDtype>,
    /// GPT: train LoRA adapters over the frozen model (model.lora; rank 8, alpha 16 on every
    /// linear layer of the blocks unless the file says otherwise).
    #[cfg_attr(feature = "cli", arg(long))]
    pub lora: bool,
    /// GPT: the adapters' rank (model.lora.rank; implies --lora).
    #[cfg_attr(feature = "cli", arg(long))]
    pub lora_rank: Option<usize>,
    /// GPT: the adapters' alpha, their scale alpha / rank (model.lora.alpha; implies --lora).
    #[cfg_attr(feature = "cli", arg(long, allow_negative_numbers = true))]
    pub lora_alpha: Option<f64>,
    /// GPT: dropout on each adapter's input, in [0, 1) (model.lora.dropout; implies --lora).
    #[cfg_attr(feature = "cli", arg(long, allow_negative_numbers = true))]
    pub lora_dropout: Option<f64>,
    /// GPT: the layers adapted, PEFT's module names separated by commas (q_proj,v_proj) or
    /// all-linear (model.lora.targets; implies --lora).
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_lora_targets))]
    pub lora_targets: Option<LoraTargets>,
    /// GPT: nf4 or int8, the blocks' frozen weights stored quantized under the adapters
    /// (model.lora.base; QLoRA with nf4; implies --lora).
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_base))]
    pub base: Option<headroom_nn::lora::QuantizedBase>,
    /// auto (choose the memory techniques left unset by predicted step time) or manual
    /// (memory.policy).
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_policy))]
    pub memory_policy: Option<super::PolicyKind>,
    /// fixed or calibrated: the rates the planner predicts step times at (memory.rates).
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_rates))]
    pub memory_rates: Option<RatesKind>,
    /// The link between ranks the planner prices collectives at: a rate such as 300GB/s, or
    /// nvlink, pcie4, pcie5 or infiniband (memory.link_bandwidth).
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_link))]
    pub link_bandwidth: Option<super::LinkBandwidth>,
    /// How AdamW keeps its moments: f32, bf16 or int8 (optimizer.state).
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_state))]
    pub optimizer_state: Option<StateKind>,
    /// Update each parameter inside the backward pass as its gradient completes
    /// (optimizer.in_backward; needs --clip 0).
    #[cfg_attr(feature = "cli", arg(long))]
    pub optimizer_in_backward: bool,
    /// Shard the optimizer's state over the ranks of a data-parallel run, ZeRO stage 1
    /// (optimizer.shard_state).
    #[cfg_attr(feature = "cli", arg(long))]
    pub shard_state: bool,
    /// Shard the parameters, their gradients and the optimizer's state over the ranks, ZeRO
    /// stage 3 / FSDP (optimizer.shard_params).
    #[cfg_attr(feature = "cli", arg(long))]
    pub shard_params: bool,
    /// Shard the gradients and the optimizer's state over the ranks, each keeping whole
    /// weights gathered once a step, ZeRO stage 2 (optimizer.shard_grads).
    #[cfg_attr(feature = "cli", arg(long))]
    pub shard_grads: bool,
    /// What the ranks shard: state, grads or params, ZeRO stage 1, 2 or 3
    /// (distributed.shard).
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_shard))]
    pub shard: Option<super::ShardLevel>,
    /// Keep the optimizer's state in the host tier and update there, ZeRO-Offload
    /// (optimizer.offload).
    #[cfg_attr(feature = "cli", arg(long))]
    pub offload_optimizer: bool,
    /// The largest global gradient norm (0: no clipping).
    #[cfg_attr(feature = "cli", arg(long))]
    pub clip: Option<f64>,
    /// The seed of weights, data order and dropout.
    #[cfg_attr(feature = "cli", arg(long))]
    pub seed: Option<u64>,
    /// The run directory.
    #[cfg_attr(feature = "cli", arg(long))]
    pub run_dir: Option<PathBuf>,
    /// The model: gpt or mlp.
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_model))]
    pub model: Option<ModelKind>,
    /// The data: addition, text (characters), token-shards (from `headroom prepare`),
    /// uniform-tokens, idx or csv.
    #[cfg_attr(feature = "cli", arg(long, value_parser = parse_data))]
    pub data: Option<DataKind>,
    /// The data: a text or CSV file, or the directory of token shards `headroom prepare`
    /// wrote.
    #[cfg_attr(feature = "cli", arg(long))]
    pub data_path: Option<PathBuf>,
    /// Write a checkpoint every this many steps.
    #[cfg_attr(feature = "cli", arg(long))]
    pub checkpoint_every: Option<u64>,
    /// Evaluate every this many steps.
    #[cfg_attr(feature = "cli", arg(long))]
    pub eval_every: Option<u64>,
    /// Held-out samples (windows of token data) an evaluation reads at most (data.eval_size).
    #[cfg_attr(feature = "cli", arg(long))]
    pub eval_size: Option<usize>,
    /// Chat data: one conversation a training window, padded, instead of several packed in
    /// each (data.packing = false).
    #[cfg_attr(feature = "cli", arg(long))]
    pub no_packing: bool,
}

#[cfg(feature = "cli")]
fn parse_kebab<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    T::deserialize(serde::de::value::StrDeserializer::<serde::de::value::Error>::new(text))
        .map_err(|err| err.to_string())
}

/// `--memory-limit`, its error naming the setting it writes.
#[cfg(feature = "cli")]
fn parse_limit(text: &str) -> Result<ByteSize, String> {
    text.parse().map_err(|err| format!("memory.limit: {err}"))
}

/// `--device-memory`, its error naming the setting it writes.
#[cfg(feature = "cli")]
fn parse_capacity(text: &str) -> Result<ByteSize, String> {
    text.parse()
        .map_err(|err| format!("memory.capacity: {err}"))
}

#[cfg(feature = "cli")]
fn parse_host_limit(text: &str) -> Result<ByteSize, String> {
    text.parse()
        .map_err(|err| format!("memory.host_limit: {err}"))
}

#[cfg(feature = "cli")]
fn parse_warmup(text: &str) -> Result<Warmup, String> {
    text.parse()
}

#[cfg(feature = "cli")]
fn parse_schedule(text: &str) -> Result<ScheduleKind, String> {
    parse_kebab(text)
}

/// `--lora-targets`: `all-linear`, or module names separated by commas.
#[cfg(feature = "cli")]
fn parse_lora_targets(text: &str) -> Result<LoraTargets, String> {
    Ok(match text.trim() {
        "all-linear" => LoraTargets::default(),
        names => LoraTargets::Names(
            names
                .split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(str::to_owned)
                .collect(),
        ),
    })
}

#[cfg(feature = "cli")]
fn parse_precision(text: &str) -> Result<PrecisionKind, String> {
    parse_kebab(text)
}

#[cfg(feature = "cli")]
fn parse_model(text: &str) -> Result<ModelKind, String> {
    parse_kebab(text)
}

#[cfg(feature = "cli")]
fn parse_data(text: &str) -> Result<DataKind, String> {
    parse_kebab(text)
}

#[cfg(feature = "cli")]
fn parse_preset(text: &str) -> Result<Preset, String> {
    parse_kebab(text)
}

#[cfg(feature = "cli")]
fn parse_param_dtype(text: &str) -> Result<ParamDtype, String> {
    parse_kebab(text)
}

#[cfg(feature = "cli")]
fn parse_base(text: &str) -> Result<headroom_nn::lora::QuantizedBase, String> {
    parse_kebab(text)
}

#[cfg(feature = "cli")]
fn parse_recompute(text: &str) -> Result<Recompute, String> {
    parse_kebab(text)
}

#[cfg(feature = "cli")]
fn parse_state(text: &str) -> Result<StateKind, String> {
    parse_kebab(text)
}

#[cfg(feature = "cli")]
fn parse_shard(text: &str) -> Result<super::ShardLevel, String> {
    parse_kebab(text)
}

#[cfg(feature = "cli")]
fn parse_policy(text: &str) -> Result<super::PolicyKind, String> {
    parse_kebab(text)
}

#[cfg(feature = "cli")]
fn parse_rates(text: &str) -> Result<RatesKind, String> {
    parse_kebab(text)
}

#[cfg(feature = "cli")]
fn parse_link(text: &str) -> Result<super::LinkBandwidth, String> {
    text.parse()
}

impl Overrides {
    /// The configuration of `file` (or the defaults) over `--preset`, with every other flag
    /// applied over it.
    pub fn configure(&self, file: Option<&std::path::Path>) -> crate::error::Result<TrainConfig> {
        let mut config = match file {
            Some(path) => TrainConfig::from_toml_file_over(path, self.preset)?,
            None => TrainConfig::over(self.preset),
        };
        self.apply(&mut config);
        let base = match config.model.preset {
            Some(preset) => super::ModelConfig::preset(preset),
            None => super::ModelConfig::default(),
        };
        let written = match file {
            Some(path) => TrainConfig::written_model_keys(path)?,
            None => Vec::new(),
        };
        config.model.adopt_pretrained(&base, &written)?;
        Ok(config)
    }

    /// The configuration a resumed run continues with: its own (`run_config`, the run's
    /// `config.toml`), with what `file` writes and every flag given over it, so that a resume
    /// changes only what it names. `--preset` stands for `model.preset`, which a resume keeps.
    pub fn configure_resumed(
        &self,
        run_config: &std::path::Path,
        file: Option<&std::path::Path>,
    ) -> crate::error::Result<TrainConfig> {
        let mut table = super::read_table(run_config)?;
        if let Some(file) = file {
            super::merge(&mut table, super::read_table(file)?);
        }
        let mut config =
            TrainConfig::deserialize(table).map_err(|err| crate::error::Error::Config {
                problems: vec![format!("{}: {err}", file.unwrap_or(run_config).display())],
            })?;
        if self.preset.is_some() {
            config.model.preset = self.preset;
        }
        self.apply(&mut config);
        Ok(config)
    }

    /// Applies every flag given to `config`, but `--preset` (see [`configure`](Self::configure)).
    pub fn apply(&self, config: &mut TrainConfig) {
        if self.context.is_some() {
            config.model.context = self.context;
        }
        if self.init_from.is_some() {
            config.model.init_from = self.init_from.clone();
        }
        if let Some(steps) = self.steps {
            config.steps = Some(steps);
            config.epochs = None;
        }
        if let Some(epochs) = self.epochs {
            config.epochs = Some(epochs);
            config.steps = None;
        }
        set(&mut config.batch.size, self.batch_size);
        if self.micro_batch.is_some() {
            config.batch.micro = self.micro_batch;
        }
        set(&mut config.optimizer.lr, self.lr);
        set(&mut config.optimizer.warmup, self.warmup);
        set(&mut config.optimizer.schedule, self.schedule);
        set(&mut config.optimizer.weight_decay, self.weight_decay);
        set(&mut config.precision.dtype, self.precision);
        if let Some(limit) = &self.memory_limit {
            config.memory.limit = Some(limit.clone());
            config.memory.fraction = None;
        }
        if let Some(fraction) = self.memory_fraction {
            config.memory.fraction = Some(fraction);
            config.memory.limit = None;
        }
        set(&mut config.device, self.device.clone());
        if let Some(capacity) = &self.device_memory {
            config.memory.capacity = capacity.clone();
            config.memory.device = None;
        }
        if self.allow_growth {
            config.memory.preallocate = false;
            config.memory.expandable_segments = false;
        }
        if self.preallocate {
            config.memory.preallocate = true;
            config.memory.expandable_segments = false;
        }
        if self.expandable_segments {
            config.memory.expandable_segments = true;
            config.memory.preallocate = false;
        }
        if self.recompute.is_some() {
            config.model.recompute = self.recompute;
        }
        if self.offload_activations {
            config.model.offload_activations = Some(true);
        }
        if self.offload_weights {
            config.model.offload_weights = Some(true);
            config.optimizer.offload = Some(true);
        }
        if self.no_fetch_ahead {
            config.model.fetch_ahead = Some(false);
        }
        if self.host_limit.is_some() {
            config.memory.host_limit = self.host_limit.clone();
        }
        set(&mut config.model.param_dtype, self.param_dtype);
        let shaped = self.lora_rank.is_some()
            || self.lora_alpha.is_some()
            || self.lora_dropout.is_some()
            || self.lora_targets.is_some();
        if self.lora || shaped || self.base.is_some() {
            let lora = config.model.lora.get_or_insert_with(Default::default);
            set(&mut lora.rank, self.lora_rank);
            set(&mut lora.alpha, self.lora_alpha);
            set(&mut lora.dropout, self.lora_dropout);
            set(&mut lora.targets, self.lora_targets.clone());
            if self.base.is_some() {
                lora.base = self.base;
            }
        }
        set(&mut config.memory.policy, self.memory_policy);
        set(&mut config.memory.rates, self.memory_rates);
        if self.link_bandwidth.is_some() {
            config.memory.link_bandwidth = self.link_bandwidth.clone();
        }
        if self.optimizer_state.is_some() {
            config.optimizer.state = self.optimizer_state;
        }
        if self.optimizer_in_backward {
            config.optimizer.in_backward = Some(true);
        }
        if self.offload_optimizer {
            config.optimizer.offload = Some(true);
        }
        if self.shard_state {
            config.optimizer.shard_state = true;
        }
        if self.shard_params {
            config.optimizer.shard_params = Some(true);
        }
        if self.shard_grads {
            config.optimizer.shard_grads = true;
        }
        if self.shard.is_some() {
            config.distributed.shard = self.shard;
            config.apply_distributed();
        }
        set(&mut config.optimizer.clip, self.clip);
        set(&mut config.seed, self.seed);
        if self.run_dir.is_some() {
            config.run_dir = self.run_dir.clone();
        }
        set(&mut config.model.kind, self.model);
        set(&mut config.data.kind, self.data);
        if self.data_path.is_some() {
            config.data.path = self.data_path.clone();
        }
        set(&mut config.checkpoint.every, self.checkpoint_every);
        set(&mut config.eval_every, self.eval_every);
        set(&mut config.data.eval_size, self.eval_size);
        if self.no_packing {
            config.data.packing = false;
        }
    }
}

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *field = value;
    }
}

#[cfg(all(test, feature = "cli"))]
mod tests {
    use clap::Parser;
    use headroom_nn::lora::{LoraConfig, LoraTargets};

    use super::*;

    /// The flags as the command line takes them.
    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        overrides: Overrides,
    }

    /// Whether adapters are as a flag asks.
    type Holds = fn(&LoraConfig) -> bool;

    fn configured(flags: &[&str]) -> TrainConfig {
        let args = std::iter::once("headroom").chain(flags.iter().copied());
        Flags::try_parse_from(args)
            .unwrap()
            .overrides
            .configure(None)
            .unwrap()
    }

    #[test]
    fn the_schedule_and_lora_flags_set_the_keys_the_file_does() {
        let config = configured(&[
            "--warmup",
            "0.1",
            "--schedule",
            "constant",
            "--weight-decay",
            "0.2",
        ]);
        assert_eq!(config.optimizer.warmup, Warmup::Fraction(0.1));
        assert_eq!(config.optimizer.schedule, ScheduleKind::Constant);
        assert_eq!(config.optimizer.weight_decay, 0.2);
        assert_eq!(config.model.lora, None, "no adapters unless asked");
        assert_eq!(
            configured(&["--warmup", "20"]).optimizer.warmup,
            Warmup::Steps(20)
        );

        let cases: [(&[&str], Holds); 4] = [
            (&["--lora-alpha", "32"], |l| l.alpha == 32.0),
            (&["--lora-dropout", "0.05"], |l| l.dropout == 0.05),
            (&["--lora-targets", "q_proj, v_proj"], |l| {
                l.targets == LoraTargets::Names(vec!["q_proj".into(), "v_proj".into()])
            }),
            (&["--lora-targets", "all-linear"], |l| {
                l.targets == LoraTargets::default()
            }),
        ];
        for (flags, expect) in cases {
            let lora = configured(flags).model.lora;
            let lora = lora.unwrap_or_else(|| panic!("{flags:?} implies --lora"));
            assert!(expect(&lora), "{flags:?}: {lora:?}");
        }
        let both = configured(&["--lora-rank", "4", "--lora-alpha", "8"]);
        let lora = both.model.lora.unwrap();
        assert_eq!((lora.rank, lora.alpha), (4, 8.0));

        let err = Flags::try_parse_from(["headroom", "--warmup", "1.5"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("optimizer.warmup"), "{err}");
        let negative = configured(&["--weight-decay", "-0.1", "--lora-dropout", "-1"]);
        let err = negative.validate().unwrap_err().to_string();
        assert!(
            err.contains("optimizer.weight_decay") && err.contains("model.lora.dropout"),
            "{err}"
        );
    }
}
