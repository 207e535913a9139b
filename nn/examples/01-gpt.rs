//! Define a small GPT, teach it to reverse three digits, and save it as safetensors:
//! `cargo run --release -p headroom-nn --example 01-gpt`.

use headroom_autograd::{Tape, Tensor};
use headroom_kernels::ops::random::uniform;
use headroom_kernels::{DType, Device, DeviceConfig};
use headroom_nn::loss::cross_entropy;
use headroom_nn::{
    AdamW, AdamWConfig, Family, Gpt, GptConfig, Initializer, Module, Optimizer, checkpoint,
};

const SEP: u32 = 10; // digits are 0-9; the separator is 10
const SKIP: u32 = u32::MAX; // positions that are not scored

/// `batch` sequences `a b c SEP c b a`: inputs are all but the last token, targets the next
/// token where it is part of the reversed digits.
fn batch(size: usize, seed: u64) -> (Vec<u32>, Vec<u32>) {
    let (mut ids, mut targets) = (Vec::new(), Vec::new());
    for b in 0..size as u64 {
        let d: Vec<u32> = (0..3)
            .map(|i| (uniform(seed, b * 3 + i) * 10.0) as u32)
            .collect();
        let seq = [d[0], d[1], d[2], SEP, d[2], d[1], d[0]];
        ids.extend(&seq[..6]);
        targets.extend((0..6).map(|p| if p >= 3 { seq[p + 1] } else { SKIP }));
    }
    (ids, targets)
}

fn main() -> headroom_nn::Result<()> {
    let device = Device::cpu(DeviceConfig::new(256 << 20))?;
    let config = GptConfig {
        vocab: 11,
        context: 6,
        width: 64,
        heads: 4,
        layers: 2,
        dropout: 0.0,
        tie_embeddings: false,
        family: Family::Gpt2,
    };
    let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 0), config)?;
    let mut adamw = AdamW::new(&gpt, AdamWConfig::default())?;
    adamw.set_lr(3e-3);
    for step in 0..300 {
        let (ids, targets) = batch(32, step);
        let ids = Tensor::from_host(&device, [32, 6], &ids)?;
        let targets = Tensor::from_host(&device, [32, 6], &targets)?;
        let tape = Tape::new();
        let loss = tape.record(|| cross_entropy(&gpt.forward(&ids)?, &targets, Some(SKIP)))?;
        let grads = tape.gradient(&loss, &gpt.parameters().iter().collect::<Vec<_>>())?;
        drop(tape);
        adamw.step(&mut gpt, &grads, 1.0)?;
        if step % 50 == 0 || step == 299 {
            println!("step {step:>3}  loss {:.4}", loss.to_f64()?[0]);
        }
    }
    let path = std::env::temp_dir().join("headroom-gpt.safetensors");
    checkpoint::save(&path, &gpt, Some(&adamw), &Default::default())?;
    let count = gpt.parameter_count();
    println!("saved {count} parameters to {}", path.display());
    Ok(())
}
