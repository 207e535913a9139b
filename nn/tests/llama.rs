//! The Llama family's decoder: grouped rotary attention, RMSNorm and a SwiGLU MLP in the shared
//! skeleton, checked by finite differences, against the materialized attention, through the
//! key/value cache and under recomputation.

mod common;

use common::{device, seed};
use headroom_alloc::{AllocatorConfig, GRANULE};
use headroom_autograd::{Tensor, autocast};
use headroom_kernels::ops::rotary::Llama3Scaling;
use headroom_kernels::{Array, DType, Device, DeviceConfig};
use headroom_nn::{Error, Family, Gpt, GptConfig, Initializer, LlamaOptions, Module, Recompute};

/// A tiny Llama-family decoder: 4 query heads sharing 2 key/value heads of 8 features (not
/// width / heads), Llama 3's rope scaling, and the Qwen options as asked.
fn config(qkv_bias: bool, qk_norm: bool) -> GptConfig {
    GptConfig {
        vocab: 23,
        context: 16,
        width: 24,
        heads: 4,
        layers: 2,
        dropout: 0.0,
        tie_embeddings: false,
        family: Family::Llama(LlamaOptions {
            kv_heads: 2,
            head_dim: 8,
            mlp_width: 40,
            rope_theta: 500_000.0,
            rope_scaling: Some(Llama3Scaling {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8,
            }),
            norm_eps: 1e-5,
            qkv_bias,
            qk_norm,
        }),
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

/// A decoder of `config` whose parameters are all uniform in [-0.5, 0.5) plus 1 for the
/// norms' scales: large enough that every position's logits differ clearly.
fn model(device: &Device, config: GptConfig, dtype: DType, seed: u64) -> Gpt {
    let mut gpt = Gpt::new(&mut Initializer::new(device, dtype, seed), config).unwrap();
    let mut state = seed;
    gpt.visit_mut(&mut |name, t| {
        let shift = if name.contains("norm") || name.contains("ln") {
            1.0
        } else {
            0.0
        };
        let values: Vec<f64> = (0..t.numel())
            .map(|_| shift + 0.5 * next(&mut state))
            .collect();
        *t = Tensor::variable(Array::from_f64(device, t.shape().clone(), dtype, &values)?);
        Ok(())
    })
    .unwrap();
    gpt
}

fn ids(device: &Device, batch: usize, len: usize, seed: u64) -> (Vec<u32>, Tensor) {
    let mut state = seed ^ 0x5EED;
    let ids: Vec<u32> = (0..batch * len)
        .map(|_| ((next(&mut state) + 1.0) / 2.0 * 23.0) as u32 % 23)
        .collect();
    let tensor = Tensor::from_host(device, [batch, len], &ids).unwrap();
    (ids, tensor)
}

#[test]
fn parameters_are_named_and_shaped_as_the_family_lays_them_out() {
    let device = device();
    let gpt = Gpt::new(
        &mut Initializer::new(&device, DType::F32, 1),
        config(true, true),
    )
    .unwrap();
    let shapes: Vec<(String, Vec<usize>)> = gpt
        .named_parameters()
        .into_iter()
        .map(|(name, t)| (name, t.dims().to_vec()))
        .collect();
    let expect = |name: &str, dims: &[usize]| {
        assert!(
            shapes.contains(&(name.to_owned(), dims.to_vec())),
            "{name} {dims:?} in {shapes:?}"
        );
    };
    expect("tok_emb.weight", &[23, 24]);
    // (4 query + 2 x 2 key/value heads) x 8 features.
    expect("blocks.0.attn.qkv.weight", &[64, 24]);
    expect("blocks.0.attn.qkv.bias", &[64]);
    expect("blocks.0.attn.q_norm.weight", &[8]);
    expect("blocks.0.attn.k_norm.weight", &[8]);
    expect("blocks.0.attn.proj.weight", &[24, 32]);
    expect("blocks.1.ln1.weight", &[24]);
    expect("blocks.1.mlp.gate.weight", &[40, 24]);
    expect("blocks.1.mlp.up.weight", &[40, 24]);
    expect("blocks.1.mlp.down.weight", &[24, 40]);
    expect("ln_f.weight", &[24]);
    expect("head.weight", &[23, 24]);
    // No learned positions and no biases but the q/k/v ones.
    assert!(!shapes.iter().any(|(n, _)| n.contains("pos_emb")));
    let biases = shapes.iter().filter(|(n, _)| n.ends_with("bias")).count();
    assert_eq!(biases, 2);
    let per_block = 64 * 24 + 64 + 8 + 8 + 24 * 32 + 2 * 24 + 3 * 40 * 24;
    assert_eq!(gpt.parameter_count(), 2 * 23 * 24 + 2 * per_block + 24);
}

#[test]
fn a_tiny_llama_passes_a_gradient_check_over_every_parameter() {
    let device = device();
    for (qkv_bias, qk_norm) in [(false, false), (true, true)] {
        let Family::Llama(options) = config(qkv_bias, qk_norm).family else {
            unreachable!("a Llama configuration")
        };
        let tiny = GptConfig {
            vocab: 5,
            context: 4,
            width: 8,
            layers: 1,
            family: Family::Llama(LlamaOptions {
                head_dim: 4,
                mlp_width: 12,
                ..options
            }),
            ..config(qkv_bias, qk_norm)
        };
        let gpt = Gpt::new(&mut Initializer::new(&device, DType::F64, seed()), tiny).unwrap();
        let ids = Tensor::from_host(&device, [2, 3], &[1u32, 4, 0, 3, 3, 2]).unwrap();
        common::check_layer("llama", &gpt, &ids, 1e-5);
    }
}

/// The loss, every gradient and the activation bytes kept of one step.
fn step(gpt: &Gpt, ids: &Tensor, targets: &Tensor) -> (Vec<f64>, Vec<Vec<f64>>, u64) {
    common::recorded_step(gpt, ids.device(), || gpt.loss(ids, targets, None))
}

#[test]
fn grouped_heads_memory_efficiently_give_the_materialized_step() {
    let device = device();
    let seed = seed();
    let (_, ids) = ids(&device, 2, 16, seed);
    let targets = Tensor::from_host(&device, [2, 16], &[3u32; 32]).unwrap();
    let mut gpt = model(&device, config(true, true), DType::F64, seed);
    let (loss, grads, _) = step(&gpt, &ids, &targets);
    gpt.set_materialized_attention(true);
    let (reference, reference_grads, _) = step(&gpt, &ids, &targets);
    assert!(
        (loss[0] - reference[0]).abs() < 1e-12,
        "{loss:?} {reference:?}"
    );
    for (g, r) in grads.iter().zip(&reference_grads) {
        for (a, b) in g.iter().zip(r) {
            assert!((a - b).abs() < 1e-10 * (1.0 + b.abs()), "{a} against {b}");
        }
    }
}

#[test]
fn recomputation_gives_the_same_step_bit_for_bit_and_keeps_less() {
    // Every chunk split, so that the bytes kept are the requests rounded to the granule.
    let allocator = AllocatorConfig::default().with_max_internal_fragmentation(GRANULE);
    let device = Device::cpu(DeviceConfig::new(512 << 20).with_allocator(allocator)).unwrap();
    let config = GptConfig {
        dropout: 0.1,
        ..config(true, false)
    };
    let (_, ids) = ids(&device, 4, 16, 3);
    let targets: Vec<u32> = (0..64).map(|i| (i * 5 % 23) as u32).collect();
    let targets = Tensor::from_host(&device, [4, 16], &targets).unwrap();
    for policy in [None, Some(DType::BF16)] {
        let run = |recompute: Recompute| {
            let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 5), config).unwrap();
            gpt.set_recompute(recompute);
            let _policy = policy.map(autocast);
            step(&gpt, &ids, &targets)
        };
        let (loss, grads, kept) = run(Recompute::None);
        let mut kept = vec![kept];
        for recompute in [Recompute::Cheap, Recompute::CheapUp, Recompute::Blocks] {
            let (other_loss, other_grads, other_kept) = run(recompute);
            assert_eq!(loss, other_loss, "{policy:?} {recompute:?}");
            assert!(
                grads == other_grads,
                "{policy:?} {recompute:?}: the gradients differ"
            );
            kept.push(other_kept);
        }
        assert!(kept.is_sorted_by(|a, b| a > b), "{policy:?}: {kept:?}");
        // Running the up projection again keeps one [tokens, mlp_width] array per layer less,
        // in the products' dtype.
        let size = if policy.is_some() { 2 } else { 4 };
        assert_eq!(
            kept[1] - kept[2],
            (config.layers * 64 * 40 * size) as u64,
            "{policy:?}"
        );
    }
}

#[test]
fn cached_generation_gives_the_full_forward_pass_logits_and_caches_only_kv_heads() {
    let device = device();
    let seed = seed();
    let config = config(true, true);
    let gpt = model(&device, config, DType::F32, seed);
    let (all, full_ids) = ids(&device, 2, 12, seed);
    let full = gpt.forward(&full_ids).unwrap().to_f64().unwrap();
    let mut cache = gpt.kv_cache(2);
    // A prompt of 5, a chunk of 3 (the new positions masked among themselves), then one at a
    // time.
    let mut at = 0;
    for len in [5, 3, 1, 1, 1, 1] {
        let chunk: Vec<u32> = (0..2)
            .flat_map(|b| all[b * 12 + at..b * 12 + at + len].to_vec())
            .collect();
        let chunk = Tensor::from_host(&device, [2, len], &chunk).unwrap();
        let logits = gpt
            .forward_cached(&chunk, &mut cache)
            .unwrap()
            .to_f64()
            .unwrap();
        at += len;
        for b in 0..2 {
            let row = (b * 12 + at - 1) * 23;
            for v in 0..23 {
                let (got, want) = (logits[b * 23 + v], full[row + v]);
                assert!(
                    (got - want).abs() < 1e-4,
                    "position {at}: {got} against {want}"
                );
            }
        }
    }
    // Keys and values of 2 key/value heads of 8 features, 12 positions, 2 rows, 2 blocks, f32.
    assert_eq!(cache.len(), 12);
    assert!(cache.bytes() >= 2 * 2 * 2 * 2 * 12 * 8 * 4);
    assert!(cache.bytes() < 2 * 2 * 2 * 4 * 12 * 8 * 4);
}

#[test]
fn bad_family_options_are_typed_errors_naming_the_field() {
    let device = device();
    let Family::Llama(options) = config(false, false).family else {
        unreachable!("a Llama configuration")
    };
    for (bad, field) in [
        (
            LlamaOptions {
                kv_heads: 3,
                ..options
            },
            "kv_heads",
        ),
        (
            LlamaOptions {
                head_dim: 7,
                ..options
            },
            "head_dim",
        ),
        (
            LlamaOptions {
                mlp_width: 0,
                ..options
            },
            "mlp_width",
        ),
        (
            LlamaOptions {
                rope_theta: 0.0,
                ..options
            },
            "rope_theta",
        ),
        (
            LlamaOptions {
                norm_eps: f64::NAN,
                ..options
            },
            "norm_eps",
        ),
    ] {
        let config = GptConfig {
            family: Family::Llama(bad),
            ..config(false, false)
        };
        let err = Gpt::new(&mut Initializer::new(&device, DType::F32, 1), config).unwrap_err();
        assert!(matches!(err, Error::Config { .. }), "{err}");
        assert!(err.to_string().contains(field), "{err}");
    }
}
