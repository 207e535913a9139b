//! Checkpoints: bit-exact round trips, a resumed run that continues the same trajectory, and
//! typed errors for files that do not fit.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{IGNORED, copy_batch, device, seed};
use headroom_autograd::{Tape, Tensor};
use headroom_kernels::{DType, Device};
use headroom_nn::loss::cross_entropy;
use headroom_nn::{
    Activation, AdamW, AdamWConfig, Error, Gpt, GptConfig, Initializer, Linear, Module, Optimizer,
    Sgd, SgdConfig, checkpoint, mlp,
};

/// A fresh path in the system's temporary directory, removed when dropped.
struct TempPath(PathBuf);

impl TempPath {
    fn new(name: &str) -> Self {
        let unique = format!(
            "headroom-{name}-{}-{}.safetensors",
            std::process::id(),
            seed()
        );
        Self(std::env::temp_dir().join(unique))
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

const CONFIG: GptConfig = GptConfig {
    vocab: 11,
    context: 8,
    width: 16,
    heads: 2,
    layers: 2,
    dropout: 0.1,
};

/// One training step on the copy task; returns the loss.
fn train_step(device: &Device, gpt: &mut Gpt, optimizer: &mut dyn Optimizer, step: u64) -> f64 {
    let (ids, targets) = copy_batch(4, 3, 1000 + step);
    let ids = Tensor::from_host(device, [4, 6], &ids).unwrap();
    let targets = Tensor::from_host(device, [4, 6], &targets).unwrap();
    let tape = Tape::new();
    let loss = tape
        .record(|| cross_entropy(&gpt.forward(&ids)?, &targets, Some(IGNORED)))
        .unwrap();
    let grads = tape
        .gradient(&loss, &gpt.parameters().iter().collect::<Vec<_>>())
        .unwrap();
    drop(tape);
    optimizer.step(gpt, &grads, 1.0).unwrap();
    loss.to_f64().unwrap()[0]
}

/// Every parameter's bytes, by name.
fn bytes(model: &dyn Module) -> Vec<(String, Vec<u8>)> {
    model
        .named_parameters()
        .into_iter()
        .map(|(n, t)| (n, t.array().to_bytes().unwrap()))
        .collect()
}

fn metadata(step: u64) -> BTreeMap<String, String> {
    BTreeMap::from([("step".to_owned(), step.to_string())])
}

#[test]
fn a_round_trip_is_bit_exact_for_weights_and_optimizer_state() {
    let device = device();
    let path = TempPath::new("round-trip");
    let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 1), CONFIG).unwrap();
    let mut adamw = AdamW::new(&gpt, AdamWConfig::default()).unwrap();
    for step in 0..3 {
        train_step(&device, &mut gpt, &mut adamw, step);
    }
    checkpoint::save(&path.0, &gpt, Some(&adamw), &metadata(3)).unwrap();
    let saved = checkpoint::load(&path.0, &device).unwrap();
    assert_eq!(saved.metadata()["step"], "3");
    assert!(
        saved
            .names()
            .contains(&"blocks.1.attn.qkv.weight".to_owned())
    );
    assert!(
        saved
            .names()
            .contains(&"optimizer.blocks.1.attn.qkv.weight.exp_avg_sq".to_owned())
    );

    let mut other = Gpt::new(&mut Initializer::new(&device, DType::F32, 2), CONFIG).unwrap();
    let mut other_adamw = AdamW::new(&other, AdamWConfig::default()).unwrap();
    assert_ne!(bytes(&other), bytes(&gpt));
    saved.restore_model(&mut other).unwrap();
    saved.restore_optimizer(&mut other_adamw).unwrap();
    assert_eq!(bytes(&other), bytes(&gpt));
    assert_eq!(other_adamw.steps(), 3);
    let (mine, theirs) = (adamw.state().0, other_adamw.state().0);
    for ((n1, a1), (n2, a2)) in mine.iter().zip(&theirs) {
        assert_eq!(n1, n2);
        assert_eq!(a1.to_bytes().unwrap(), a2.to_bytes().unwrap(), "{n1}");
    }
    // Restored weights are weights, optimizer state is optimizer state.
    let stats = device.allocator().stats();
    assert!(
        stats
            .tags
            .iter()
            .any(|t| t.tag == headroom_alloc::Tag::OPTIMIZER_STATE && t.live > 0)
    );
}

#[test]
fn resuming_from_a_checkpoint_continues_the_same_trajectory_bit_for_bit() {
    let device = device();
    let path = TempPath::new("resume");
    let run = |resume_at: Option<u64>| {
        let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 7), CONFIG).unwrap();
        let mut adamw = AdamW::new(
            &gpt,
            AdamWConfig {
                lr: 3e-3,
                ..Default::default()
            },
        )
        .unwrap();
        let mut losses = Vec::new();
        for step in 0..8 {
            if Some(step) == resume_at {
                let dropout_calls = gpt.dropout_counter().get();
                let mut meta = metadata(step);
                meta.insert("dropout_calls".into(), dropout_calls.to_string());
                checkpoint::save(&path.0, &gpt, Some(&adamw), &meta).unwrap();
                drop((gpt, adamw));
                // A new process builds the model from the same configuration (seed included:
                // it also seeds the dropout masks), then loads the step-4 weights over it.
                gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 7), CONFIG).unwrap();
                adamw = AdamW::new(
                    &gpt,
                    AdamWConfig {
                        lr: 3e-3,
                        ..Default::default()
                    },
                )
                .unwrap();
                let saved = checkpoint::load(&path.0, &device).unwrap();
                saved.restore_model(&mut gpt).unwrap();
                saved.restore_optimizer(&mut adamw).unwrap();
                gpt.dropout_counter()
                    .set(saved.metadata()["dropout_calls"].parse().unwrap());
            }
            losses.push(train_step(&device, &mut gpt, &mut adamw, step).to_bits());
        }
        (losses, bytes(&gpt))
    };
    let (straight, straight_weights) = run(None);
    let (resumed, resumed_weights) = run(Some(4));
    assert_eq!(
        straight, resumed,
        "the same losses, bit for bit, with dropout on"
    );
    assert_eq!(straight_weights, resumed_weights);
}

#[test]
fn sgd_momentum_survives_a_round_trip() {
    let device = device();
    let path = TempPath::new("sgd");
    let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 3), CONFIG).unwrap();
    let config = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        ..Default::default()
    };
    let mut sgd = Sgd::new(&gpt, config).unwrap();
    train_step(&device, &mut gpt, &mut sgd, 0);
    checkpoint::save(&path.0, &gpt, Some(&sgd), &BTreeMap::new()).unwrap();
    let mut again = Sgd::new(&gpt, config).unwrap();
    checkpoint::load(&path.0, &device)
        .unwrap()
        .restore_optimizer(&mut again)
        .unwrap();
    assert_eq!(again.steps(), 1);
    let (a, b) = (sgd.state().0, again.state().0);
    assert_eq!(a[0].0, "tok_emb.weight.momentum_buffer");
    assert_eq!(a[0].1.to_bytes().unwrap(), b[0].1.to_bytes().unwrap());
}

#[test]
fn files_that_do_not_fit_are_typed_errors_naming_the_key_and_change_nothing() {
    let device = device();
    let path = TempPath::new("mismatch");
    let mut init = Initializer::new(&device, DType::F32, 5);
    let small = mlp(&mut init, &[4, 8, 3], Activation::Relu).unwrap();
    checkpoint::save(&path.0, &small, None, &BTreeMap::new()).unwrap();
    let saved = checkpoint::load(&path.0, &device).unwrap();

    let mut deeper = mlp(&mut init, &[4, 8, 8, 3], Activation::Relu).unwrap();
    let before = bytes(&deeper);
    let err = saved.restore_model(&mut deeper).unwrap_err();
    assert!(
        matches!(&err, Error::Checkpoint { key, .. } if key == "2.weight"),
        "{err}"
    );
    assert!(
        err.to_string().contains("[3, 8]") && err.to_string().contains("[8, 8]"),
        "{err}"
    );
    assert_eq!(bytes(&deeper), before, "a failed restore changes nothing");

    let mut biased = Linear::new(&mut init, 4, 8, true).unwrap();
    let unbiased = Linear::new(&mut init, 4, 8, false).unwrap();
    let other_path = TempPath::new("unbiased");
    checkpoint::save(&other_path.0, &unbiased, None, &BTreeMap::new()).unwrap();
    let err = checkpoint::load(&other_path.0, &device)
        .unwrap()
        .restore_model(&mut biased)
        .unwrap_err();
    assert!(
        matches!(&err, Error::Checkpoint { key, .. } if key == "bias"),
        "{err}"
    );
    assert!(err.to_string().contains("missing"), "{err}");

    let mut wider = mlp(&mut init, &[4, 9, 3], Activation::Relu).unwrap();
    let err = saved.restore_model(&mut wider).unwrap_err();
    assert!(
        matches!(&err, Error::Checkpoint { key, .. } if key == "0.weight"),
        "{err}"
    );
    assert!(
        err.to_string().contains("[8, 4]") && err.to_string().contains("[9, 4]"),
        "{err}"
    );

    let mut doubled = mlp(
        &mut Initializer::new(&device, DType::F64, 5),
        &[4, 8, 3],
        Activation::Relu,
    )
    .unwrap();
    let err = saved.restore_model(&mut doubled).unwrap_err();
    assert!(
        err.to_string().contains("f32") && err.to_string().contains("f64"),
        "{err}"
    );

    let mut adamw = AdamW::new(&small, AdamWConfig::default()).unwrap();
    let err = saved.restore_optimizer(&mut adamw).unwrap_err();
    assert!(err.to_string().contains("optimizer.steps"), "{err}");
}

#[test]
fn truncated_corrupt_and_missing_files_are_typed_errors() {
    let device = device();
    let path = TempPath::new("corrupt");
    let model = mlp(
        &mut Initializer::new(&device, DType::F32, 5),
        &[4, 8, 3],
        Activation::Relu,
    )
    .unwrap();
    checkpoint::save(&path.0, &model, None, &BTreeMap::new()).unwrap();
    let whole = std::fs::read(&path.0).unwrap();
    for cut in [whole.len() - 1, whole.len() / 2, 9, 3, 0] {
        std::fs::write(&path.0, &whole[..cut]).unwrap();
        let err = checkpoint::load(&path.0, &device).unwrap_err();
        assert!(
            matches!(err, Error::CorruptCheckpoint { .. }),
            "cut at {cut}: {err}"
        );
    }
    let mut garbled = whole.clone();
    garbled[12] = b'{';
    garbled[20] ^= 0x55;
    std::fs::write(&path.0, &garbled).unwrap();
    assert!(matches!(
        checkpoint::load(&path.0, &device),
        Err(Error::CorruptCheckpoint { .. })
    ));
    std::fs::remove_file(&path.0).unwrap();
    let err = checkpoint::load(&path.0, &device).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(
        err.to_string().contains(&*path.0.to_string_lossy()),
        "{err}"
    );
}

#[test]
fn saving_replaces_the_file_whole_and_leaves_no_temporary_behind() {
    let device = device();
    let path = TempPath::new("atomic");
    let mut init = Initializer::new(&device, DType::F32, 6);
    let first = mlp(&mut init, &[4, 8, 3], Activation::Relu).unwrap();
    let second = mlp(&mut init, &[4, 8, 3], Activation::Relu).unwrap();
    checkpoint::save(&path.0, &first, None, &BTreeMap::new()).unwrap();
    checkpoint::save(&path.0, &second, None, &BTreeMap::new()).unwrap();
    let mut restored = mlp(&mut init, &[4, 8, 3], Activation::Relu).unwrap();
    checkpoint::load(&path.0, &device)
        .unwrap()
        .restore_model(&mut restored)
        .unwrap();
    assert_eq!(bytes(&restored), bytes(&second));
    let dir = path.0.parent().unwrap();
    let stem = path.0.file_name().unwrap().to_string_lossy().into_owned();
    let leftovers = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{stem}.tmp"))
        })
        .count();
    assert_eq!(leftovers, 0);
    // Saving where no file can be written fails with the path and leaves nothing.
    let nowhere = path
        .0
        .with_file_name("no-such-directory")
        .join("model.safetensors");
    let err = checkpoint::save(&nowhere, &first, None, &BTreeMap::new()).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err}");
}
