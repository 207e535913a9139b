//! LoRA over a base stored quantized (QLoRA): the same outputs and adapter gradients as the same
//! model with the dequantized weights as tensors, to the bit; adapter gradients against finite
//! differences; a Hugging Face model quantized as it loads; exports that would leave the codes
//! out refused; merging gives tensors back.

mod common;

use common::{check_layer, device, recorded_step, seed, small_llama};
use headroom_autograd::{Tape, Tensor};
use headroom_kernels::ops::quant::QuantFormat;
use headroom_kernels::quantize::double::DoubleQuantized;
use headroom_kernels::{DType, Device};
use headroom_nn::layers::linear_weight::Weight;
use headroom_nn::lora::{self, LoraConfig, LoraTargets};
use headroom_nn::{Family, Gpt, GptConfig, Initializer, Module, Recompute, hf};

fn llama() -> GptConfig {
    small_llama(32, 8, 48)
}

fn gpt2() -> GptConfig {
    GptConfig {
        family: Family::Gpt2,
        ..llama()
    }
}

/// A model of `config` in `dtype`, its blocks' weights stored in `format`, with rank-2 adapters
/// on every linear layer whose `B` is drawn away from zero.
fn qlora(device: &Device, config: GptConfig, dtype: DType, format: QuantFormat) -> Gpt {
    let mut init = Initializer::new(device, dtype, 3);
    init.set_quantize(Some(format));
    let mut gpt = Gpt::new(&mut init, config).unwrap();
    let adapters = LoraConfig {
        rank: 2,
        alpha: 3.0,
        targets: LoraTargets::default(),
        ..LoraConfig::default()
    };
    lora::attach(&mut gpt, &adapters, &mut Initializer::new(device, dtype, 4)).unwrap();
    gpt.visit_mut(&mut |name, t| {
        if name.ends_with("lora_B.weight") {
            let values: Vec<f64> = (0..t.numel())
                .map(|i| ((i % 7) as f64 - 3.0) / 20.0)
                .collect();
            *t = Tensor::variable(
                Tensor::from_f64(t.device(), t.dims(), dtype, &values)?.into_array(),
            );
        }
        Ok(())
    })
    .unwrap();
    gpt
}

/// `gpt` with each weight stored quantized replaced by a frozen tensor of its values.
fn dequantized(gpt: &Gpt) -> Gpt {
    let mut dense = gpt.clone();
    dense.tok_emb.weight = Weight::Dense(dense.tok_emb.weight.values().unwrap());
    for block in &mut dense.blocks {
        for (_, layer) in block.linears_mut() {
            layer.weight = Weight::Dense(layer.weight.values().unwrap());
        }
    }
    assert_eq!(dense.quantized_count(), 0);
    dense
}

/// A weight's values (dequantized when stored quantized), as f32.
fn f32_values(weight: &Weight) -> Vec<f32> {
    let values = weight.values().unwrap().to_f64().unwrap();
    values.iter().map(|&v| v as f32).collect()
}

fn ids(device: &Device, len: usize) -> Tensor {
    let ids: Vec<u32> = (0..2 * len).map(|i| (i * 7 + 3) as u32 % 11).collect();
    Tensor::from_host(device, [2, len], &ids).unwrap()
}

/// The activations the tape keeps for `gpt`'s loss on `x` and `y`: each buffer once, with its
/// shape and dtype.
fn saved_activations(gpt: &Gpt, x: &Tensor, y: &Tensor) -> Vec<(Vec<usize>, DType)> {
    let tape = Tape::new();
    let _loss = tape
        .record(|| {
            gpt.loss(x, y, None).map_err(|e| match e {
                headroom_nn::Error::Autograd(e) => e,
                other => panic!("{other}"),
            })
        })
        .unwrap();
    let mut seen = std::collections::HashSet::new();
    let ops = tape.saved().ops.into_iter().flat_map(|op| op.arrays);
    ops.filter(|a| a.tag.is_activations() && seen.insert(a.addr))
        .map(|a| (a.shape.dims().to_vec(), a.dtype))
        .collect()
}

#[test]
fn a_quantized_base_gives_the_dequantized_models_loss_and_gradients_to_the_bit() {
    let device = device();
    for config in [llama(), gpt2()] {
        for dtype in [DType::F32, DType::BF16] {
            for format in [QuantFormat::Nf4, QuantFormat::Int8] {
                let mut gpt = qlora(&device, config, dtype, format);
                let what = format!("{:?} {dtype} {format}", config.family);
                // Every linear layer of the blocks stored quantized; the trained scalars are
                // the adapters', the frozen ones count the stored weights.
                assert!(gpt.quantized_count() > 0, "{what}");
                let mut dense = dequantized(&gpt);
                assert_eq!(gpt.frozen_count(), dense.frozen_count(), "{what}");
                assert_eq!(gpt.parameter_count(), dense.parameter_count(), "{what}");
                let (x, y) = (ids(&device, 6), ids(&device, 6));
                for recompute in [Recompute::None, Recompute::Cheap, Recompute::Blocks] {
                    gpt.set_recompute(recompute);
                    dense.set_recompute(recompute);
                    let what = format!("{what} {recompute:?}");
                    let (loss, grads, _) = recorded_step(&gpt, &device, || gpt.loss(&x, &y, None));
                    let (dense_loss, dense_grads, _) =
                        recorded_step(&dense, &device, || dense.loss(&x, &y, None));
                    assert_eq!(loss, dense_loss, "{what}");
                    assert_eq!(grads, dense_grads, "{what}");
                    assert!(grads.iter().all(|g| g.iter().any(|&v| v != 0.0)), "{what}");
                    // The codes replace the weights, and the ops that compute an operand
                    // again take them as they take tensors: the same activations are kept.
                    assert_eq!(
                        saved_activations(&gpt, &x, &y),
                        saved_activations(&dense, &x, &y),
                        "{what}: activations kept"
                    );
                }
            }
        }
    }
}

#[test]
fn generation_over_a_quantized_base_gives_the_dequantized_models_logits() {
    let device = device();
    // Layers of partial blocks (dequantized for each product), then of whole blocks (each
    // step's few rows multiplied on the NF4 codes as stored), in bf16 and f32.
    for (config, dtype) in [
        (llama(), DType::BF16),
        (small_llama(64, 16, 128), DType::BF16),
        (small_llama(64, 16, 128), DType::F32),
    ] {
        let gpt = qlora(&device, config, dtype, QuantFormat::Nf4);
        let dense = dequantized(&gpt);
        let (mut ours, mut theirs) = (gpt.kv_cache(2), dense.kv_cache(2));
        let steps = [ids(&device, 3), ids(&device, 1), ids(&device, 1)];
        for step in &steps {
            let a = gpt
                .forward_cached(step, &mut ours)
                .unwrap()
                .to_f64()
                .unwrap();
            let b = dense
                .forward_cached(step, &mut theirs)
                .unwrap()
                .to_f64()
                .unwrap();
            assert_eq!(a, b, "{dtype}");
        }
        assert_eq!(ours.len(), 5);
    }
}

#[test]
fn adapter_gradients_over_a_quantized_base_match_finite_differences() {
    let device = device();
    seed();
    for format in [QuantFormat::Nf4, QuantFormat::Int8] {
        let gpt = qlora(&device, llama(), DType::F64, format);
        check_layer("adapted quantized decoder", &gpt, &ids(&device, 4), 1e-6);
    }
}

#[test]
fn a_hugging_face_model_is_quantized_as_it_loads() {
    let device = device();
    let dir = std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/tiny-llama3"
    ));
    let config = hf::LlamaConfig::read(dir).unwrap().gpt_config(0.0);
    let mut dense = Gpt::new(&mut Initializer::new(&device, DType::F32, 1), config).unwrap();
    hf::load_llama(dir, &mut dense).unwrap();
    let mut init = Initializer::new(&device, DType::F32, 2);
    init.set_quantize(Some(QuantFormat::Nf4));
    let mut stored = Gpt::new(&mut init, config).unwrap();
    hf::load_llama(dir, &mut stored).unwrap();
    // Every stored weight holds the loaded tensor's values as NF4 gives them back; every other
    // tensor is the loaded one.
    let mut values = dequantized(&stored);
    for (block, loaded) in values.blocks.iter_mut().zip(dense.blocks.iter_mut()) {
        for ((name, ours), (_, theirs)) in block.linears_mut().into_iter().zip(loaded.linears_mut())
        {
            let want = DoubleQuantized::quantize(&f32_values(&theirs.weight), 64).unwrap();
            assert_eq!(f32_values(&ours.weight), want.dequantize(), "{name}");
        }
    }
    // So does the token embedding (untied here).
    let (theirs, ours) = (
        f32_values(&dense.tok_emb.weight),
        f32_values(&values.tok_emb.weight),
    );
    assert_eq!(
        ours,
        DoubleQuantized::quantize(&theirs, 64).unwrap().dequantize()
    );
    let mut rest = Vec::new();
    stored.visit(&mut |name, t| rest.push((name.to_owned(), t.to_f64().unwrap())));
    let mut want = Vec::new();
    dense.visit(&mut |name, t| {
        let quantized = name == "tok_emb.weight"
            || name.starts_with("blocks.") && !name.contains("norm") && !name.contains("ln");
        if !quantized {
            want.push((name.to_owned(), t.to_f64().unwrap()));
        }
    });
    assert_eq!(rest, want);
    // The GPT-2 loader does not fill quantized storage, and says so.
    let mut gpt2_init = Initializer::new(&device, DType::F32, 2);
    gpt2_init.set_quantize(Some(QuantFormat::Nf4));
    let mut quantized_gpt2 = Gpt::new(&mut gpt2_init, gpt2()).unwrap();
    let gpt2_dir = dir.with_file_name("tiny-gpt2");
    let err = hf::load_gpt2(&gpt2_dir, &mut quantized_gpt2).unwrap_err();
    assert!(err.to_string().contains("quantized"), "{err}");
}

#[test]
fn exports_refuse_quantized_weights_and_merging_makes_them_tensors() {
    let device = device();
    let gpt = qlora(&device, llama(), DType::F32, QuantFormat::Nf4);
    let out = std::env::temp_dir().join(format!("headroom-qlora-export-{}", std::process::id()));
    let options = hf::LlamaExport {
        bos: None,
        eos: None,
        dtype: None,
        shard_bytes: hf::DEFAULT_SHARD_BYTES,
        overwrite: false,
    };
    let err = hf::export_llama(&gpt, &out, &options).unwrap_err();
    assert!(err.to_string().contains("stored quantized"), "{err}");
    assert!(!out.exists(), "nothing is written");
    let x = ids(&device, 5);
    let before = gpt.forward(&x).unwrap().to_f64().unwrap();
    let mut merged = gpt.clone();
    assert_eq!(lora::merge(&mut merged).unwrap(), 10);
    assert_eq!(merged.quantized_count(), 0);
    assert_eq!(merged.frozen_count(), 0);
    let after = merged.forward(&x).unwrap().to_f64().unwrap();
    for (a, b) in before.iter().zip(&after) {
        assert!((a - b).abs() < 1e-4, "{a} against {b}");
    }
}
