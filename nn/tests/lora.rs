//! LoRA adapters over a frozen decoder: outputs unchanged at the start, gradients against
//! finite differences and against the merged weights, the same under every recomputation,
//! and only the adapters trained.

mod common;

use common::{check_layer, device, seed, small_llama};
use headroom_alloc::Tag;
use headroom_autograd::{Tape, Tensor};
use headroom_kernels::{Array, DType, Device};
use headroom_nn::lora::{self, LoraConfig, LoraTargets};
use headroom_nn::{
    AdamW, AdamWConfig, Family, Gpt, GptConfig, Initializer, Module, Optimizer, Recompute,
};

fn llama() -> GptConfig {
    small_llama(16, 4, 24)
}

fn gpt2() -> GptConfig {
    GptConfig {
        family: Family::Gpt2,
        ..llama()
    }
}

/// Uniform numbers in [-1, 1) from `state` (SplitMix64).
fn next(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// Every tensor of `gpt` redrawn uniform in [-0.5, 0.5) (plus 1 for norms' scales), keeping
/// whether it is a variable: `B` away from zero, so that every adapter's gradient is nonzero.
fn redraw(gpt: &mut Gpt, seed: u64) {
    let mut state = seed;
    gpt.visit_mut(&mut |name, t| {
        let shift = match name.contains("ln") {
            true => 1.0,
            false => 0.0,
        };
        let values: Vec<f64> = (0..t.numel())
            .map(|_| shift + 0.5 * next(&mut state))
            .collect();
        let device = t.device().clone();
        let _weights = device.scoped_tag(Tag::WEIGHTS);
        let array = Array::from_f64(t.device(), t.shape().clone(), t.dtype(), &values)?;
        *t = match t.is_variable() {
            true => Tensor::variable(array),
            false => Tensor::new(array),
        };
        Ok(())
    })
    .unwrap();
}

/// A model of `config` in `dtype` with adapters of `lora` (`B` redrawn unless `fresh`).
fn adapted(device: &Device, config: GptConfig, dtype: DType, lora: &LoraConfig) -> Gpt {
    let mut gpt = Gpt::new(&mut Initializer::new(device, dtype, 3), config).unwrap();
    lora::attach(&mut gpt, lora, &mut Initializer::new(device, dtype, 4)).unwrap();
    redraw(&mut gpt, 5);
    gpt
}

fn ids(device: &Device, batch: usize, len: usize) -> Tensor {
    let ids: Vec<u32> = (0..batch * len).map(|i| (i * 7 + 3) as u32 % 11).collect();
    Tensor::from_host(device, [batch, len], &ids).unwrap()
}

fn rank(rank: usize, targets: LoraTargets) -> LoraConfig {
    LoraConfig {
        rank,
        alpha: 3.0,
        targets,
        ..LoraConfig::default()
    }
}

fn names(list: &[&str]) -> LoraTargets {
    LoraTargets::Names(list.iter().map(|s| s.to_string()).collect())
}

#[test]
fn attaching_freezes_the_base_and_keeps_its_outputs() {
    let device = device();
    for config in [llama(), gpt2()] {
        let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 1), config).unwrap();
        let all = gpt.parameter_count();
        let ids = ids(&device, 2, 5);
        let before = gpt.forward(&ids).unwrap().to_f64().unwrap();
        let lora = rank(2, LoraTargets::default());
        let init = &mut Initializer::new(&device, DType::F32, 2);
        let attached = lora::attach(&mut gpt, &lora, init).unwrap();
        assert_eq!(gpt.forward(&ids).unwrap().to_f64().unwrap(), before);
        assert_eq!(attached.frozen, all);
        assert_eq!(gpt.frozen_count(), all);
        assert_eq!(attached.trainable, gpt.parameter_count());
        for (name, _) in gpt.named_parameters() {
            assert!(lora::is_adapter_name(&name), "{name} is trained");
        }
    }
}

#[test]
fn adapters_are_named_and_shaped_as_peft_lays_them_out() {
    let device = device();
    let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 1), llama()).unwrap();
    let lora = rank(2, names(&["k_proj", "v_proj", "down_proj"]));
    let attached = lora::attach(
        &mut gpt,
        &lora,
        &mut Initializer::new(&device, DType::F32, 2),
    )
    .unwrap();
    assert_eq!(attached.modules, 6);
    let shapes: Vec<(String, Vec<usize>)> = gpt
        .named_parameters()
        .into_iter()
        .map(|(n, t)| (n, t.dims().to_vec()))
        .collect();
    let expect = [
        ("blocks.0.attn.qkv.k_proj.lora_A.weight", vec![2, 16]),
        ("blocks.0.attn.qkv.k_proj.lora_B.weight", vec![8, 2]),
        ("blocks.0.attn.qkv.v_proj.lora_A.weight", vec![2, 16]),
        ("blocks.0.attn.qkv.v_proj.lora_B.weight", vec![8, 2]),
        ("blocks.0.mlp.down.lora_A.weight", vec![2, 24]),
        ("blocks.0.mlp.down.lora_B.weight", vec![16, 2]),
    ];
    for (name, dims) in expect {
        assert!(
            shapes.contains(&(name.to_owned(), dims)),
            "{name} in {shapes:?}"
        );
    }
    assert_eq!(shapes.len(), 12);
    let qkv = &gpt.blocks[1].attn.qkv;
    let modules: Vec<_> = qkv
        .adapter
        .as_ref()
        .unwrap()
        .parts()
        .iter()
        .map(|p| (p.module.clone(), p.start))
        .collect();
    assert_eq!(
        modules,
        [
            ("model.layers.1.self_attn.k_proj".to_owned(), 16),
            ("model.layers.1.self_attn.v_proj".to_owned(), 24)
        ]
    );
}

#[test]
fn a_target_this_family_lacks_is_named_with_the_ones_it_has() {
    let device = device();
    let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 1), gpt2()).unwrap();
    let init = &mut Initializer::new(&device, DType::F32, 2);
    let err = lora::attach(&mut gpt, &rank(2, names(&["q_proj"])), init).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("`q_proj`") && text.contains("c_attn, c_fc, c_proj"),
        "{text}"
    );
    // Nothing was frozen by the refused attach.
    assert_eq!(gpt.frozen_count(), 0);
}

#[test]
fn adapter_gradients_match_finite_differences() {
    let device = device();
    seed();
    for (config, targets) in [
        (
            llama(),
            names(&["q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"]),
        ),
        (gpt2(), LoraTargets::default()),
    ] {
        let gpt = adapted(&device, config, DType::F64, &rank(2, targets));
        check_layer("adapted decoder", &gpt, &ids(&device, 2, 4), 1e-6);
    }
}

/// The tape of `gpt`'s loss on fixed ids and targets of 2 rows of `len`, and the loss.
fn recorded_loss(gpt: &Gpt, device: &Device, len: usize) -> (Tape, Tensor) {
    let (ids, targets) = (ids(device, 2, len), ids(device, 2, len));
    let tape = Tape::new();
    let loss = tape
        .record(|| {
            gpt.loss(&ids, &targets, None).map_err(|e| match e {
                headroom_nn::Error::Autograd(e) => e,
                other => panic!("{other}"),
            })
        })
        .unwrap();
    (tape, loss)
}

/// Loss of `gpt` on fixed ids and targets, and the gradients of its parameters by name.
fn loss_and_grads(gpt: &Gpt, device: &Device) -> (f64, Vec<(String, Vec<f64>)>) {
    let params = gpt.named_parameters();
    let (tape, loss) = recorded_loss(gpt, device, 6);
    let sources: Vec<&Tensor> = params.iter().map(|(_, t)| t).collect();
    let grads = tape.gradient(&loss, &sources).unwrap();
    let named = params
        .iter()
        .map(|(n, t)| {
            (
                n.clone(),
                grads.get(t).map_or(vec![], |g| g.to_f64().unwrap()),
            )
        })
        .collect();
    (loss.to_f64().unwrap()[0], named)
}

#[test]
fn adapter_gradients_follow_from_the_merged_weights_gradients() {
    let device = device();
    let lora = LoraConfig {
        rslora: true,
        ..rank(3, names(&["q_proj", "v_proj", "up_proj"]))
    };
    let gpt = adapted(&device, llama(), DType::F64, &lora);
    let (loss, grads) = loss_and_grads(&gpt, &device);
    let mut merged = gpt.clone();
    assert_eq!(lora::merge(&mut merged).unwrap(), 4);
    let (merged_loss, merged_grads) = loss_and_grads(&merged, &device);
    assert!(
        (loss - merged_loss).abs() < 1e-12,
        "{loss} against {merged_loss}"
    );
    let grad = |list: &[(String, Vec<f64>)], name: &str| {
        list.iter().find(|(n, _)| n == name).unwrap().1.clone()
    };
    let scale = lora.scale();
    for block in 0..2 {
        let layer = &gpt.blocks[block].attn.qkv;
        for part in layer.adapter.as_ref().unwrap().parts() {
            let dw = grad(&merged_grads, &format!("blocks.{block}.attn.qkv.weight"));
            let (a, b) = (part.a.to_f64().unwrap(), part.b.to_f64().unwrap());
            let (r, cols) = (3, 16);
            let rows = part.rows();
            // dA = scale B^T dW[rows], dB = scale dW[rows] A^T.
            let dw_at = |i: usize, j: usize| dw[(part.start + i) * cols + j];
            let prefix = format!("blocks.{block}.attn.qkv.{}", part.name);
            let da = grad(&grads, &format!("{prefix}.lora_A.weight"));
            let db = grad(&grads, &format!("{prefix}.lora_B.weight"));
            for k in 0..r {
                for j in 0..cols {
                    let want: f64 =
                        (0..rows).map(|i| b[i * r + k] * dw_at(i, j)).sum::<f64>() * scale;
                    assert!((da[k * cols + j] - want).abs() < 1e-10, "{prefix} dA");
                }
            }
            for i in 0..rows {
                for k in 0..r {
                    let want: f64 = (0..cols)
                        .map(|j| dw_at(i, j) * a[k * cols + j])
                        .sum::<f64>()
                        * scale;
                    assert!((db[i * r + k] - want).abs() < 1e-10, "{prefix} dB");
                }
            }
        }
    }
}

#[test]
fn every_recomputation_gives_the_same_adapter_gradients() {
    let device = device();
    for config in [llama(), gpt2()] {
        let mut gpt = adapted(
            &device,
            config,
            DType::F32,
            &rank(2, LoraTargets::default()),
        );
        let (loss, grads) = loss_and_grads(&gpt, &device);
        for recompute in [Recompute::Cheap, Recompute::CheapUp, Recompute::Blocks] {
            gpt.set_recompute(recompute);
            let (again, others) = loss_and_grads(&gpt, &device);
            assert_eq!(again, loss, "{recompute:?}");
            for ((name, g), (_, h)) in grads.iter().zip(&others) {
                assert!(!g.is_empty(), "{name} got a gradient");
                // Sums in another order: f32 rounding at the scale of the tensor's gradient.
                let largest = g.iter().fold(0.0f64, |m, x| m.max(x.abs()));
                for (x, y) in g.iter().zip(h) {
                    let bound = 1e-4 * largest;
                    assert!(
                        (x - y).abs() <= bound,
                        "{recompute:?} {name}: {x} against {y}"
                    );
                }
            }
        }
    }
}

#[test]
fn a_step_updates_the_adapters_alone_and_keeps_state_for_them_alone() {
    let device = device();
    let mut gpt = adapted(
        &device,
        llama(),
        DType::F32,
        &rank(2, LoraTargets::default()),
    );
    let base_before: Vec<_> = lora::base_tensors(&gpt)
        .into_iter()
        .map(|(n, t)| (n, t.to_f64().unwrap()))
        .collect();
    let mut adamw = AdamW::new(&gpt, AdamWConfig::default()).unwrap();
    let (state, _) = adamw.state();
    let state_scalars: usize = state.iter().map(|(_, a)| a.numel()).sum();
    drop(state);
    assert_eq!(state_scalars, 2 * gpt.parameter_count());
    let (tape, loss) = recorded_loss(&gpt, &device, 6);
    let params = gpt.parameters();
    let grads = tape
        .gradient(&loss, &params.iter().collect::<Vec<_>>())
        .unwrap();
    assert_eq!(grads.len(), params.len());
    drop((params, tape, loss));
    let adapters_before: Vec<_> = gpt
        .named_parameters()
        .into_iter()
        .map(|(_, t)| t.to_f64().unwrap())
        .collect();
    adamw.step(&mut gpt, &grads, 1.0).unwrap();
    let base_after: Vec<_> = lora::base_tensors(&gpt)
        .into_iter()
        .map(|(n, t)| (n, t.to_f64().unwrap()))
        .collect();
    assert_eq!(base_after, base_before);
    let moved = gpt
        .named_parameters()
        .into_iter()
        .zip(adapters_before)
        .filter(|((_, t), before)| t.to_f64().unwrap() != *before)
        .count();
    assert_eq!(moved, gpt.named_parameters().len());
}

#[test]
fn a_bf16_base_runs_under_f32_adapters() {
    let device = device();
    let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 1), llama()).unwrap();
    lora::attach(
        &mut gpt,
        &rank(2, LoraTargets::default()),
        &mut Initializer::new(&device, DType::F32, 2),
    )
    .unwrap();
    lora::cast_frozen(&mut gpt, DType::BF16).unwrap();
    for (name, t) in lora::base_tensors(&gpt) {
        assert_eq!(t.dtype(), DType::BF16, "{name}");
    }
    for (name, t) in gpt.named_parameters() {
        assert_eq!(t.dtype(), DType::F32, "{name}");
    }
    let _bf16 = headroom_autograd::autocast(DType::BF16);
    let (loss, grads) = loss_and_grads(&gpt, &device);
    assert!(loss.is_finite());
    assert!(grads.iter().all(|(_, g)| !g.is_empty()));
}

/// The activation bytes a forward pass of `gpt` keeps for its backward pass, on `ids`.
fn kept(gpt: &Gpt, device: &Device) -> usize {
    let (tape, _loss) = recorded_loss(gpt, device, 8);
    tape.saved().activation_bytes()
}

#[test]
fn under_cheap_recomputation_adapters_keep_only_their_rank_sized_products() {
    let device = device();
    let config = GptConfig {
        context: 8,
        ..llama()
    };
    let mut full = Gpt::new(&mut Initializer::new(&device, DType::F32, 3), config).unwrap();
    full.set_recompute(Recompute::Cheap);
    let rank_ = 2;
    let mut adapted = adapted(
        &device,
        config,
        DType::F32,
        &rank(rank_, LoraTargets::default()),
    );
    adapted.set_recompute(Recompute::Cheap);
    // Per layer, seven adapted modules (q, k, v, o, gate, up, down) each keep `A x`, scaled:
    // [tokens, rank] in f32, in a buffer of the allocator's granularity.
    let tokens = 2 * 8;
    let product = headroom_alloc::round_size((tokens * rank_ * 4) as u64).unwrap() as usize;
    let products = config.layers * 7 * product;
    let (full, adapted) = (kept(&full, &device), kept(&adapted, &device));
    assert!(
        adapted <= full + products,
        "adapted {adapted} against full {full} + products {products}"
    );
}
