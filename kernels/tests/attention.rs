//! Memory-efficient attention against the f64 reference of the materialized weights, forward
//! and backward, causal or not, with dropout off and on, at lengths that are not multiples of
//! the blocks; its gradients against finite differences; operand checks.

mod common;

use common::{assert_close_scaled, assert_fails, devices, numeric_gradient, random, rng};
use headroom_kernels::ops::attention::{
    Attention, AttentionDropout, attention, attention_backward,
};
use headroom_kernels::ops::random::keeps;
use headroom_kernels::{Array, DType, Device, Error};

/// One attention problem: heads, length, head size, how.
#[derive(Debug, Clone, Copy)]
struct Case {
    heads: usize,
    len: usize,
    head: usize,
    how: Attention,
}

/// The weights (after dropout) and the output of a head in f64, and each row's log-sum-exp.
struct Reference {
    /// `[heads, len, len]`: softmax weights, 0 where masked.
    weights: Vec<f64>,
    /// `[heads, len, len]`: the dropout factors (0 or 1 / (1 - p); 1 without dropout).
    keep: Vec<f64>,
    out: Vec<f64>,
    lse: Vec<f64>,
}

fn reference(case: Case, q: &[f64], k: &[f64], v: &[f64]) -> Reference {
    let Case {
        heads,
        len,
        head,
        how,
    } = case;
    let mut r = Reference {
        weights: vec![0.0; heads * len * len],
        keep: vec![1.0; heads * len * len],
        out: vec![0.0; heads * len * head],
        lse: vec![0.0; heads * len],
    };
    for h in 0..heads {
        let at = |x: &[f64], i: usize, f: usize| x[(h * len + i) * head + f];
        for i in 0..len {
            let visible = if how.causal { i + 1 } else { len };
            let scores: Vec<f64> = (0..visible)
                .map(|j| how.scale * (0..head).map(|f| at(q, i, f) * at(k, j, f)).sum::<f64>())
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = scores.iter().map(|s| (s - max).exp()).sum();
            r.lse[h * len + i] = max + sum.ln();
            for (j, s) in scores.iter().enumerate() {
                let w = (s - max).exp() / sum;
                let index = (h * len + i) * len + j;
                r.weights[index] = w;
                if let Some(drop) = how.dropout {
                    let kept = keeps(drop.seed, index as u64, drop.p);
                    r.keep[index] = if kept { 1.0 / (1.0 - drop.p) } else { 0.0 };
                }
                for f in 0..head {
                    r.out[(h * len + i) * head + f] += w * r.keep[index] * at(v, j, f);
                }
            }
        }
    }
    r
}

/// The gradients of the reference with respect to q, k and v, for the upstream gradient `g`.
fn reference_grads(
    case: Case,
    (q, k, v): (&[f64], &[f64], &[f64]),
    r: &Reference,
    g: &[f64],
) -> [Vec<f64>; 3] {
    let Case {
        heads,
        len,
        head,
        how,
    } = case;
    let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
    for h in 0..heads {
        let row = |i: usize| (h * len + i) * head;
        for i in 0..len {
            // The weights' gradient, and its sum against the weights.
            let dw: Vec<f64> = (0..len)
                .map(|j| {
                    let index = (h * len + i) * len + j;
                    r.keep[index]
                        * (0..head)
                            .map(|f| g[row(i) + f] * v[row(j) + f])
                            .sum::<f64>()
                })
                .collect();
            let w = &r.weights[(h * len + i) * len..][..len];
            let delta: f64 = w.iter().zip(&dw).map(|(a, b)| a * b).sum();
            for j in 0..len {
                let index = (h * len + i) * len + j;
                let ds = w[j] * (dw[j] - delta) * how.scale;
                for f in 0..head {
                    dq[row(i) + f] += ds * k[row(j) + f];
                    dk[row(j) + f] += ds * q[row(i) + f];
                    dv[row(j) + f] += w[j] * r.keep[index] * g[row(i) + f];
                }
            }
        }
    }
    [dq, dk, dv]
}

/// The tolerance of each dtype for sums of a few hundred products.
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-10,
        DType::F32 => 2e-5,
        DType::BF16 => 3e-2,
        _ => 5e-3,
    }
}

fn check(device: &Device, case: Case, dtype: DType) {
    let mut rng = rng();
    let shape = [case.heads, case.len, case.head];
    let (q, qs) = random(device, &mut rng, &shape, dtype, -1.0, 1.0);
    let (k, ks) = random(device, &mut rng, &shape, dtype, -1.0, 1.0);
    let (v, vs) = random(device, &mut rng, &shape, dtype, -1.0, 1.0);
    let (g, gs) = random(device, &mut rng, &shape, dtype, -1.0, 1.0);
    let what = format!("{device} {dtype} {case:?}");
    let (out, lse) = attention(&q, &k, &v, case.how).unwrap();
    let r = reference(case, &qs, &ks, &vs);
    let rtol = tolerance(dtype);
    let ones = vec![1.0; r.out.len()];
    assert_close_scaled(
        &format!("out {what}"),
        &out.to_f64().unwrap(),
        &r.out,
        &ones,
        rtol,
    );
    let lse_ones = vec![1.0; r.lse.len()];
    let lse_rtol = if dtype == DType::F64 { 1e-10 } else { 1e-5 };
    assert_close_scaled(
        &format!("lse {what}"),
        &lse.to_f64().unwrap(),
        &r.lse,
        &lse_ones,
        lse_rtol,
    );
    let (dq, dk, dv) = attention_backward((&q, &k, &v), (&out, &lse), &g, case.how).unwrap();
    let want = reference_grads(case, (&qs, &ks, &vs), &r, &gs);
    // Gradients sum over a row of keys or a column of queries: scale the tolerance by length.
    let scale = vec![(case.len as f64).sqrt(); r.out.len()];
    for (name, got, want) in [
        ("dq", dq, &want[0]),
        ("dk", dk, &want[1]),
        ("dv", dv, &want[2]),
    ] {
        assert_close_scaled(
            &format!("{name} {what}"),
            &got.to_f64().unwrap(),
            want,
            &scale,
            rtol,
        );
    }
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (heads, len, head) in [
        (1, 1, 8),
        (2, 5, 8),
        (3, 70, 16),
        (2, 130, 64),
        (1, 129, 33),
        (1, 40, 80),
    ] {
        for causal in [true, false] {
            for dropout in [None, Some(AttentionDropout { p: 0.2, seed: 77 })] {
                let scale = 1.0 / (head as f64).sqrt();
                let how = Attention {
                    scale,
                    causal,
                    dropout,
                };
                cases.push(Case {
                    heads,
                    len,
                    head,
                    how,
                });
            }
        }
    }
    cases
}

#[test]
fn attention_equals_the_materialized_reference_forward_and_backward() {
    for device in devices() {
        for case in cases() {
            check(&device, case, DType::F64);
            check(&device, case, DType::F32);
        }
        // The half types on every shape: on CUDA, heads of up to 64 run the tensor-core
        // kernels (several blocks of 64 rows, a head that is no multiple of 8, rows past
        // the last full tile), wider ones the warp kernels.
        for case in cases() {
            check(&device, case, DType::BF16);
            check(&device, case, DType::F16);
        }
    }
}

#[test]
fn attention_gradients_match_finite_differences() {
    let device = &devices()[0];
    let mut rng = rng();
    let (heads, len, head) = (2, 6, 3);
    let shape = [heads, len, head];
    let how = Attention {
        scale: 0.7,
        causal: true,
        dropout: Some(AttentionDropout { p: 0.3, seed: 5 }),
    };
    let draw = |rng: &mut _| random(device, rng, &shape, DType::F64, -1.0, 1.0);
    let ((q, qs), (k, ks), (v, vs), (g, gs)) = (
        draw(&mut rng),
        draw(&mut rng),
        draw(&mut rng),
        draw(&mut rng),
    );
    let (out, lse) = attention(&q, &k, &v, how).unwrap();
    let (dq, dk, dv) = attention_backward((&q, &k, &v), (&out, &lse), &g, how).unwrap();
    // The loss sum(out * g) as a function of one operand, the others held.
    let array = |x: &[f64]| Array::from_f64(device, shape, DType::F64, x).unwrap();
    let loss = |q: &[f64], k: &[f64], v: &[f64]| {
        let (out, _) = attention(&array(q), &array(k), &array(v), how).unwrap();
        out.to_f64()
            .unwrap()
            .iter()
            .zip(&gs)
            .map(|(a, b)| a * b)
            .sum::<f64>()
    };
    let numeric = [
        numeric_gradient(&qs, |x| loss(x, &ks, &vs)),
        numeric_gradient(&ks, |x| loss(&qs, x, &vs)),
        numeric_gradient(&vs, |x| loss(&qs, &ks, x)),
    ];
    let ones = vec![1.0; qs.len()];
    for ((name, got), want) in [("dq", dq), ("dk", dk), ("dv", dv)]
        .into_iter()
        .zip(&numeric)
    {
        assert_close_scaled(name, &got.to_f64().unwrap(), want, &ones, 1e-6);
    }
}

#[test]
fn bad_operands_are_named() {
    let device = &devices()[0];
    let how = Attention {
        scale: 1.0,
        causal: true,
        dropout: None,
    };
    let x = Array::zeros(device, [2, 4, 8], DType::F32).unwrap();
    let other = Array::zeros(device, [2, 5, 8], DType::F32).unwrap();
    let err = assert_fails(
        attention(&x, &other, &x, how),
        "attention",
        &["k is", "must match"],
    );
    assert!(matches!(err, Error::Shape { .. }));
    let halves = Array::zeros(device, [2, 4, 8], DType::BF16).unwrap();
    assert_fails(attention(&x, &x, &halves, how), "attention", &["v is"]);
    let vector = Array::zeros(device, [8], DType::F32).unwrap();
    assert_fails(
        attention(&vector, &vector, &vector, how),
        "attention",
        &["[..., len, head]"],
    );
    let bad_scale = Attention {
        scale: f64::NAN,
        ..how
    };
    assert_fails(attention(&x, &x, &x, bad_scale), "attention", &["scale"]);
    let bad_p = Attention {
        dropout: Some(AttentionDropout { p: 1.0, seed: 0 }),
        ..how
    };
    assert_fails(attention(&x, &x, &x, bad_p), "attention", &["dropout"]);
    let (out, _) = attention(&x, &x, &x, how).unwrap();
    assert_fails(
        attention_backward((&x, &x, &x), (&out, &out), &out, how),
        "attention_backward",
        &["lse is"],
    );
}
