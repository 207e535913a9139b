//! Shared test machinery: devices, seeds, and gradient checks of a layer's parameters.
#![allow(dead_code)]

pub mod transformers_cases;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use headroom_autograd::Tensor;
use headroom_autograd::check::gradcheck;
use headroom_kernels::{Device, DeviceConfig};
use headroom_nn::{Family, GptConfig, LlamaOptions, Module};

/// A CPU device of its own.
pub fn device() -> Device {
    Device::cpu(DeviceConfig::new(512 << 20)).expect("a CPU device")
}

/// A seed from `HEADROOM_SEED` or the clock, printed so that a failure can be replayed.
pub fn seed() -> u64 {
    let seed = std::env::var("HEADROOM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("seed {seed} (replay with HEADROOM_SEED={seed})");
    seed
}

/// `layer` with its parameters replaced, in visiting order, by `params` (which keep their
/// identities, so a gradient check can watch them).
pub fn with_params<L: Module + Clone>(layer: &L, params: &[Tensor]) -> L {
    let mut copy = layer.clone();
    let mut next = params.iter();
    copy.visit_parameters_mut(&mut |_, t| {
        *t = next.next().expect("one tensor per parameter").clone();
        Ok(())
    })
    .unwrap();
    copy
}

/// Checks the gradients of `layer`'s output for `input` with respect to the input (unless it
/// holds ids) and every parameter, against finite differences in f64.
pub fn check_layer<L: Module + Clone>(name: &str, layer: &L, input: &Tensor, rtol: f64) {
    let differentiable = input.dtype().is_float();
    let mut tensors = vec![input.clone()];
    tensors.extend(layer.parameters());
    let f = |t: &[Tensor]| -> headroom_autograd::Result<Tensor> {
        let copy = with_params(layer, &t[1..]);
        copy.forward(&t[0]).map_err(|e| match e {
            headroom_nn::Error::Autograd(e) => e,
            other => panic!("{name}: {other}"),
        })
    };
    let report = if differentiable {
        gradcheck(&f, &tensors, seed())
    } else {
        // Ids are not differentiable: check the parameters only, with the ids fixed.
        let params = tensors[1..].to_vec();
        let g = |p: &[Tensor]| {
            with_params(layer, p).forward(input).map_err(|e| match e {
                headroom_nn::Error::Autograd(e) => e,
                other => panic!("{name}: {other}"),
            })
        };
        gradcheck(&g, &params, seed())
    }
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    if let Some(m) = report.first_mismatch(rtol) {
        panic!("{name}: {m}");
    }
}

/// A seeded classification task: points in `[-1, 1]^dim`, labelled by the arg-max of a random
/// two-layer teacher network (so the classes are not linearly separable), keeping only points
/// whose top two teacher scores differ by at least `MARGIN` (a fifth of their typical spread, so that the task is learnable to
/// the last percent from a few thousand points).
pub struct TeacherTask {
    pub dim: usize,
    pub classes: usize,
    teacher: (Vec<f64>, Vec<f64>),
    hidden: usize,
}

impl TeacherTask {
    pub fn new(dim: usize, classes: usize, seed: u64) -> Self {
        let hidden = 16;
        let draw = |s: u64, n: usize| -> Vec<f64> {
            (0..n as u64)
                .map(|i| 2.0 * headroom_kernels::ops::random::uniform(s, i) - 1.0)
                .collect()
        };
        Self {
            dim,
            classes,
            teacher: (draw(seed, dim * hidden), draw(seed + 1, hidden * classes)),
            hidden,
        }
    }

    /// `n` points drawn from `seed` and their labels.
    pub fn sample(&self, n: usize, seed: u64) -> (Vec<f64>, Vec<u32>) {
        let x: Vec<f64> = (0..(n * self.dim) as u64)
            .map(|i| 2.0 * headroom_kernels::ops::random::uniform(seed, i) - 1.0)
            .collect();
        let (w1, w2) = &self.teacher;
        let labels = x
            .chunks(self.dim)
            .map(|p| {
                let h: Vec<f64> = (0..self.hidden)
                    .map(|j| {
                        (0..self.dim)
                            .map(|k| p[k] * w1[k * self.hidden + j])
                            .sum::<f64>()
                            .tanh()
                    })
                    .collect();
                let scores: Vec<f64> = (0..self.classes)
                    .map(|c| {
                        (0..self.hidden)
                            .map(|j| h[j] * w2[j * self.classes + c])
                            .sum()
                    })
                    .collect();
                (0..self.classes)
                    .max_by(|&a, &b| scores[a].total_cmp(&scores[b]))
                    .unwrap() as u32
            })
            .collect();
        (x, labels)
    }
}

/// Token of the separator in the copy task.
pub const SEPARATOR: u32 = 10;
/// Target value of positions the copy task does not score.
pub const IGNORED: u32 = u32::MAX;

/// A batch of the copy task: `digits` random digits, a separator, the same digits again. The
/// model reads every token but the last and is scored on predicting the copied digits.
pub fn copy_batch(batch: usize, digits: usize, seed: u64) -> (Vec<u32>, Vec<u32>) {
    let t = 2 * digits + 1;
    let mut ids = Vec::with_capacity(batch * (t - 1));
    let mut targets = Vec::with_capacity(batch * (t - 1));
    for b in 0..batch {
        let d: Vec<u32> = (0..digits)
            .map(|i| {
                (headroom_kernels::ops::random::uniform(seed, (b * digits + i) as u64) * 10.0)
                    as u32
            })
            .collect();
        let mut sequence = d.clone();
        sequence.push(SEPARATOR);
        sequence.extend(&d);
        ids.extend(&sequence[..t - 1]);
        // Position p predicts sequence[p + 1]; only the copied digits count.
        targets.extend((0..t - 1).map(|p| {
            if p >= digits {
                sequence[p + 1]
            } else {
                IGNORED
            }
        }));
    }
    (ids, targets)
}

/// Every parameter's bytes, by name.
pub fn parameter_bytes(model: &dyn headroom_nn::Module) -> Vec<(String, Vec<u8>)> {
    model
        .named_parameters()
        .into_iter()
        .map(|(n, t)| (n, t.array().to_bytes().unwrap()))
        .collect()
}

/// A fresh directory path in the system's temporary directory, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A path no other test uses (not created).
    pub fn new(name: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let unique = format!(
            "headroom-nn-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(unique);
        std::fs::remove_dir_all(&path).ok();
        Self(path)
    }

    /// The same, created.
    pub fn created(name: &str) -> Self {
        let dir = Self::new(name);
        std::fs::create_dir_all(&dir.0).unwrap();
        dir
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// One recorded step of `model`: the loss `loss` computes on the tape, every parameter's
/// gradient (in parameter order) and the activation bytes on `device` the forward pass left
/// for the backward pass.
pub fn recorded_step(
    model: &dyn Module,
    device: &Device,
    loss: impl FnOnce() -> headroom_nn::Result<Tensor>,
) -> (Vec<f64>, Vec<Vec<f64>>, u64) {
    let activations = || {
        let tags = device.allocator().stats().tags;
        tags.iter()
            .filter(|usage| usage.tag.is_activations())
            .map(|usage| usage.live)
            .sum::<u64>()
    };
    let before = activations();
    let tape = headroom_autograd::Tape::new();
    let loss = tape.record(loss).unwrap();
    let kept = activations() - before;
    let parameters = model.parameters();
    let sources: Vec<&Tensor> = parameters.iter().collect();
    let grads = tape.gradient(&loss, &sources).unwrap();
    let grads = sources
        .iter()
        .map(|p| grads.get(p).unwrap().to_f64().unwrap())
        .collect();
    (loss.to_f64().unwrap(), grads, kept)
}

/// A small Llama (two blocks, four heads over two key/value heads, vocabulary 11, context 8)
/// of `width` features, heads of `head_dim` and an MLP of `mlp_width`, untied.
pub fn small_llama(width: usize, head_dim: usize, mlp_width: usize) -> GptConfig {
    GptConfig {
        vocab: 11,
        context: 8,
        width,
        heads: 4,
        layers: 2,
        dropout: 0.0,
        tie_embeddings: false,
        family: Family::Llama(LlamaOptions {
            kv_heads: 2,
            head_dim,
            mlp_width,
            rope_theta: 10_000.0,
            rope_scaling: None,
            norm_eps: 1e-5,
            qkv_bias: false,
            qk_norm: false,
        }),
    }
}
