//! The tiny Hugging Face GPT-2 made with transformers (nn/tests/data/tiny-gpt2), text to train
//! it on, runs that start from it, and the command line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use headroom_autograd::Tensor;
use headroom_kernels::{Device, DeviceConfig};
use headroom_nn::Gpt;
use headroom_trainer::Trainer;
use headroom_trainer::config::{DataKind, Overrides, ScheduleKind, TrainConfig};
use headroom_trainer::data::IGNORE;
use headroom_trainer::data::shards::{FileFilter, HeldOut, PrepareOptions, prepare};
use headroom_trainer::data::tokenizer::TextTokenizer;
use headroom_trainer::run_dir::Summary;

use super::{TempDir, headroom, prose, safetensors_entries, succeeds, text};

/// The tiny GPT-2: 2 layers, width 16, 4 heads, 64 positions, 320 tokens, a tied head, f16
/// weights, and its tokenizer.
pub const TINY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../nn/tests/data/tiny-gpt2");

/// The same shape with its own head, bf16 weights, and no tokenizer.
pub const TINY_UNTIED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../nn/tests/data/tiny-gpt2-untied"
);

pub fn tiny() -> PathBuf {
    PathBuf::from(TINY)
}

pub fn tiny_untied() -> PathBuf {
    PathBuf::from(TINY_UNTIED)
}

/// The tiny SmolLM2 made with transformers (nn/tests/data/tiny-smollm2): the Llama family, 2
/// layers, width 32, 320 tokens, f32 weights and its tokenizer.
pub fn tiny_smollm2() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../nn/tests/data/tiny-smollm2")
}

/// `headroom train` of two steps of two windows of 32 tokens from the Hugging Face model
/// `base` on `shards` into `run`, with `flags`; it must succeed. Returns what it logged.
pub fn train_two_steps(base: &Path, shards: &Path, run: &Path, flags: &[&str]) -> String {
    let mut args = vec![
        "train",
        "--init-from",
        text(base),
        "--data",
        "token-shards",
        "--data-path",
        text(shards),
        "--context",
        "32",
        "--batch-size",
        "2",
        "--steps",
        "2",
        "--eval-every",
        "0",
        "--eval-size",
        "2",
        "--memory-limit",
        "256MiB",
        "--run-dir",
        text(run),
        "--quiet",
    ];
    args.extend(flags);
    let output = headroom(&args);
    succeeds(&output);
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The tiny model's tokenizer.
pub fn tiny_tokenizer() -> TextTokenizer {
    TextTokenizer::load(&tiny()).unwrap()
}

/// Twelve prose files in `dir/name` (a few thousand tokens), drawn from `seed`; returns the
/// directory.
pub fn corpus(dir: &Path, name: &str, seed: u64) -> PathBuf {
    let corpus = dir.join(name);
    std::fs::create_dir_all(&corpus).unwrap();
    for i in 0..12 {
        let text = prose(seed * 100 + i, 30);
        std::fs::write(corpus.join(format!("doc-{i:02}.txt")), text).unwrap();
    }
    corpus
}

/// `corpus` tokenized by `tokenizer` into `out`, a quarter held out; returns `out`.
pub fn shards(tokenizer: &TextTokenizer, corpus: &Path, out: PathBuf) -> PathBuf {
    let options = PrepareOptions {
        inputs: vec![corpus.to_owned()],
        filter: FileFilter::default(),
        out: out.clone(),
        held_out: HeldOut::Fraction(0.25),
        shard_bytes: 1 << 20,
        progress: false,
    };
    prepare(tokenizer, &options).unwrap();
    out
}

/// Shards of a fresh corpus in `dir`, tokenized by the tiny model's tokenizer.
pub fn tiny_shards(dir: &TempDir) -> PathBuf {
    let corpus = corpus(&dir.0, "corpus", 0);
    shards(&tiny_tokenizer(), &corpus, dir.0.join("shards"))
}

/// A tokenizer of `vocab` tokens trained on the files of `corpus`, saved as `out`.
pub fn trained_tokenizer(corpus: &Path, vocab: usize, out: &Path) -> TextTokenizer {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    let tokenizer = TextTokenizer::train(&files, vocab, out).unwrap();
    assert_eq!(tokenizer.vocab(), vocab);
    tokenizer
}

/// The configuration `--init-from init_from` and `overrides` give, without a file.
pub fn configured(init_from: &Path, overrides: Overrides) -> headroom_trainer::Result<TrainConfig> {
    Overrides {
        init_from: Some(init_from.to_owned()),
        ..overrides
    }
    .configure(None)
}

/// A run into `run_dir` of `steps` steps on `shards` in batches of 4 at a constant `lr`, from
/// the pretrained model in `init_from`, or (none) from random weights of the tiny model's
/// shape.
pub fn run_config(
    run_dir: &Path,
    init_from: Option<&Path>,
    shards: &Path,
    steps: u64,
    lr: f64,
) -> TrainConfig {
    let mut config = match init_from {
        Some(dir) => configured(dir, Overrides::default()).unwrap(),
        None => {
            let mut config = TrainConfig::default();
            let model = &mut config.model;
            (model.layers, model.width, model.heads) = (2, 16, 4);
            model.tie_embeddings = true;
            model.context = Some(64);
            config
        }
    };
    config.run_dir = Some(run_dir.to_owned());
    config.steps = Some(steps);
    config.eval_every = 0;
    config.checkpoint.every = 0;
    config.data.kind = DataKind::TokenShards;
    config.data.path = Some(shards.to_owned());
    config.data.eval_size = 4;
    config.batch.size = 4;
    config.batch.micro = Some(4);
    config.optimizer.lr = lr;
    config.optimizer.schedule = ScheduleKind::Constant;
    config.memory.limit = Some(headroom_alloc::ByteSize::mib(64));
    config.memory.history = 0;
    config.memory.trace = false;
    config
}

/// Trains `config` to its end, as a new run.
pub fn train(config: TrainConfig) -> Summary {
    Trainer::new(config).unwrap().run(false).unwrap()
}

/// A CPU device for reading weights.
pub fn cpu() -> Device {
    Device::cpu(DeviceConfig::new(64 << 20)).unwrap()
}

/// Every tensor of a Hugging Face directory's `model.safetensors`, by name: its shape and its
/// values (f64 holds f16, bf16 and f32 values exactly).
pub fn hf_tensors(dir: &Path) -> BTreeMap<String, (Vec<usize>, Vec<f64>)> {
    safetensors_entries(&dir.join("model.safetensors"))
        .into_iter()
        .map(|(name, array)| {
            let dims = array.shape().dims().to_vec();
            (name, (dims, array.to_f64().unwrap()))
        })
        .collect()
}

/// `headroom export --hf run_dir out`, which must succeed.
pub fn export(run_dir: &Path, out: &Path) {
    succeeds(&headroom(&["export", "--hf", text(run_dir), text(out)]));
}

/// The loss `gpt` (on its own device) gives the training samples `indices` of `trainer`'s task:
/// a step's batch, as its report lists it, judged by a model loaded by hand.
pub fn batch_loss(trainer: &Trainer, indices: &[usize], gpt: &Gpt) -> f64 {
    let (mut ids, mut targets): (Vec<u32>, Vec<u32>) = (Vec::new(), Vec::new());
    for &i in indices {
        let sample = trainer.task().train.sample(i).unwrap();
        ids.extend(sample.arrays()[0].as_u32().unwrap());
        targets.extend(sample.arrays()[1].as_u32().unwrap());
    }
    let device = gpt.tok_emb.weight.device();
    let shape = [indices.len(), ids.len() / indices.len()];
    let ids = Tensor::from_host(device, shape, &ids).unwrap();
    let targets = Tensor::from_host(device, shape, &targets).unwrap();
    gpt.loss(&ids, &targets, Some(IGNORE))
        .unwrap()
        .to_f64()
        .unwrap()[0]
}
