//! Checkpoints: bit-exact round trips, a resumed run that continues the same trajectory, and
//! typed errors for files that do not fit.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{IGNORED, copy_batch, device, parameter_bytes, seed};
use headroom_autograd::{Tape, Tensor};
use headroom_kernels::{DType, Device};
use headroom_nn::loss::cross_entropy;
use headroom_nn::{
    Activation, AdamW, AdamWConfig, Error, Family, Gpt, GptConfig, Initializer, Linear, Module,
    Optimizer, Sgd, SgdConfig, StatePrecision, checkpoint, mlp,
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
    tie_embeddings: false,
    family: Family::Gpt2,
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
    assert_ne!(parameter_bytes(&other), parameter_bytes(&gpt));
    saved.restore_model(&mut other).unwrap();
    saved.restore_optimizer(&mut other_adamw).unwrap();
    assert_eq!(parameter_bytes(&other), parameter_bytes(&gpt));
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
    let adamw = |gpt: &Gpt, precision| {
        let config = AdamWConfig {
            lr: 3e-3,
            ..Default::default()
        };
        AdamW::with_state(gpt, config, precision).unwrap()
    };
    let run = |resume_at: Option<u64>, precision: StatePrecision| {
        let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 7), CONFIG).unwrap();
        let mut optimizer = adamw(&gpt, precision);
        let mut losses = Vec::new();
        for step in 0..8 {
            if Some(step) == resume_at {
                let dropout_calls = gpt.dropout_counter().get();
                let mut meta = metadata(step);
                meta.insert("dropout_calls".into(), dropout_calls.to_string());
                checkpoint::save(&path.0, &gpt, Some(&optimizer), &meta).unwrap();
                drop((gpt, optimizer));
                // A new process builds the model from the same configuration (seed included:
                // it also seeds the dropout masks), then loads the step-4 weights over it.
                gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 7), CONFIG).unwrap();
                optimizer = adamw(&gpt, precision);
                let saved = checkpoint::load(&path.0, &device).unwrap();
                saved.restore_model(&mut gpt).unwrap();
                saved.restore_optimizer(&mut optimizer).unwrap();
                gpt.dropout_counter()
                    .set(saved.metadata()["dropout_calls"].parse().unwrap());
            }
            losses.push(train_step(&device, &mut gpt, &mut optimizer, step).to_bits());
        }
        (losses, parameter_bytes(&gpt))
    };
    // Narrow state is rounded at random, from the step and the parameter alone: a resumed run
    // draws what an unbroken one does.
    for precision in [
        StatePrecision::Full,
        StatePrecision::Bf16,
        StatePrecision::Int8,
    ] {
        let (straight, straight_weights) = run(None, precision);
        let (resumed, resumed_weights) = run(Some(4), precision);
        assert_eq!(
            straight, resumed,
            "{precision:?}: the same losses, bit for bit, with dropout on"
        );
        assert_eq!(straight_weights, resumed_weights, "{precision:?}");
    }
}

#[test]
fn narrow_state_is_saved_as_it_is_kept_and_refused_by_an_optimizer_that_keeps_another() {
    let device = device();
    let path = TempPath::new("int8");
    let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 4), CONFIG).unwrap();
    let mut int8 = AdamW::with_state(&gpt, AdamWConfig::default(), StatePrecision::Int8).unwrap();
    let full = AdamW::new(&gpt, AdamWConfig::default()).unwrap();
    // Two moments of 2 bytes a parameter less than 8, and a scale per block of 2048.
    let params = gpt.parameter_count() as u64;
    assert!(
        int8.state_bytes() < full.state_bytes() / 3,
        "{} against {}",
        int8.state_bytes(),
        full.state_bytes()
    );
    assert!(int8.state_bytes() >= 2 * params);
    train_step(&device, &mut gpt, &mut int8, 0);
    checkpoint::save(&path.0, &gpt, Some(&int8), &BTreeMap::new()).unwrap();
    let saved = checkpoint::load(&path.0, &device).unwrap();
    let names = saved.names();
    assert!(
        names.contains(&"optimizer.head.weight.exp_avg_sq".to_owned()),
        "{names:?}"
    );
    assert!(names.contains(&"optimizer.head.weight.exp_avg_sq_absmax".to_owned()));
    let mut bf16 = AdamW::with_state(&gpt, AdamWConfig::default(), StatePrecision::Bf16).unwrap();
    let err = saved.restore_optimizer(&mut bf16).unwrap_err();
    assert!(
        err.to_string().contains("tok_emb.weight.exp_avg") && err.to_string().contains("u8"),
        "{err}"
    );
    assert_eq!(bf16.steps(), 0, "a refused restore changes nothing");
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
    let before = parameter_bytes(&deeper);
    let err = saved.restore_model(&mut deeper).unwrap_err();
    assert!(
        matches!(&err, Error::Checkpoint { key, .. } if key == "2.weight"),
        "{err}"
    );
    assert!(
        err.to_string().contains("[3, 8]") && err.to_string().contains("[8, 8]"),
        "{err}"
    );
    assert_eq!(
        parameter_bytes(&deeper),
        before,
        "a failed restore changes nothing"
    );

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
    assert_eq!(parameter_bytes(&restored), parameter_bytes(&second));
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

/// A GPT and its AdamW state after two steps, saved to `path` with a trainer-like JSON state.
fn save_trained_gpt(device: &Device, path: &TempPath) -> (Gpt, AdamW) {
    let mut gpt = Gpt::new(&mut Initializer::new(device, DType::F32, 9), CONFIG).unwrap();
    let mut adamw = AdamW::new(&gpt, AdamWConfig::default()).unwrap();
    for step in 0..2 {
        train_step(device, &mut gpt, &mut adamw, step);
    }
    let meta = BTreeMap::from([(
        "headroom.trainer".to_owned(),
        r#"{"step":2,"dropout_calls":1234}"#.to_owned(),
    )]);
    checkpoint::save(&path.0, &gpt, Some(&adamw), &meta).unwrap();
    (gpt, adamw)
}

/// Where `name`'s data lies in the safetensors file `file`.
fn data_range(file: &[u8], name: &str) -> std::ops::Range<usize> {
    let (header_len, header) = safetensors::SafeTensors::read_metadata(file).unwrap();
    let (start, end) = header.info(name).unwrap().data_offsets;
    8 + header_len + start..8 + header_len + end
}

/// Rewrites the checkpoint at `path` with the same tensors and its metadata changed by `edit`,
/// as another tool would (no checksums of its own).
fn rewrite(path: &TempPath, edit: impl FnOnce(&mut std::collections::HashMap<String, String>)) {
    let file = std::fs::read(&path.0).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&file).unwrap();
    let mut metadata = header.metadata().clone().unwrap_or_default();
    edit(&mut metadata);
    let tensors = safetensors::SafeTensors::deserialize(&file)
        .unwrap()
        .tensors();
    let bytes = safetensors::tensor::serialize(tensors, Some(metadata)).unwrap();
    std::fs::write(&path.0, bytes).unwrap();
}

#[test]
fn a_flipped_byte_in_any_tensor_is_caught_on_load_naming_the_tensor() {
    let device = device();
    let path = TempPath::new("flipped");
    let (gpt, _) = save_trained_gpt(&device, &path);
    let whole = std::fs::read(&path.0).unwrap();
    let saved = checkpoint::load(&path.0, &device).unwrap();
    for name in [
        "blocks.1.attn.qkv.weight",
        "optimizer.blocks.0.mlp.fc.weight.exp_avg",
        "ln_f.bias",
    ] {
        assert!(saved.names().contains(&name.to_owned()), "{name}");
        let range = data_range(&whole, name);
        for at in [range.start, range.start + range.len() / 2, range.end - 1] {
            let mut flipped = whole.clone();
            flipped[at] ^= 0x01;
            std::fs::write(&path.0, &flipped).unwrap();
            let err = checkpoint::load(&path.0, &device).unwrap_err();
            assert!(
                matches!(&err, Error::Checkpoint { key, .. } if key == name),
                "byte {at} of {name}: {err}"
            );
            let message = err.to_string();
            assert!(
                message.contains(name)
                    && message.contains("does not match the checksum saved with it")
                    && message.contains("corrupted"),
                "{message}"
            );
        }
    }
    // The untouched file still loads and restores.
    std::fs::write(&path.0, &whole).unwrap();
    let mut other = Gpt::new(&mut Initializer::new(&device, DType::F32, 2), CONFIG).unwrap();
    let mut other_adamw = AdamW::new(&other, AdamWConfig::default()).unwrap();
    let saved = checkpoint::load(&path.0, &device).unwrap();
    saved.restore_model(&mut other).unwrap();
    saved.restore_optimizer(&mut other_adamw).unwrap();
    assert_eq!(parameter_bytes(&other), parameter_bytes(&gpt));
}

#[test]
fn a_flipped_byte_in_the_metadata_is_caught_naming_the_metadata_checksum() {
    let device = device();
    let path = TempPath::new("flipped-metadata");
    save_trained_gpt(&device, &path);
    let saved = checkpoint::load(&path.0, &device).unwrap();
    // The checksums are checked and left out; the caller's keys are as saved.
    assert_eq!(
        saved.metadata().keys().collect::<Vec<_>>(),
        ["headroom.trainer", "optimizer.steps"]
    );
    assert_eq!(
        saved.metadata()["headroom.trainer"],
        r#"{"step":2,"dropout_calls":1234}"#
    );
    let whole = std::fs::read(&path.0).unwrap();
    // A digit of the trainer's state, changed so that the header stays valid JSON.
    let at = whole.windows(4).position(|w| w == b"1234").unwrap() + 3;
    let mut flipped = whole.clone();
    flipped[at] = b'5';
    std::fs::write(&path.0, &flipped).unwrap();
    let err = checkpoint::load(&path.0, &device).unwrap_err();
    assert!(
        matches!(&err, Error::Checkpoint { key, .. } if key == checkpoint::METADATA_CHECKSUM),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("headroom.trainer") && message.contains("does not match"),
        "{message}"
    );
}

#[test]
fn checkpoints_without_checksums_still_load() {
    let device = device();
    let path = TempPath::new("no-checksums");
    let (gpt, adamw) = save_trained_gpt(&device, &path);
    rewrite(&path, |metadata| {
        metadata.remove(checkpoint::TENSOR_CHECKSUMS);
        metadata.remove(checkpoint::METADATA_CHECKSUM);
    });
    let mut other = Gpt::new(&mut Initializer::new(&device, DType::F32, 2), CONFIG).unwrap();
    let mut other_adamw = AdamW::new(&other, AdamWConfig::default()).unwrap();
    let saved = checkpoint::load(&path.0, &device).unwrap();
    saved.restore_model(&mut other).unwrap();
    saved.restore_optimizer(&mut other_adamw).unwrap();
    assert_eq!(parameter_bytes(&other), parameter_bytes(&gpt));
    assert_eq!(other_adamw.steps(), adamw.steps());
    assert_eq!(saved.metadata()["optimizer.steps"], "2");

    // A file written by safetensors alone, without metadata.
    let plain = TempPath::new("plain");
    let arrays: Vec<_> = gpt
        .named_parameters()
        .into_iter()
        .map(|(name, t)| {
            (
                name,
                t.array().to_bytes().unwrap(),
                t.shape().dims().to_vec(),
            )
        })
        .collect();
    let views = arrays.iter().map(|(name, bytes, dims)| {
        let view =
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, dims.clone(), bytes);
        (name.clone(), view.unwrap())
    });
    let file = safetensors::tensor::serialize(views, None).unwrap();
    std::fs::write(&plain.0, file).unwrap();
    let mut third = Gpt::new(&mut Initializer::new(&device, DType::F32, 3), CONFIG).unwrap();
    let saved = checkpoint::load(&plain.0, &device).unwrap();
    assert!(saved.metadata().is_empty());
    saved.restore_model(&mut third).unwrap();
    assert_eq!(parameter_bytes(&third), parameter_bytes(&gpt));
}

#[test]
fn malformed_checksum_metadata_is_an_error_naming_the_key() {
    let device = device();
    let path = TempPath::new("malformed");
    let (gpt, adamw) = save_trained_gpt(&device, &path);
    let whole = std::fs::read(&path.0).unwrap();
    let (tensors, metadata) = (checkpoint::TENSOR_CHECKSUMS, checkpoint::METADATA_CHECKSUM);
    type Edit = fn(&mut std::collections::HashMap<String, String>);
    let cases: [(Edit, &str, &str); 7] = [
        (
            |m| drop(m.insert(checkpoint::TENSOR_CHECKSUMS.into(), "not json".into())),
            tensors,
            "not a JSON object",
        ),
        (
            |m| drop(m.insert(checkpoint::TENSOR_CHECKSUMS.into(), "[1, 2]".into())),
            tensors,
            "not a JSON object",
        ),
        (
            |m| {
                let json = &m[checkpoint::TENSOR_CHECKSUMS];
                let json = json.replacen('{', r#"{"no.such.tensor":"00000000","#, 1);
                m.insert(checkpoint::TENSOR_CHECKSUMS.into(), json);
            },
            tensors,
            "no.such.tensor",
        ),
        (
            |m| {
                let json = &m[checkpoint::TENSOR_CHECKSUMS];
                let json = json.replacen(r#""head.weight":""#, r#""head.weight":"xyz"#, 1);
                m.insert(checkpoint::TENSOR_CHECKSUMS.into(), json);
            },
            tensors,
            "head.weight",
        ),
        (
            |m| drop(m.insert(checkpoint::TENSOR_CHECKSUMS.into(), "{}".into())),
            "blocks.0.attn.proj.bias",
            "no checksum saved",
        ),
        (
            |m| drop(m.insert(checkpoint::METADATA_CHECKSUM.into(), "12345".into())),
            metadata,
            "12345",
        ),
        (
            |m| drop(m.remove(checkpoint::METADATA_CHECKSUM)),
            metadata,
            "missing",
        ),
    ];
    for (edit, key, says) in cases {
        std::fs::write(&path.0, &whole).unwrap();
        rewrite(&path, edit);
        let err = checkpoint::load(&path.0, &device).unwrap_err();
        assert!(
            matches!(&err, Error::Checkpoint { key: k, .. } if k == key),
            "{key}: {err}"
        );
        assert!(err.to_string().contains(says), "{says}: {err}");
    }
    // The keys are reserved.
    let reserved = BTreeMap::from([(tensors.to_owned(), "{}".to_owned())]);
    let err = checkpoint::save(&path.0, &gpt, Some(&adamw), &reserved).unwrap_err();
    assert!(
        matches!(&err, Error::Checkpoint { key, .. } if key == tensors),
        "{err}"
    );
}

#[test]
fn stale_temporaries_of_this_path_are_removed_and_nothing_else() {
    let device = device();
    let dir =
        std::env::temp_dir().join(format!("headroom-stale-{}-{}", std::process::id(), seed()));
    struct RemoveDir(PathBuf);
    impl Drop for RemoveDir {
        fn drop(&mut self) {
            std::fs::remove_dir_all(&self.0).ok();
        }
    }
    let _guard = RemoveDir(dir.clone());
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("model.safetensors");
    let model = mlp(
        &mut Initializer::new(&device, DType::F32, 5),
        &[4, 8, 3],
        Activation::Relu,
    )
    .unwrap();
    checkpoint::save(&path, &model, None, &BTreeMap::new()).unwrap();
    let other_pid = u64::from(std::process::id()) + 1;
    let stale = [
        format!("model.safetensors.tmp-{other_pid}"),
        "model.safetensors.tmp-1".to_owned(),
    ];
    let kept = [
        format!("model.safetensors.tmp-{}", std::process::id()),
        "model.safetensors.tmp-".to_owned(),
        "model.safetensors.tmp-12a".to_owned(),
        "model.safetensors.tmp-123.bak".to_owned(),
        "model.safetensors.tmp".to_owned(),
        "other.safetensors.tmp-123".to_owned(),
        "xmodel.safetensors.tmp-123".to_owned(),
        "model.tmp-123".to_owned(),
    ];
    for name in stale.iter().chain(&kept) {
        std::fs::write(dir.join(name), b"half a checkpoint").unwrap();
    }
    std::fs::create_dir(dir.join("model.safetensors.tmp-77")).unwrap();

    let removed = checkpoint::remove_stale_temporaries(&path).unwrap();
    let mut expected: Vec<PathBuf> = stale.iter().map(|n| dir.join(n)).collect();
    expected.sort();
    assert_eq!(removed, expected);
    for name in &stale {
        assert!(!dir.join(name).exists(), "{name}");
    }
    for name in &kept {
        assert!(dir.join(name).exists(), "{name}");
    }
    assert!(dir.join("model.safetensors.tmp-77").is_dir());
    checkpoint::load(&path, &device).unwrap();
    assert!(
        checkpoint::remove_stale_temporaries(&path)
            .unwrap()
            .is_empty()
    );

    let missing = dir.join("no-such-directory").join("model.safetensors");
    assert!(
        checkpoint::remove_stale_temporaries(&missing)
            .unwrap()
            .is_empty()
    );
}
