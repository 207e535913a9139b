//! Each layer's forward pass against a naive reference, and its gradients against finite
//! differences in f64.

mod common;

use common::{check_layer, device, seed};
use headroom_autograd::Tensor;
use headroom_kernels::ops::random::uniform;
use headroom_kernels::{DType, Device};
use headroom_nn::layers::linear_weight::Weight;
use headroom_nn::{
    Activation, Block, CausalSelfAttention, DropoutCounter, Embedding, Family, Gpt, GptConfig,
    Init, Initializer, LayerNorm, Linear, Module, RmsNorm, mlp,
};

/// `n` values in `[-1, 1)` from `seed`.
fn values(seed: u64, n: usize) -> Vec<f64> {
    (0..n as u64)
        .map(|i| 2.0 * uniform(seed, i) - 1.0)
        .collect()
}

fn input(device: &Device, shape: &[usize], seed: u64) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_f64(device, shape, DType::F64, &values(seed, n)).unwrap()
}

fn close(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-10 * w.abs().max(1.0),
            "{what}[{i}]: {g} against {w}"
        );
    }
}

#[test]
fn linear_is_x_times_w_transposed_plus_b() {
    let device = device();
    let s = seed();
    let layer = Linear::new(&mut Initializer::new(&device, DType::F64, s), 3, 4, true).unwrap();
    let x = input(&device, &[2, 3], s + 1);
    let (w, b) = (
        layer.weight.values().unwrap().to_f64().unwrap(),
        layer.bias.as_ref().unwrap().to_f64().unwrap(),
    );
    let xs = x.to_f64().unwrap();
    let want: Vec<f64> = (0..2)
        .flat_map(|i| (0..4).map(move |o| (i, o)))
        .map(|(i, o)| b[o] + (0..3).map(|k| xs[i * 3 + k] * w[o * 3 + k]).sum::<f64>())
        .collect();
    close(
        "linear",
        &layer.forward(&x).unwrap().to_f64().unwrap(),
        &want,
    );
    // PyTorch's initialization: everything within 1/sqrt(fan_in).
    assert!(w.iter().chain(&b).all(|v| v.abs() <= 1.0 / 3f64.sqrt()));
    check_layer("linear", &layer, &x, 1e-6);
    let batched = input(&device, &[2, 2, 3], s + 2);
    check_layer("linear batched", &layer, &batched, 1e-6);
}

#[test]
fn embedding_picks_rows() {
    let device = device();
    let table = Embedding::new(
        &mut Initializer::new(&device, DType::F64, seed()),
        5,
        3,
        Init::Normal(1.0),
    )
    .unwrap();
    let ids = Tensor::from_host(&device, [2, 2], &[4u32, 0, 4, 2]).unwrap();
    let w = table.weight.values().unwrap().to_f64().unwrap();
    let want: Vec<f64> = [4, 0, 4, 2]
        .iter()
        .flat_map(|&r| w[r * 3..r * 3 + 3].to_vec())
        .collect();
    close(
        "embedding",
        &table.forward(&ids).unwrap().to_f64().unwrap(),
        &want,
    );
    check_layer("embedding", &table, &ids, 1e-6);
}

#[test]
fn layer_norm_normalizes_then_scales_and_shifts() {
    let device = device();
    let s = seed();
    let mut norm = LayerNorm::new(&mut Initializer::new(&device, DType::F64, s), 4).unwrap();
    norm.weight = Tensor::variable(input(&device, &[4], s + 1).into_array());
    norm.bias = Tensor::variable(input(&device, &[4], s + 2).into_array());
    let x = input(&device, &[3, 4], s + 3);
    let (xs, g, b) = (
        x.to_f64().unwrap(),
        norm.weight.to_f64().unwrap(),
        norm.bias.to_f64().unwrap(),
    );
    let want: Vec<f64> = xs
        .chunks(4)
        .flat_map(|row| {
            let mean = row.iter().sum::<f64>() / 4.0;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 4.0;
            let r = 1.0 / (var + 1e-5).sqrt();
            (0..4)
                .map(|j| (row[j] - mean) * r * g[j] + b[j])
                .collect::<Vec<_>>()
        })
        .collect();
    close(
        "layer norm",
        &norm.forward(&x).unwrap().to_f64().unwrap(),
        &want,
    );
    check_layer("layer norm", &norm, &x, 1e-6);
}

#[test]
fn rms_norm_divides_by_the_root_mean_square_then_scales() {
    let device = device();
    let mut init = Initializer::new(&device, DType::F64, seed());
    let mut norm = RmsNorm::new(&mut init, 2, 0.0).unwrap();
    let mut names = vec![];
    norm.visit(&mut |name, t| names.push((name.to_string(), t.to_f64().unwrap())));
    assert_eq!(names, [("weight".to_string(), vec![1.0, 1.0])]);
    // Rows [3, 4] (mean square 12.5) and [-2, 2] (mean square 4), scaled by [1, 2].
    let x = Tensor::from_f64(&device, [2, 2], DType::F64, &[3., 4., -2., 2.]).unwrap();
    norm.weight = Tensor::from_f64(&device, [2], DType::F64, &[1., 2.]).unwrap();
    let r = 1.0 / 12.5f64.sqrt();
    let want = [3. * r, 8. * r, -1., 2.];
    close(
        "rms norm",
        &norm.forward(&x).unwrap().to_f64().unwrap(),
        &want,
    );
    // eps is added to the mean square.
    let mut norm = RmsNorm::new(&mut init, 2, 1e-6).unwrap();
    let x = Tensor::from_f64(&device, [1, 2], DType::F64, &[0., 1e-3]).unwrap();
    let want = [0., 1e-3 / (0.5e-6f64 + 1e-6).sqrt()];
    close(
        "rms norm eps",
        &norm.forward(&x).unwrap().to_f64().unwrap(),
        &want,
    );
    norm.weight = Tensor::variable(input(&device, &[2], seed() + 1).into_array());
    check_layer(
        "rms norm",
        &norm,
        &input(&device, &[3, 2], seed() + 2),
        1e-6,
    );
    let mut init = Initializer::new(&device, DType::F64, seed());
    assert!(RmsNorm::new(&mut init, 0, 1e-6).is_err());
    assert!(RmsNorm::new(&mut init, 4, f64::NAN).is_err());
}

/// Causal attention in plain loops: x [b, t, c] through qkv weights and heads.
fn reference_attention(
    attn: &CausalSelfAttention,
    x: &[f64],
    (b, t, c): (usize, usize, usize),
) -> Vec<f64> {
    let h = attn.heads();
    let d = c / h;
    let (wq, bq) = (
        attn.qkv.weight.values().unwrap().to_f64().unwrap(),
        attn.qkv.bias.as_ref().unwrap().to_f64().unwrap(),
    );
    let (wp, bp) = (
        attn.proj.weight.values().unwrap().to_f64().unwrap(),
        attn.proj.bias.as_ref().unwrap().to_f64().unwrap(),
    );
    let linear = |row: &[f64], w: &[f64], bias: &[f64], out: usize| -> Vec<f64> {
        (0..out)
            .map(|o| {
                bias[o]
                    + row
                        .iter()
                        .enumerate()
                        .map(|(k, v)| v * w[o * row.len() + k])
                        .sum::<f64>()
            })
            .collect()
    };
    let mut y = Vec::new();
    for batch in 0..b {
        let rows: Vec<Vec<f64>> = (0..t)
            .map(|i| {
                linear(
                    &x[(batch * t + i) * c..(batch * t + i + 1) * c],
                    &wq,
                    &bq,
                    3 * c,
                )
            })
            .collect();
        let mut merged = vec![vec![0.0; c]; t];
        for head in 0..h {
            let q = |i: usize, j: usize| rows[i][head * d + j];
            let k = |i: usize, j: usize| rows[i][c + head * d + j];
            let v = |i: usize, j: usize| rows[i][2 * c + head * d + j];
            for (i, out) in merged.iter_mut().enumerate() {
                let scores: Vec<f64> = (0..=i)
                    .map(|s| (0..d).map(|j| q(i, j) * k(s, j)).sum::<f64>() / (d as f64).sqrt())
                    .collect();
                let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                let total: f64 = scores.iter().map(|s| (s - max).exp()).sum();
                for j in 0..d {
                    out[head * d + j] = (0..=i)
                        .map(|s| (scores[s] - max).exp() / total * v(s, j))
                        .sum();
                }
            }
        }
        for row in merged {
            y.extend(linear(&row, &wp, &bp, c));
        }
    }
    y
}

#[test]
fn attention_matches_a_loop_reference_and_only_looks_back() {
    let device = device();
    let s = seed();
    let mut init = Initializer::new(&device, DType::F64, s);
    let counter = DropoutCounter::default();
    let mut attn = CausalSelfAttention::new(&mut init, 6, 2, 0.5, (0.0, &counter)).unwrap();
    // Larger weights than GPT's, so the softmax is far from uniform.
    attn.qkv.weight = Weight::Dense(Tensor::variable(
        input(&device, &[18, 6], s + 1).into_array(),
    ));
    let x = input(&device, &[2, 4, 6], s + 2);
    let got = attn.forward(&x).unwrap().to_f64().unwrap();
    close(
        "attention",
        &got,
        &reference_attention(&attn, &x.to_f64().unwrap(), (2, 4, 6)),
    );
    // The first position sees only itself: changing later positions leaves it alone.
    let mut later = x.to_f64().unwrap();
    for v in &mut later[6..24] {
        *v += 1.0;
    }
    let moved = Tensor::from_f64(&device, [2, 4, 6], DType::F64, &later).unwrap();
    let again = attn.forward(&moved).unwrap().to_f64().unwrap();
    close("position 0", &again[..6], &got[..6]);
    check_layer("attention", &attn, &x, 1e-6);
    assert!(CausalSelfAttention::new(&mut init, 6, 4, 0.02, (0.0, &counter)).is_err());
}

#[test]
fn blocks_and_mlps_pass_gradient_checks() {
    let device = device();
    let s = seed();
    let mut init = Initializer::new(&device, DType::F64, s);
    let block = Block::new(&mut init, 4, 2, 0.3, (0.0, &DropoutCounter::default())).unwrap();
    check_layer("block", &block, &input(&device, &[1, 3, 4], s + 1), 1e-6);
    let net = mlp(&mut init, &[3, 5, 2], Activation::Gelu).unwrap();
    let x = input(&device, &[4, 3], s + 2);
    // Sequential is not Clone; check it through its layers' functions directly.
    let direct = net.forward(&x).unwrap().to_f64().unwrap();
    let p = net.parameters();
    let manual = x
        .linear(&p[0], Some(&p[1]))
        .unwrap()
        .gelu()
        .unwrap()
        .linear(&p[2], Some(&p[3]))
        .unwrap();
    close("mlp", &direct, &manual.to_f64().unwrap());
}

#[test]
fn a_tiny_gpt_passes_a_gradient_check_over_every_parameter() {
    let device = device();
    let config = GptConfig {
        vocab: 5,
        context: 4,
        width: 4,
        heads: 2,
        layers: 1,
        dropout: 0.0,
        tie_embeddings: false,
        family: Family::Gpt2,
    };
    let gpt = Gpt::new(&mut Initializer::new(&device, DType::F64, seed()), config).unwrap();
    let ids = Tensor::from_host(&device, [2, 3], &[1u32, 4, 0, 3, 3, 2]).unwrap();
    assert_eq!(gpt.forward(&ids).unwrap().dims(), [2, 3, 5]);
    check_layer("gpt", &gpt, &ids, 1e-5);
    let names: Vec<String> = gpt.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names[..4],
        [
            "tok_emb.weight",
            "pos_emb.weight",
            "blocks.0.ln1.weight",
            "blocks.0.ln1.bias"
        ]
    );
    assert!(names.contains(&"blocks.0.attn.qkv.weight".to_owned()));
    assert_eq!(names.last().unwrap(), "head.weight");
}

#[test]
fn a_tied_head_is_the_token_embedding_with_gradients_from_both_uses() {
    let device = device();
    let config = GptConfig {
        vocab: 5,
        context: 4,
        width: 4,
        heads: 2,
        layers: 1,
        dropout: 0.0,
        tie_embeddings: true,
        family: Family::Gpt2,
    };
    let gpt = Gpt::new(&mut Initializer::new(&device, DType::F64, seed()), config).unwrap();
    let names: Vec<String> = gpt.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert!(!names.contains(&"head.weight".to_owned()), "{names:?}");
    let ids = Tensor::from_host(&device, [2, 3], &[1u32, 4, 0, 3, 3, 2]).unwrap();
    // The logits are the final hidden state times the embedding, transposed.
    let logits = gpt.forward(&ids).unwrap();
    assert_eq!(logits.dims(), [2, 3, 5]);
    // Finite differences of the one shared weight see both of its uses.
    check_layer("tied gpt", &gpt, &ids, 1e-5);
}

#[test]
fn the_same_seed_gives_the_same_weights_and_another_seed_others() {
    let device = device();
    let config = GptConfig {
        vocab: 7,
        context: 5,
        width: 8,
        heads: 2,
        layers: 2,
        dropout: 0.1,
        tie_embeddings: false,
        family: Family::Gpt2,
    };
    let weights = |seed| {
        let gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, seed), config).unwrap();
        gpt.parameters()
            .iter()
            .flat_map(|p| p.to_f64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(weights(3), weights(3));
    assert_ne!(weights(3), weights(4));
    // GPT-2's scheme: token embeddings with std 0.02.
    let gpt = Gpt::new(
        &mut Initializer::new(&device, DType::F32, 3),
        GptConfig {
            vocab: 512,
            width: 64,
            ..config
        },
    )
    .unwrap();
    let emb = gpt.tok_emb.weight.values().unwrap().to_f64().unwrap();
    let std = (emb.iter().map(|v| v * v).sum::<f64>() / emb.len() as f64).sqrt();
    assert!((std - 0.02).abs() < 0.001, "std {std}");
}

#[test]
fn bad_configurations_are_typed_errors() {
    let device = device();
    let mut init = Initializer::new(&device, DType::F32, 0);
    let good = GptConfig {
        vocab: 7,
        context: 5,
        width: 8,
        heads: 2,
        layers: 2,
        dropout: 0.0,
        tie_embeddings: false,
        family: Family::Gpt2,
    };
    for (bad, mention) in [
        (GptConfig { heads: 3, ..good }, "heads"),
        (GptConfig { vocab: 0, ..good }, "vocab"),
        (
            GptConfig {
                dropout: 1.0,
                ..good
            },
            "dropout",
        ),
    ] {
        let err = Gpt::new(&mut init, bad).unwrap_err();
        assert!(err.to_string().contains(mention), "{err}");
    }
    assert!(Linear::new(&mut init, 0, 3, true).is_err());
    assert!(mlp(&mut init, &[3], Activation::Relu).is_err());
    let gpt = Gpt::new(&mut init, good).unwrap();
    let long = Tensor::from_host(&device, [1, 6], &[0u32; 6]).unwrap();
    assert!(
        gpt.forward(&long)
            .unwrap_err()
            .to_string()
            .contains("context")
    );
}
