//! Packed documents: attention within each document against an f64 reference of the masked
//! softmax (forward and backward, with windows, grouped heads, dropout, documents of one
//! position, a row of one document), rotary positions that restart with each document, the
//! positions of learned embeddings, what the meta device plans, and bad starts refused.

mod common;

use common::{assert_close_scaled, assert_fails, devices, random, rng};
use headroom_alloc::{AllocatorConfig, EventKind, Tag};
use headroom_kernels::ops::attention::{
    Attention, AttentionDropout, attention, attention_backward, attention_in_documents,
    attention_in_documents_backward,
};
use headroom_kernels::ops::documents::check_starts;
use headroom_kernels::ops::index::document_positions;
use headroom_kernels::ops::random::keeps;
use headroom_kernels::ops::rotary::{
    inv_freq, rotary, rotary_backward, rotary_in_documents, rotary_in_documents_backward,
};
use headroom_kernels::{Array, DType, Device, DeviceConfig};

/// The starts of a row of documents of `lengths`.
fn starts_of(lengths: &[usize]) -> Vec<u32> {
    let mut starts = Vec::new();
    for &n in lengths {
        let start = starts.len() as u32;
        starts.extend(std::iter::repeat_n(start, n));
    }
    starts
}

/// One problem: `batch` rows of `heads` query heads in groups of `group`, the documents of each
/// row, features per head, how.
#[derive(Debug, Clone)]
struct Case {
    heads: usize,
    group: usize,
    rows: Vec<Vec<usize>>,
    head: usize,
    how: Attention,
}

impl Case {
    fn len(&self) -> usize {
        self.rows[0].iter().sum()
    }

    fn starts(&self) -> Vec<u32> {
        self.rows.iter().flat_map(|row| starts_of(row)).collect()
    }

    /// Query and key/value shapes, `[batch, heads, len, head]`.
    fn shapes(&self) -> ([usize; 4], [usize; 4]) {
        let (b, len) = (self.rows.len(), self.len());
        (
            [b, self.heads, len, self.head],
            [b, self.heads / self.group, len, self.head],
        )
    }
}

/// Whether query `i` sees key `j` of a row of `starts`.
fn sees(how: Attention, starts: &[u32], i: usize, j: usize) -> bool {
    let window = how.window.is_none_or(|w| j + w > i);
    j <= i && window && j >= starts[i] as usize
}

/// The output, log-sum-exp and gradients of q, k and v of the masked softmax in f64.
fn reference(case: &Case, (q, k, v, g): (&[f64], &[f64], &[f64], &[f64])) -> [Vec<f64>; 5] {
    let (len, d, how) = (case.len(), case.head, case.how);
    let starts = case.starts();
    let heads = case.rows.len() * case.heads;
    let (mut out, mut lse) = (vec![0.0; q.len()], vec![0.0; heads * len]);
    let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
    for h in 0..heads {
        let row = &starts[h / case.heads * len..][..len];
        let qr = |i: usize| (h * len + i) * d;
        let kr = |j: usize| (h / case.group * len + j) * d;
        for i in 0..len {
            let keys: Vec<usize> = (0..len).filter(|&j| sees(how, row, i, j)).collect();
            let dot = |a: usize, x: &[f64], b: usize, y: &[f64]| {
                (0..d).map(|f| x[a + f] * y[b + f]).sum::<f64>()
            };
            let s: Vec<f64> = keys
                .iter()
                .map(|&j| how.scale * dot(qr(i), q, kr(j), k))
                .collect();
            let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = s.iter().map(|x| (x - max).exp()).sum();
            lse[h * len + i] = max + sum.ln();
            let keep = |j: usize| match how.dropout {
                Some(drop) if !keeps(drop.seed, ((h * len + i) * len + j) as u64, drop.p) => 0.0,
                Some(drop) => 1.0 / (1.0 - drop.p),
                None => 1.0,
            };
            let w: Vec<f64> = s.iter().map(|x| (x - max).exp() / sum).collect();
            let dw: Vec<f64> = keys
                .iter()
                .map(|&j| keep(j) * dot(qr(i), g, kr(j), v))
                .collect();
            let delta: f64 = w.iter().zip(&dw).map(|(a, b)| a * b).sum();
            for (n, &j) in keys.iter().enumerate() {
                let ds = w[n] * (dw[n] - delta) * how.scale;
                for f in 0..d {
                    out[qr(i) + f] += w[n] * keep(j) * v[kr(j) + f];
                    dq[qr(i) + f] += ds * k[kr(j) + f];
                    dk[kr(j) + f] += ds * q[qr(i) + f];
                    dv[kr(j) + f] += w[n] * keep(j) * g[qr(i) + f];
                }
            }
        }
    }
    [out, lse, dq, dk, dv]
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-10,
        DType::F32 => 2e-5,
        DType::BF16 => 3e-2,
        _ => 5e-3,
    }
}

fn check(device: &Device, case: &Case, dtype: DType) {
    let mut rng = rng();
    let (shape, kv_shape) = case.shapes();
    let mut draw = |shape: &[usize]| random(device, &mut rng, shape, dtype, -1.0, 1.0);
    let ((q, qs), (k, ks), (v, vs), (g, gs)) =
        (draw(&shape), draw(&kv_shape), draw(&kv_shape), draw(&shape));
    let dims = [case.rows.len(), case.len()];
    let starts = Array::from_host(device, dims, &case.starts()).unwrap();
    let (out, lse) = attention_in_documents(&q, &k, &v, case.how, &starts).unwrap();
    let grads =
        attention_in_documents_backward((&q, &k, &v), (&out, &lse), &g, case.how, &starts).unwrap();
    let want = reference(case, (&qs, &ks, &vs, &gs));
    let what = format!("{device} {dtype} {case:?}");
    let rtol = tolerance(dtype);
    // Gradients sum over a row of keys or a column of queries of a group's heads.
    let sums = ((case.len() * case.group) as f64).sqrt();
    let got = [out, lse, grads.0, grads.1, grads.2];
    for (n, (got, want)) in got.iter().zip(&want).enumerate() {
        let name = ["out", "lse", "dq", "dk", "dv"][n];
        let scale = vec![if n < 2 { 1.0 } else { sums }; want.len()];
        let rtol = if n == 1 && dtype != DType::F64 {
            1e-5
        } else {
            rtol
        };
        let got = got.to_f64().unwrap();
        assert_close_scaled(&format!("{name} {what}"), &got, want, &scale, rtol);
    }
}

fn how(head: usize, window: Option<usize>, dropout: bool) -> Attention {
    Attention {
        scale: 1.0 / (head as f64).sqrt(),
        causal: true,
        window,
        dropout: dropout.then_some(AttentionDropout { p: 0.2, seed: 9 }),
    }
}

/// Documents of one position, one of a whole row, lengths across the CPU's blocks of 64 and
/// CUDA's tiles, with windows shorter and longer than the documents, grouped heads (two rows of
/// different layouts) and dropout. On CUDA bf16 and f16 heads of 64 and 128 run the
/// tensor-core kernels, the rest the warp kernels.
fn cases() -> Vec<Case> {
    let case = |heads, group, rows: &[&[usize]], head, how| Case {
        heads,
        group,
        rows: rows.iter().map(|r| r.to_vec()).collect(),
        head,
        how,
    };
    vec![
        case(2, 1, &[&[1; 9]], 8, how(8, None, false)),
        case(1, 1, &[&[150]], 16, how(16, None, false)),
        case(2, 1, &[&[1, 70, 5, 64, 60]], 16, how(16, None, true)),
        case(2, 1, &[&[3, 97, 1, 29]], 64, how(64, None, false)),
        case(1, 1, &[&[40, 1, 89]], 128, how(128, None, true)),
        case(2, 1, &[&[100, 30, 1, 69]], 33, how(33, Some(37), false)),
        case(2, 1, &[&[20, 180]], 64, how(64, Some(64), true)),
        case(4, 2, &[&[10, 60, 60], &[130]], 16, how(16, None, false)),
        case(
            4,
            4,
            &[&[65, 65], &[1, 128, 1]],
            64,
            how(64, Some(50), false),
        ),
        case(4, 2, &[&[33, 1, 36], &[2, 68]], 96, how(96, None, true)),
    ]
}

#[test]
fn attention_in_documents_equals_the_masked_reference_forward_and_backward() {
    for device in devices() {
        for case in cases() {
            for dtype in [DType::F64, DType::F32, DType::BF16, DType::F16] {
                check(&device, &case, dtype);
            }
        }
    }
}

#[test]
fn a_row_of_one_document_is_plain_causal_attention() {
    for device in devices() {
        for (dtype, window) in [
            (DType::F32, None),
            (DType::BF16, Some(40)),
            (DType::F16, None),
        ] {
            let mut rng = rng();
            let (shape, kv_shape) = ([2, 4, 130, 64], [2, 2, 130, 64]);
            let mut draw = |shape: &[usize]| random(&device, &mut rng, shape, dtype, -1.0, 1.0).0;
            let (q, k, v, g) = (draw(&shape), draw(&kv_shape), draw(&kv_shape), draw(&shape));
            let starts = Array::zeros(&device, [2, 130], DType::U32).unwrap();
            let how = how(64, window, true);
            let plain = {
                let (out, lse) = attention(&q, &k, &v, how).unwrap();
                let grads = attention_backward((&q, &k, &v), (&out, &lse), &g, how).unwrap();
                [out, lse, grads.0, grads.1, grads.2].map(|x| x.to_f64().unwrap())
            };
            let packed = {
                let (out, lse) = attention_in_documents(&q, &k, &v, how, &starts).unwrap();
                let saved = (&out, &lse);
                let grads =
                    attention_in_documents_backward((&q, &k, &v), saved, &g, how, &starts).unwrap();
                [out, lse, grads.0, grads.1, grads.2].map(|x| x.to_f64().unwrap())
            };
            assert_eq!(packed, plain, "{device} {dtype}");
        }
    }
}

/// Rotary positions restart at 0 with each document: each document's rows equal the rotation
/// of that document alone, forward and backward.
#[test]
fn rotary_in_documents_turns_each_document_from_position_zero() {
    for device in devices() {
        for dtype in [DType::F64, DType::F32, DType::BF16] {
            let rows: [&[usize]; 2] = [&[5, 1, 30], &[36]];
            let (len, heads, head) = (36, 3, 8);
            let starts: Vec<u32> = rows.iter().flat_map(|r| starts_of(r)).collect();
            let starts = Array::from_host(&device, [2, len], &starts).unwrap();
            let mut rng = rng();
            let (x, xs) = random(&device, &mut rng, &[2, heads, len, head], dtype, -1.0, 1.0);
            let freq = inv_freq(head, 10_000.0, None).unwrap();
            let fdtype = if dtype == DType::F64 {
                DType::F64
            } else {
                DType::F32
            };
            let freq = Array::from_f64(&device, [head / 2], fdtype, &freq).unwrap();
            let turned = rotary_in_documents(&x, &freq, &starts)
                .unwrap()
                .to_f64()
                .unwrap();
            let back = rotary_in_documents_backward(&x, &freq, &starts).unwrap();
            let back = back.to_f64().unwrap();
            for (b, row) in rows.iter().enumerate() {
                let mut first = 0;
                for &n in row.iter() {
                    for h in 0..heads {
                        let at = ((b * heads + h) * len + first) * head;
                        let part = &xs[at..][..n * head];
                        let alone = Array::from_f64(&device, [n, head], dtype, part).unwrap();
                        let want = rotary(&alone, &freq, 0).unwrap().to_f64().unwrap();
                        let want_back = rotary_backward(&alone, &freq, 0).unwrap();
                        let what = format!("{device} {dtype} row {b} document at {first}");
                        assert_eq!(turned[at..][..n * head], want[..], "{what}");
                        assert_eq!(
                            back[at..][..n * head],
                            want_back.to_f64().unwrap(),
                            "{what}"
                        );
                    }
                    first += n;
                }
            }
        }
    }
}

#[test]
fn document_positions_restart_with_each_document() {
    for device in devices() {
        let starts = [starts_of(&[1, 3, 2]), starts_of(&[6])].concat();
        let starts = Array::from_host(&device, [2, 6], &starts).unwrap();
        let positions = document_positions(&starts)
            .unwrap()
            .to_host::<u32>()
            .unwrap();
        assert_eq!(positions, [0, 0, 1, 2, 0, 1, 0, 1, 2, 3, 4, 5], "{device}");
    }
}

/// A 64 MiB device that records its allocations.
fn config() -> DeviceConfig {
    DeviceConfig::new(64 << 20).with_allocator(AllocatorConfig::default().with_history(1000))
}

/// One allocation event: (kind, size, requested, tag).
type AllocEvent = (EventKind, u64, u64, Option<Tag>);

/// The allocation events of `device` and its peak, after attention, rotary and positions in
/// documents, forward and backward.
fn planned(device: &Device) -> (Vec<AllocEvent>, u64) {
    {
        let zeros = |shape: &[usize], dtype| Array::zeros(device, shape, dtype).unwrap();
        let (q, k) = (
            zeros(&[2, 8, 40, 16], DType::BF16),
            zeros(&[2, 2, 40, 16], DType::BF16),
        );
        let starts = zeros(&[2, 40], DType::U32);
        let how = how(16, Some(9), true);
        let (out, lse) = attention_in_documents(&q, &k, &k, how, &starts).unwrap();
        let saved = (&out, &lse);
        attention_in_documents_backward((&q, &k, &k), saved, &q, how, &starts).unwrap();
        let freq = zeros(&[8], DType::F32);
        rotary_in_documents(&q, &freq, &starts).unwrap();
        rotary_in_documents_backward(&q, &freq, &starts).unwrap();
        document_positions(&starts).unwrap();
    }
    let events = device.allocator().with(|alloc| {
        let history = alloc.history().expect("recording is on");
        history
            .events()
            .filter(|e| matches!(e.kind, EventKind::Alloc | EventKind::Free))
            .map(|e| (e.kind, e.size, e.requested, e.tag))
            .collect()
    });
    (events, device.allocator().stats().peak_in_use)
}

#[test]
fn meta_plans_exactly_what_the_document_ops_allocate() {
    let cpu = planned(&Device::cpu(config()).unwrap());
    let meta = planned(&Device::meta(config()).unwrap());
    assert_eq!(cpu, meta);
}

#[test]
fn bad_starts_are_refused_with_what_is_wrong() {
    let device = Device::cpu(config()).unwrap();
    let q = Array::zeros(&device, [1, 2, 4, 8], DType::F32).unwrap();
    let how = how(8, None, false);
    let starts = |values: &[u32]| Array::from_host(&device, [1, 4], values).unwrap();
    let op = "attention_in_documents";
    let run = |starts: &Array, how| attention_in_documents(&q, &q, &q, how, starts);
    // The CPU's kernels check the values, under their own names.
    let values = ["starts[0][2] = 3", "past"];
    assert_fails(run(&starts(&[0, 0, 3, 2]), how), "attention", &values);
    assert_fails(
        run(&starts(&[0, 0, 1, 1]), how),
        "attention",
        &["starts[0][2] = 1"],
    );
    assert_fails(
        run(&starts(&[1, 1, 2, 2]), how),
        "attention",
        &["starts[0][0] = 1"],
    );
    let acausal = Attention {
        causal: false,
        ..how
    };
    assert_fails(run(&starts(&[0; 4]), acausal), op, &["causal"]);
    let wide = Array::from_host(&device, [1, 5], &[0u32; 5]).unwrap();
    assert_fails(run(&wide, how), op, &["[1, 5]", "[1, 4]"]);
    let floats = Array::zeros(&device, [1, 4], DType::F32).unwrap();
    assert_fails(run(&floats, how), op, &["u32"]);
    let freq = Array::zeros(&device, [4], DType::F32).unwrap();
    let turned = rotary_in_documents(&q, &freq, &starts(&[0, 0, 3, 3]));
    assert_fails(turned, "rotary", &["starts[0][2] = 3"]);
    let positions = document_positions(&starts(&[0, 2, 2, 2]));
    assert_fails(positions, "document_positions", &["starts[0][1] = 2"]);
    assert!(check_starts(&[0, 1, 1, 3], (1, 4), "pack").is_ok());
    assert!(check_starts(&[0, 1, 1], (1, 4), "pack").is_err());
}
