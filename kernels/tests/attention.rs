//! Memory-efficient attention against the f64 reference of the materialized weights, forward
//! and backward, causal or not, within a sliding window or not, with dropout off and on, at
//! lengths that are not multiples of the blocks, with key/value heads shared by groups of query
//! heads or not; grouped attention against attention over explicitly repeated keys and values;
//! its gradients against finite differences; what the meta device plans for it; operand checks.

mod common;

use common::{assert_close_scaled, assert_fails, devices, numeric_gradient, random, rng};
use headroom_alloc::{AllocatorConfig, EventKind, Tag};
use headroom_kernels::ops::attention::{
    Attention, AttentionDropout, attention, attention_backward,
};
use headroom_kernels::ops::random::keeps;
use headroom_kernels::{Array, DType, Device, DeviceConfig, Error, PlanTarget};

/// One attention problem: query heads (batch times heads), query heads per key/value head,
/// length, head size, how.
#[derive(Debug, Clone, Copy)]
struct Case {
    heads: usize,
    group: usize,
    len: usize,
    head: usize,
    how: Attention,
}

/// Batch elements of a grouped case: its heads are `[BATCH, heads / BATCH]`.
const BATCH: usize = 2;

impl Case {
    /// The shapes of the queries and of the keys and values: `[heads, len, head]` each without
    /// groups, `[BATCH, heads / BATCH, len, head]` and `[BATCH, kv_heads / BATCH, len, head]`
    /// with.
    fn shapes(&self) -> (Vec<usize>, Vec<usize>) {
        let (len, head) = (self.len, self.head);
        if self.group == 1 {
            return (vec![self.heads, len, head], vec![self.heads, len, head]);
        }
        let per_batch = self.heads / BATCH;
        (
            vec![BATCH, per_batch, len, head],
            vec![BATCH, per_batch / self.group, len, head],
        )
    }
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

/// Whether query `i` sees key `j` under `how`, as transformers' masks say: causally `j <= i`
/// (`causal_mask_function`), and within a window also `j > i - window`
/// (`sliding_window_overlay`).
fn kept(how: Attention, i: usize, j: usize) -> bool {
    let causal = !how.causal || j <= i;
    let window = how.window.is_none_or(|w| j as i64 > i as i64 - w as i64);
    causal && window
}

fn reference(case: Case, q: &[f64], k: &[f64], v: &[f64]) -> Reference {
    let Case {
        heads,
        group,
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
        // Query head h reads key/value head h / group (flat over the batch too).
        let at = |x: &[f64], i: usize, f: usize| x[(h * len + i) * head + f];
        let kv_at = |x: &[f64], j: usize, f: usize| x[((h / group) * len + j) * head + f];
        for i in 0..len {
            let keys: Vec<usize> = (0..len).filter(|&j| kept(how, i, j)).collect();
            let scores: Vec<f64> = keys
                .iter()
                .map(|&j| how.scale * (0..head).map(|f| at(q, i, f) * kv_at(k, j, f)).sum::<f64>())
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = scores.iter().map(|s| (s - max).exp()).sum();
            r.lse[h * len + i] = max + sum.ln();
            for (&j, s) in keys.iter().zip(&scores) {
                let w = (s - max).exp() / sum;
                let index = (h * len + i) * len + j;
                r.weights[index] = w;
                if let Some(drop) = how.dropout {
                    let kept = keeps(drop.seed, index as u64, drop.p);
                    r.keep[index] = if kept { 1.0 / (1.0 - drop.p) } else { 0.0 };
                }
                for f in 0..head {
                    r.out[(h * len + i) * head + f] += w * r.keep[index] * kv_at(v, j, f);
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
        group,
        len,
        head,
        how,
    } = case;
    let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
    for h in 0..heads {
        let row = |i: usize| (h * len + i) * head;
        let kv_row = |j: usize| ((h / group) * len + j) * head;
        for i in 0..len {
            // The weights' gradient, and its sum against the weights.
            let dw: Vec<f64> = (0..len)
                .map(|j| {
                    let index = (h * len + i) * len + j;
                    r.keep[index]
                        * (0..head)
                            .map(|f| g[row(i) + f] * v[kv_row(j) + f])
                            .sum::<f64>()
                })
                .collect();
            let w = &r.weights[(h * len + i) * len..][..len];
            let delta: f64 = w.iter().zip(&dw).map(|(a, b)| a * b).sum();
            for j in 0..len {
                let index = (h * len + i) * len + j;
                let ds = w[j] * (dw[j] - delta) * how.scale;
                for f in 0..head {
                    dq[row(i) + f] += ds * k[kv_row(j) + f];
                    dk[kv_row(j) + f] += ds * q[row(i) + f];
                    dv[kv_row(j) + f] += w[j] * r.keep[index] * g[row(i) + f];
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
    let (shape, kv_shape) = case.shapes();
    let (q, qs) = random(device, &mut rng, &shape, dtype, -1.0, 1.0);
    let (k, ks) = random(device, &mut rng, &kv_shape, dtype, -1.0, 1.0);
    let (v, vs) = random(device, &mut rng, &kv_shape, dtype, -1.0, 1.0);
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
    // Gradients sum over a row of keys or a column of queries (of every query head of a
    // group): scale the tolerance by their number.
    let scale = vec![((case.len * case.group) as f64).sqrt(); r.out.len()];
    assert_eq!(dk.shape(), k.shape(), "dk {what}");
    assert_eq!(dv.shape(), v.shape(), "dv {what}");
    for (name, got, want) in [
        ("dq", dq, &want[0]),
        ("dk", dk, &want[1]),
        ("dv", dv, &want[2]),
    ] {
        assert_close_scaled(
            &format!("{name} {what}"),
            &got.to_f64().unwrap(),
            want,
            &scale[..want.len()],
            rtol,
        );
    }
}

/// The case of `heads` query heads in groups of `group` over `len` rows of `head` features,
/// causal or not, with dropout (p 0.2) or without.
fn case(heads: usize, group: usize, len: usize, head: usize, causal: bool, dropout: bool) -> Case {
    let how = Attention {
        scale: 1.0 / (head as f64).sqrt(),
        causal,
        window: None,
        dropout: dropout.then_some(AttentionDropout { p: 0.2, seed: 77 }),
    };
    Case {
        heads,
        group,
        len,
        head,
        how,
    }
}

/// Plain cases: each shape causal or not, with dropout or without. On CUDA, bf16 and f16 heads
/// of up to 64 run the tensor-core kernels of 64 features (several blocks of 64 rows, a head
/// that is no multiple of 8, rows past the last full tile), heads of 80 and 128 those of 128
/// features, and f32 and f64 the warp kernels.
fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (heads, len, head) in [
        (1, 1, 8),
        (2, 5, 8),
        (3, 70, 16),
        (2, 130, 64),
        (1, 129, 33),
        (1, 40, 80),
        (1, 70, 128),
    ] {
        for causal in [true, false] {
            for dropout in [false, true] {
                cases.push(case(heads, 1, len, head, causal, dropout));
            }
        }
    }
    cases
}

/// Grouped cases (groups of 2 and 4 and multi-query: one key/value head per batch element), each
/// path of the kernels once with and once without its causal mask, dropout once: on CUDA the
/// tensor-core kernels of 64 features (several blocks of rows) and of 128 (heads of 96 and 128)
/// in the half types, the warp kernels in f32.
fn grouped_cases() -> Vec<Case> {
    vec![
        case(4, 2, 70, 16, true, false),
        case(8, 4, 130, 64, false, true),
        case(6, 3, 33, 8, true, false),
        case(4, 2, 40, 96, true, false),
        case(4, 2, 70, 128, false, false),
    ]
}

/// `case` within a sliding window of `window` positions.
fn windowed(case: Case, window: usize) -> Case {
    let how = Attention {
        window: Some(window),
        ..case.how
    };
    Case { how, ..case }
}

/// Windowed cases: a window of 1 (each position sees only itself), windows smaller than a block
/// (the CPU's 64 keys, CUDA's tiles of 16 to 64 rows) and no multiple of one, a window of a
/// whole block, of len and past it (plain causal attention); with dropout and without. On
/// CUDA the half types run both tensor-core instances (heads of 64 and 128), f32 and f64 the
/// warp kernels.
fn windowed_cases() -> Vec<Case> {
    vec![
        windowed(case(2, 1, 150, 16, true, false), 1),
        windowed(case(2, 1, 200, 64, true, true), 37),
        windowed(case(1, 1, 200, 33, true, false), 100),
        windowed(case(1, 1, 190, 128, true, true), 64),
        windowed(case(2, 1, 70, 8, true, false), 70),
        windowed(case(1, 1, 70, 80, true, true), 500),
    ]
}

/// Grouped windowed cases: two key/value heads of four query heads, and multi-query.
fn grouped_windowed_cases() -> Vec<Case> {
    vec![
        windowed(case(8, 2, 150, 16, true, false), 20),
        windowed(case(8, 4, 130, 64, true, true), 70),
        windowed(case(4, 2, 100, 96, true, false), 33),
    ]
}

#[test]
fn windowed_attention_equals_the_masked_reference_forward_and_backward() {
    for device in devices() {
        for case in windowed_cases() {
            for dtype in [DType::F64, DType::F32, DType::BF16, DType::F16] {
                check(&device, case, dtype);
            }
        }
        for case in grouped_windowed_cases() {
            for dtype in [DType::F32, DType::BF16, DType::F16] {
                check(&device, case, dtype);
            }
        }
    }
}

#[test]
fn a_window_of_at_least_len_is_plain_causal_attention() {
    for device in devices() {
        for dtype in [DType::F32, DType::BF16] {
            let causal = case(4, 2, 70, 16, true, true);
            let (shape, kv_shape) = causal.shapes();
            let mut rng = rng();
            let mut draw = |shape: &[usize]| random(&device, &mut rng, shape, dtype, -1.0, 1.0).0;
            let (q, k, v, g) = (draw(&shape), draw(&kv_shape), draw(&kv_shape), draw(&shape));
            let run = |how: Attention| {
                let (out, lse) = attention(&q, &k, &v, how).unwrap();
                let (dq, dk, dv) = attention_backward((&q, &k, &v), (&out, &lse), &g, how).unwrap();
                [out, lse, dq, dk, dv].map(|x| x.to_f64().unwrap())
            };
            let plain = run(causal.how);
            for window in [70, 71, 1000] {
                let how = windowed(causal, window).how;
                assert_eq!(run(how), plain, "{device} {dtype} window {window}");
            }
            // One less and the last position loses the first.
            let how = windowed(causal, 69).how;
            assert_ne!(run(how), plain, "{device} {dtype} window 69");
        }
    }
}

#[test]
fn grouped_attention_equals_the_materialized_reference_forward_and_backward() {
    for device in devices() {
        for case in grouped_cases() {
            for dtype in [DType::F32, DType::BF16, DType::F16] {
                check(&device, case, dtype);
            }
        }
    }
}

#[test]
fn attention_equals_the_materialized_reference_forward_and_backward() {
    for device in devices() {
        for case in cases() {
            for dtype in [DType::F64, DType::F32, DType::BF16, DType::F16] {
                check(&device, case, dtype);
            }
        }
    }
}

#[test]
fn the_cpus_wide_blocks_join_at_their_edges() {
    // 600 positions cross the CPU's blocks of keys in the forward pass (512) and of queries in
    // the backward pass (256): causal or not, with dropout or without, and a window that starts
    // inside the first block.
    let device = Device::cpu(DeviceConfig::new(256 << 20)).unwrap();
    let mut wide = vec![windowed(case(1, 1, 600, 16, true, false), 300)];
    for (causal, dropout) in [(true, false), (false, false), (true, true), (false, true)] {
        wide.push(case(1, 1, 600, 16, causal, dropout));
    }
    for case in wide {
        for dtype in [DType::F64, DType::F32, DType::BF16, DType::F16] {
            check(&device, case, dtype);
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
        window: None,
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
        window: None,
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

/// `x` (`[batch, kv_heads, len, head]`) with each head repeated `group` times in place:
/// `[batch, kv_heads * group, len, head]`.
fn repeat_heads(x: &[f64], kv_shape: &[usize], group: usize) -> Vec<f64> {
    let per_head = kv_shape[2] * kv_shape[3];
    x.chunks(per_head)
        .flat_map(|head| std::iter::repeat_n(head, group).flatten().copied())
        .collect()
}

/// The sums over each group of `group` consecutive heads of `x` (`[heads, len, head]` flat).
fn sum_groups(x: &[f64], per_head: usize, group: usize) -> Vec<f64> {
    x.chunks(per_head * group)
        .flat_map(|heads| {
            (0..per_head).map(move |e| (0..group).map(|m| heads[m * per_head + e]).sum::<f64>())
        })
        .collect()
}

#[test]
fn grouped_attention_equals_attention_over_repeated_keys_and_values() {
    for device in devices() {
        // Causal in groups of 2, and with dropout in groups of 4.
        for case in grouped_cases().into_iter().take(2) {
            for dtype in [DType::F32, DType::BF16] {
                let mut rng = rng();
                let (shape, kv_shape) = case.shapes();
                let (q, _) = random(&device, &mut rng, &shape, dtype, -1.0, 1.0);
                let (k, ks) = random(&device, &mut rng, &kv_shape, dtype, -1.0, 1.0);
                let (v, vs) = random(&device, &mut rng, &kv_shape, dtype, -1.0, 1.0);
                let (g, _) = random(&device, &mut rng, &shape, dtype, -1.0, 1.0);
                let repeat = |x: &[f64]| {
                    let values = repeat_heads(x, &kv_shape, case.group);
                    Array::from_f64(&device, shape.as_slice(), dtype, &values).unwrap()
                };
                let (k_rep, v_rep) = (repeat(&ks), repeat(&vs));
                let what = format!("{device} {dtype} {case:?}");
                let (out, lse) = attention(&q, &k, &v, case.how).unwrap();
                let (out_rep, lse_rep) = attention(&q, &k_rep, &v_rep, case.how).unwrap();
                let rtol = tolerance(dtype);
                let ones = vec![1.0; out.numel()];
                let pairs = [("out", &out, &out_rep), ("lse", &lse, &lse_rep)];
                for (name, got, want) in pairs {
                    let (got, want) = (got.to_f64().unwrap(), want.to_f64().unwrap());
                    let what = format!("{name} {what}");
                    assert_close_scaled(&what, &got, &want, &ones[..got.len()], rtol);
                }
                let grads = attention_backward((&q, &k, &v), (&out, &lse), &g, case.how).unwrap();
                let repeated = (&q, &k_rep, &v_rep);
                let grads_rep =
                    attention_backward(repeated, (&out_rep, &lse_rep), &g, case.how).unwrap();
                let per_head = case.len * case.head;
                let scale = vec![((case.len * case.group) as f64).sqrt(); out.numel()];
                let (dq, dq_rep) = (grads.0.to_f64().unwrap(), grads_rep.0.to_f64().unwrap());
                assert_close_scaled(&format!("dq {what}"), &dq, &dq_rep, &scale, rtol);
                for (name, got, want) in [
                    ("dk", &grads.1, &grads_rep.1),
                    ("dv", &grads.2, &grads_rep.2),
                ] {
                    let want = sum_groups(&want.to_f64().unwrap(), per_head, case.group);
                    let got = got.to_f64().unwrap();
                    let what = format!("{name} {what}");
                    assert_close_scaled(&what, &got, &want, &scale[..got.len()], rtol);
                }
            }
        }
    }
}

#[test]
fn grouped_gradients_are_the_same_bits_on_every_run() {
    for device in devices() {
        // Groups of 4, with dropout.
        let case = grouped_cases()[1];
        let mut rng = rng();
        let (shape, kv_shape) = case.shapes();
        let draw =
            |rng: &mut _, shape: &[usize]| random(&device, rng, shape, DType::F32, -1.0, 1.0).0;
        let (q, k, v) = (
            draw(&mut rng, &shape),
            draw(&mut rng, &kv_shape),
            draw(&mut rng, &kv_shape),
        );
        let g = draw(&mut rng, &shape);
        let (out, lse) = attention(&q, &k, &v, case.how).unwrap();
        let run = || {
            let (_, dk, dv) = attention_backward((&q, &k, &v), (&out, &lse), &g, case.how).unwrap();
            (dk.to_f64().unwrap(), dv.to_f64().unwrap())
        };
        let first = run();
        for _ in 0..3 {
            assert_eq!(run(), first, "{device} {case:?}");
        }
    }
}

#[test]
fn grouped_gradients_match_finite_differences() {
    let device = &devices()[0];
    let mut rng = rng();
    let (shape, kv_shape) = ([2, 4, 5, 3], [2, 2, 5, 3]);
    let how = Attention {
        scale: 0.7,
        causal: true,
        window: None,
        dropout: Some(AttentionDropout { p: 0.3, seed: 5 }),
    };
    let draw = |rng: &mut _, shape: &[usize]| random(device, rng, shape, DType::F64, -1.0, 1.0);
    let ((q, qs), (k, ks), (v, vs), (g, gs)) = (
        draw(&mut rng, &shape),
        draw(&mut rng, &kv_shape),
        draw(&mut rng, &kv_shape),
        draw(&mut rng, &shape),
    );
    let (out, lse) = attention(&q, &k, &v, how).unwrap();
    let (dq, dk, dv) = attention_backward((&q, &k, &v), (&out, &lse), &g, how).unwrap();
    let array =
        |x: &[f64], shape: [usize; 4]| Array::from_f64(device, shape, DType::F64, x).unwrap();
    let loss = |q: &[f64], k: &[f64], v: &[f64]| {
        let operands = (array(q, shape), array(k, kv_shape), array(v, kv_shape));
        let (out, _) = attention(&operands.0, &operands.1, &operands.2, how).unwrap();
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
        let got = got.to_f64().unwrap();
        assert_close_scaled(name, &got, want, &ones[..got.len()], 1e-6);
    }
}

/// One allocation event: (kind, size, requested, tag).
type AllocEvent = (EventKind, u64, u64, Option<Tag>);

/// The allocation events of `device` and its peak in use, after a grouped attention forward
/// and backward over `kv_heads` key/value heads of 8 query heads.
fn planned(device: &Device, kv_heads: usize) -> (Vec<AllocEvent>, u64) {
    let (shape, kv_shape) = ([2, 8, 40, 16], [2, kv_heads, 40, 16]);
    let how = Attention {
        scale: 0.25,
        causal: true,
        window: None,
        dropout: Some(AttentionDropout { p: 0.1, seed: 3 }),
    };
    {
        let zeros = |shape: [usize; 4]| Array::zeros(device, shape, DType::BF16).unwrap();
        let (q, k, v, g) = (zeros(shape), zeros(kv_shape), zeros(kv_shape), zeros(shape));
        let (out, lse) = attention(&q, &k, &v, how).unwrap();
        let grads = attention_backward((&q, &k, &v), (&out, &lse), &g, how).unwrap();
        assert_eq!((grads.1.shape(), grads.2.shape()), (k.shape(), v.shape()));
    }
    let events = device.allocator().with(|alloc| {
        alloc
            .history()
            .expect("recording is on")
            .events()
            .filter(|e| matches!(e.kind, EventKind::Alloc | EventKind::Free))
            .map(|e| (e.kind, e.size, e.requested, e.tag))
            .collect()
    });
    (events, device.allocator().stats().peak_in_use)
}

/// A 64 MiB device that records its allocations.
fn config() -> DeviceConfig {
    DeviceConfig::new(64 << 20).with_allocator(AllocatorConfig::default().with_history(1000))
}

#[test]
fn meta_plans_exactly_what_grouped_attention_allocates_and_it_is_less_than_repeated() {
    for kv_heads in [8, 4, 2, 1] {
        let cpu = Device::cpu(config()).unwrap();
        let meta = Device::meta(config()).unwrap();
        let (cpu_events, cpu_peak) = planned(&cpu, kv_heads);
        let (meta_events, meta_peak) = planned(&meta, kv_heads);
        assert_eq!(cpu_events, meta_events, "{kv_heads} key/value heads");
        assert_eq!(cpu_peak, meta_peak, "{kv_heads} key/value heads");
    }
    let peak = |kv_heads| planned(&Device::cpu(config()).unwrap(), kv_heads).1;
    let (repeated, grouped, multi_query) = (peak(8), peak(2), peak(1));
    assert!(
        grouped < repeated && multi_query < grouped,
        "peaks: repeated {repeated}, grouped {grouped}, multi-query {multi_query}"
    );
}

#[test]
fn the_work_account_counts_every_query_head_and_the_bytes_of_the_shared_heads() {
    let work = |kv_heads| {
        let planner = Device::meta_for(PlanTarget::Cpu, config()).unwrap();
        planned(&planner, kv_heads);
        planner.planned_work().unwrap()
    };
    let (repeated, grouped) = (work(8), work(2));
    assert_eq!(grouped.matrix_flops, repeated.matrix_flops);
    assert!(grouped.matrix_flops > 0.0);
    assert!(
        grouped.bytes < repeated.bytes,
        "{grouped:?} against {repeated:?}"
    );
}

#[test]
fn the_work_account_counts_the_scores_inside_the_window() {
    let (heads, len, head) = (6, 1000, 16);
    let work = |window| {
        let planner = Device::meta_for(PlanTarget::Cpu, config()).unwrap();
        let how = Attention {
            scale: 0.25,
            causal: true,
            window,
            dropout: None,
        };
        let x = Array::zeros(&planner, [heads, len, head], DType::BF16).unwrap();
        let (out, lse) = attention(&x, &x, &x, how).unwrap();
        attention_backward((&x, &x, &x), (&out, &lse), &x, how).unwrap();
        planner.planned_work().unwrap()
    };
    let causal = work(None);
    for window in [1, 100, 512, 900] {
        // Row i keeps min(i + 1, window) scores; seven products of two flops a score and
        // feature (two forward, five backward).
        let scores: usize = (0..len).map(|i| (i + 1).min(window)).sum();
        let got = work(Some(window));
        let what = format!("window {window}: {got:?} against causal {causal:?}");
        assert_eq!(
            got.matrix_flops,
            (7 * 2 * heads * scores * head) as f64,
            "{what}"
        );
        assert!(got.matrix_flops < causal.matrix_flops, "{what}");
        assert!(got.seconds < causal.seconds, "{what}");
    }
    // A window of len or more keeps every causal score.
    assert_eq!(work(Some(len)), causal);
}

#[test]
fn a_window_without_causal_or_of_zero_is_refused() {
    let device = &devices()[0];
    let x = Array::zeros(device, [2, 4, 8], DType::F32).unwrap();
    let how = Attention {
        scale: 1.0,
        causal: true,
        window: Some(2),
        dropout: None,
    };
    let (out, lse) = attention(&x, &x, &x, how).unwrap();
    let (acausal, empty) = (
        Attention {
            causal: false,
            ..how
        },
        Attention {
            window: Some(0),
            ..how
        },
    );
    let refused: [(Attention, &[&str]); 2] = [
        (acausal, &["window of 2", "causal"]),
        (empty, &["window of 0"]),
    ];
    for (how, mentions) in refused {
        let err = assert_fails(attention(&x, &x, &x, how), "attention", mentions);
        assert!(matches!(err, Error::Argument { .. }), "{err:?}");
        let backward = attention_backward((&x, &x, &x), (&out, &lse), &out, how);
        let err = assert_fails(backward, "attention_backward", mentions);
        assert!(matches!(err, Error::Argument { .. }), "{err:?}");
    }
}

#[test]
fn grouped_operands_that_do_not_divide_are_named() {
    let device = &devices()[0];
    let how = Attention {
        scale: 1.0,
        causal: false,
        window: None,
        dropout: None,
    };
    let zeros = |shape: &[usize]| Array::zeros(device, shape, DType::F32).unwrap();
    let q = zeros(&[2, 6, 4, 8]);
    for kv in [
        zeros(&[2, 4, 4, 8]), // 4 does not divide 6
        zeros(&[2, 0, 4, 8]), // no key/value heads
        zeros(&[1, 3, 4, 8]), // another batch
        zeros(&[2, 3, 5, 8]), // another length
        zeros(&[6, 4, 8]),    // another rank
    ] {
        let err = assert_fails(
            attention(&q, &kv, &kv, how),
            "attention",
            &["k is", "divide"],
        );
        assert!(matches!(err, Error::Shape { .. }));
    }
    let (k, v) = (zeros(&[2, 3, 4, 8]), zeros(&[2, 2, 4, 8]));
    assert_fails(attention(&q, &k, &v, how), "attention", &["v is"]);
    // Without an axis before len, the shapes must match.
    let (q2, k2) = (zeros(&[4, 8]), zeros(&[2, 8]));
    assert_fails(attention(&q2, &k2, &k2, how), "attention", &["k is"]);
}

#[test]
fn a_plan_prices_half_attention_where_the_target_computes_it() {
    // The CPU's attention blocks are priced at f32's matrix rate (bf16 in small blocks runs
    // near it), a GPU's in bf16: with half products a hundred times faster than f32 ones, the
    // CPU's bf16 attention still costs what f32's does.
    let rates = headroom_kernels::Rates {
        matrix_flops: 1e9,
        half_matrix_flops: 1e11,
        packing: 1e15,
        vector_flops: 1e15,
        bytes: 1e15,
        launch: 0.0,
        transfer: 1e15,
        link: 1e15,
    };
    let how = Attention {
        scale: 0.125,
        causal: true,
        window: None,
        dropout: None,
    };
    let seconds = |target: PlanTarget, dtype: DType| {
        let meta = Device::meta_with_rates(target, rates, DeviceConfig::new(1 << 30)).unwrap();
        let q = Array::zeros(&meta, [4, 256, 64], dtype).unwrap();
        let before = meta.planned_work().unwrap().seconds;
        attention(&q, &q, &q, how).unwrap();
        meta.planned_work().unwrap().seconds - before
    };
    let (f32_cpu, bf16_cpu) = (
        seconds(PlanTarget::Cpu, DType::F32),
        seconds(PlanTarget::Cpu, DType::BF16),
    );
    assert!(
        (bf16_cpu / f32_cpu - 1.0).abs() < 1e-9,
        "{bf16_cpu} against {f32_cpu}"
    );
    let gpu = PlanTarget::cuda(9);
    let (f32_gpu, bf16_gpu) = (seconds(gpu, DType::F32), seconds(gpu, DType::BF16));
    assert!(bf16_gpu < f32_gpu / 50.0, "{bf16_gpu} against {f32_gpu}");
}
