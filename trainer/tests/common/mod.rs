//! Shared test machinery: small configurations that train in moments, and fresh directories.
#![allow(dead_code)]

use std::path::PathBuf;

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
        run_dir: dir.0.clone(),
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
    config.memory.limit = Some("64MiB".into());
    config.memory.history = 0;
    config
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
