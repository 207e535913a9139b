//! Models learn: an MLP classifies a synthetic task, a small GPT learns to copy, both in seconds.

mod common;

use common::{IGNORED, TeacherTask, copy_batch, device, seed};
use headroom_autograd::{Tape, Tensor, no_grad};
use headroom_kernels::DType;
use headroom_nn::loss::cross_entropy;
use headroom_nn::{
    Activation, AdamW, AdamWConfig, Family, Gpt, GptConfig, Initializer, LrSchedule, Module,
    Optimizer, clip_grad_norm, mlp,
};

#[test]
fn an_mlp_trained_with_adamw_classifies_held_out_points_at_99_percent() {
    let device = device();
    let s = seed();
    let task = TeacherTask::new(2, 3, s);
    let (x, y) = task.sample(4096, s + 1);
    let (x, y) = (
        Tensor::from_f64(&device, [4096, 2], DType::F32, &x).unwrap(),
        Tensor::from_host(&device, [4096], &y).unwrap(),
    );
    let mut model = mlp(
        &mut Initializer::new(&device, DType::F32, s),
        &[2, 64, 64, 3],
        Activation::Relu,
    )
    .unwrap();
    let mut adamw = AdamW::new(
        &model,
        AdamWConfig {
            lr: 1e-2,
            weight_decay: 0.0,
            ..Default::default()
        },
    )
    .unwrap();
    let schedule = LrSchedule::WarmupCosine {
        peak: 1e-2,
        min: 1e-4,
        warmup: 20,
        total: 600,
    };
    for step in 0..600 {
        adamw.set_lr(schedule.at(step));
        let tape = Tape::new();
        let loss = tape
            .record(|| cross_entropy(&model.forward(&x)?, &y, None))
            .unwrap();
        let grads = tape
            .gradient(&loss, &model.parameters().iter().collect::<Vec<_>>())
            .unwrap();
        drop(tape);
        adamw.step(&mut model, &grads, 1.0).unwrap();
    }
    let (test_x, test_y) = task.sample(2000, s + 2);
    let logits = {
        let _off = no_grad();
        model
            .forward(&Tensor::from_f64(&device, [2000, 2], DType::F32, &test_x).unwrap())
            .unwrap()
    };
    let logits = logits.to_f64().unwrap();
    let correct = logits
        .chunks(3)
        .zip(&test_y)
        .filter(|(row, label)| {
            (0..3).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap() == **label as usize
        })
        .count();
    let accuracy = correct as f64 / 2000.0;
    eprintln!("held-out accuracy {accuracy}");
    assert!(accuracy >= 0.99, "held-out accuracy {accuracy}");
}

#[test]
fn a_small_gpt_learns_to_copy_and_its_loss_falls_below_a_tenth() {
    let device = device();
    let s = seed();
    let config = GptConfig {
        vocab: 11,
        context: 16,
        width: 64,
        heads: 4,
        layers: 2,
        dropout: 0.0,
        tie_embeddings: false,
        family: Family::Gpt2,
    };
    let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, s), config).unwrap();
    let mut adamw = AdamW::new(
        &gpt,
        AdamWConfig {
            lr: 3e-3,
            weight_decay: 0.0,
            ..Default::default()
        },
    )
    .unwrap();
    let (batch, digits) = (32, 4);
    let mut losses = Vec::new();
    for step in 0..300u64 {
        let (ids, targets) = copy_batch(batch, digits, s.wrapping_add(step));
        let ids = Tensor::from_host(&device, [batch, 2 * digits], &ids).unwrap();
        let targets = Tensor::from_host(&device, [batch, 2 * digits], &targets).unwrap();
        let tape = Tape::new();
        let loss = tape
            .record(|| cross_entropy(&gpt.forward(&ids)?, &targets, Some(IGNORED)))
            .unwrap();
        losses.push(loss.to_f64().unwrap()[0]);
        let grads = tape
            .gradient(&loss, &gpt.parameters().iter().collect::<Vec<_>>())
            .unwrap();
        drop(tape);
        let norm = clip_grad_norm(&gpt, &grads, 1.0, 1.0).unwrap();
        assert!(norm.is_finite());
        adamw.step(&mut gpt, &grads, norm.factor).unwrap();
    }
    let start = losses[..5].iter().sum::<f64>() / 5.0;
    let end = losses[losses.len() - 5..].iter().sum::<f64>() / 5.0;
    eprintln!("loss from {start} to {end}");
    assert!(end < 0.1 * start, "loss from {start} to {end}");
}
