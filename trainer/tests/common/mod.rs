//! Shared test machinery: small configurations that train in moments, and fresh directories.
#![allow(dead_code)]

pub mod events;
pub mod ranks;
pub mod tiny;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use headroom_trainer::Trainer;
use headroom_trainer::config::{ModelConfig, TrainConfig};

/// A fresh directory under the system's temporary one, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("headroom-{name}-{}-{n}", std::process::id()));
        std::fs::remove_dir_all(&dir).ok();
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// A one-block GPT on two-digit addition, batches of 8 in one micro-batch, a roomy limit.
pub fn small_config(dir: &TempDir) -> TrainConfig {
    let mut config = TrainConfig {
        run_dir: Some(dir.0.clone()),
        steps: Some(3),
        eval_every: 0,
        ..TrainConfig::default()
    };
    config.checkpoint.every = 0;
    config.model = ModelConfig {
        width: 16,
        heads: 2,
        layers: 1,
        ..ModelConfig::default()
    };
    config.data.digits = 2;
    config.data.train_size = 64;
    config.data.eval_size = 16;
    config.batch.size = 8;
    config.batch.micro = Some(8);
    config.memory.limit = Some(headroom_alloc::ByteSize::mib(64));
    config.memory.history = 0;
    config.memory.trace = false;
    config
}

/// Every entry of the safetensors file at `path`, by name, read onto a CPU device.
pub fn safetensors_entries(path: &Path) -> Vec<(String, headroom_kernels::Array)> {
    let device =
        headroom_kernels::Device::cpu(headroom_kernels::DeviceConfig::new(64 << 20)).unwrap();
    let saved = headroom_nn::checkpoint::load(path, &device).unwrap();
    saved
        .names()
        .into_iter()
        .map(|name| {
            let array = saved
                .array(&name, None, headroom_alloc::Tag::WEIGHTS)
                .unwrap();
            (name, array)
        })
        .collect()
}

/// Every entry of the checkpoint in `dir` (weights and optimizer state), by name, as bytes.
pub fn checkpoint_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let path = headroom_trainer::run_dir::checkpoint_path(dir);
    safetensors_entries(&path)
        .into_iter()
        .map(|(name, array)| (name, array.to_bytes().unwrap()))
        .collect()
}

/// Asserts that the checkpoints in `a` and `b` hold the same entries, bit for bit.
pub fn assert_same_checkpoints(a: &std::path::Path, b: &std::path::Path) {
    let (a, b) = (checkpoint_bytes(a), checkpoint_bytes(b));
    assert_eq!(a.len(), b.len());
    for ((name_a, bytes_a), (name_b, bytes_b)) in a.iter().zip(&b) {
        assert_eq!(name_a, name_b);
        assert!(bytes_a == bytes_b, "{name_a} differs");
    }
}

/// Every parameter's values, as bits.
pub fn weights(trainer: &Trainer) -> Vec<Vec<u64>> {
    trainer
        .model()
        .module()
        .parameters()
        .iter()
        .map(|p| p.to_f64().unwrap().into_iter().map(f64::to_bits).collect())
        .collect()
}

/// The peak bytes in use of the first step of `config` with micro-batches of `micro`.
fn step_peak(config: &TrainConfig, micro: usize) -> u64 {
    let mut config = config.clone();
    config.batch.micro = Some(micro);
    let mut trainer = Trainer::new(config).unwrap();
    trainer.train_step().unwrap();
    trainer.device().allocator().stats().peak_in_use
}

/// A batch of 32 that starts in one micro-batch, for `steps` steps: the configuration without a
/// tight limit, the same under a limit between the (CPU) peaks of micro-batches of 4 and of 32,
/// and that limit.
pub fn tight_limit(dir: &TempDir, steps: u64) -> (TrainConfig, TrainConfig, u64) {
    tight_limit_of(small_config(dir), steps)
}

/// [`tight_limit`] for the run `config` describes.
pub fn tight_limit_of(config: TrainConfig, steps: u64) -> (TrainConfig, TrainConfig, u64) {
    let mut roomy = config;
    roomy.steps = Some(steps);
    roomy.batch.size = 32;
    roomy.batch.micro = Some(32);
    let (low, high) = (step_peak(&roomy, 4), step_peak(&roomy, 32));
    assert!(low < high, "{low} against {high}");
    let limit = (low + high) / 2;
    let mut tight = roomy.clone();
    tight.memory.limit = Some(limit.into());
    (roomy, tight, limit)
}

/// Runs `free` and `constrained` side by side for `steps` steps, and asserts that the
/// constrained run ran out of memory and recovered, never went above `limit`, settled on
/// smaller micro-batches, and trained on the same samples to the free run's losses and weights
/// within `tolerance` (relative; absolute for weights below 1e-2).
pub fn assert_recovers_like(
    free: &mut Trainer,
    constrained: &mut Trainer,
    steps: u64,
    limit: u64,
    tolerance: f64,
) {
    let mut recovered = 0;
    for _ in 0..steps {
        let a = free.train_step().unwrap();
        let b = constrained.train_step().unwrap();
        recovered += b.ooms.len();
        let (mut seen, mut batch) = (b.indices.clone(), a.indices.clone());
        seen.sort_unstable();
        batch.sort_unstable();
        assert_eq!(seen, batch, "every sample once, in spite of the OOM");
        assert!(
            (a.loss - b.loss).abs() <= tolerance * a.loss.abs().max(1.0),
            "{} against {}",
            a.loss,
            b.loss
        );
        let peak = constrained.device().allocator().stats().peak_in_use;
        assert!(peak <= limit, "peak {peak} above the limit {limit}");
    }
    assert!(recovered > 0, "the limit forced smaller micro-batches");
    let micro = constrained.micro_batch();
    assert!(micro < free.micro_batch(), "converged to {micro}");
    let (wa, wb) = (weights(free), weights(constrained));
    for (x, y) in wa.iter().flatten().zip(wb.iter().flatten()) {
        let (x, y) = (f64::from_bits(*x), f64::from_bits(*y));
        assert!(
            (x - y).abs() <= tolerance * x.abs().max(1e-2),
            "{x} against {y}"
        );
    }
}

/// The path as a command-line argument.
pub fn text(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The `headroom` command with `args`, run to its end.
pub fn headroom(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_headroom"))
        .args(args)
        .env("HEADROOM_LOG", "warn")
        .output()
        .unwrap()
}

/// Asserts the command succeeded; returns its standard output.
pub fn succeeds(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Asserts the command failed with a message rather than a panic; returns its standard error.
pub fn fails(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "it succeeded: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// The run of `config` resumed from its checkpoint.
pub fn resume(config: TrainConfig) -> headroom_trainer::Result<Trainer> {
    Trainer::builder().config(config).resume().build()
}

/// The message of an error that must happen.
pub fn error_of<T>(result: headroom_trainer::Result<T>) -> String {
    match result {
        Ok(_) => panic!("expected an error"),
        Err(err) => err.to_string(),
    }
}

/// Asserts that `message` holds every one of `words`.
pub fn assert_mentions(message: &str, words: &[&str]) {
    for word in words {
        assert!(message.contains(word), "`{word}` not in: {message}");
    }
}

/// `lines` lines of prose, the same for the same `seed` (accents included, so that tokens are
/// bytes of multi-byte characters too).
pub fn prose(seed: u64, lines: usize) -> String {
    const WORDS: [&str; 24] = [
        "the", "fox", "runs", "to", "sea", "a", "quiet", "harbour", "boat", "sails", "at", "dawn",
        "café", "naïve", "über", "and", "then", "rests", "under", "old", "trees", "wind",
        "carries", "salt",
    ];
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut draw = |below: usize| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize % below
    };
    let mut text = String::new();
    for _ in 0..lines {
        let words: Vec<&str> = (0..4 + draw(6)).map(|_| WORDS[draw(WORDS.len())]).collect();
        text += &words.join(" ");
        text += ".\n";
    }
    text
}

/// `mpirun` starting `ranks` processes of `program`; Open MPI refuses root unless told, which
/// is harmless for other users.
pub fn mpirun(ranks: usize, program: &Path) -> Command {
    let mut command = Command::new("mpirun");
    command
        .args(["-n", &ranks.to_string(), "--oversubscribe"])
        .arg(program)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    command
}

/// Whether `mpirun` is missing, said on standard error; where `HEADROOM_REQUIRE_MPI` is set
/// (`.ci/run` sets it), a missing `mpirun` fails the test instead.
pub fn mpi_missing() -> bool {
    if Command::new("mpirun").arg("--version").output().is_ok() {
        return false;
    }
    let why = "mpirun is not on the PATH (Open MPI: openmpi-bin and libopenmpi-dev)";
    if std::env::var_os("HEADROOM_REQUIRE_MPI").is_some() {
        panic!("HEADROOM_REQUIRE_MPI is set, and MPI did not run: {why}");
    }
    eprintln!("mpi skipped: {why}");
    true
}
