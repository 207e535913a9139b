//! Shared test machinery: a device, seeded random inputs, and a finite-difference gradient check.
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use headroom_alloc::trace::SplitMix64;
use headroom_autograd::check::{Function, gradcheck};
use headroom_autograd::{Result, Tensor};
use headroom_kernels::{Array, DType, Device, DeviceConfig, Shape};

/// A CPU device of its own, with room for every test here.
pub fn device() -> Device {
    Device::cpu(DeviceConfig::new(256 << 20)).expect("a CPU device")
}

/// One CPU device shared by the tests of a binary that do not count bytes, so that the
/// constants they make (token ids, say) live where the gradient checks run.
pub fn shared_device() -> Device {
    static DEVICE: std::sync::OnceLock<Device> = std::sync::OnceLock::new();
    DEVICE.get_or_init(device).clone()
}

/// A generator seeded from `HEADROOM_SEED` or the clock, printed so that a failure can be
/// replayed; each call gets a distinct stream.
pub fn rng() -> SplitMix64 {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let base = std::env::var("HEADROOM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let seed = base.wrapping_add(CALLS.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9E37));
    eprintln!("seed {seed} (replay with HEADROOM_SEED={seed})");
    SplitMix64::new(seed)
}

/// Random values in `[lo, hi)`, never within 1e-3 of zero (kinks and poles stay away).
pub fn values(rng: &mut SplitMix64, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n)
        .map(|_| {
            let v = lo + (hi - lo) * rng.next_f64();
            if v.abs() < 1e-3 { 0.5 } else { v }
        })
        .collect()
}

/// A float input of a gradient check: its shape and the range its values are drawn from.
#[derive(Debug, Clone, Copy)]
pub struct Input {
    pub shape: &'static [usize],
    pub lo: f64,
    pub hi: f64,
}

/// An input of `shape` with values in `[-2, 2)`.
pub fn input(shape: &'static [usize]) -> Input {
    Input {
        shape,
        lo: -2.0,
        hi: 2.0,
    }
}

/// An input of `shape` with values in `[lo, hi)`.
pub fn ranged(shape: &'static [usize], lo: f64, hi: f64) -> Input {
    Input { shape, lo, hi }
}

/// Checks the gradients the tape computes for `f` in `dtype`, at random points drawn from
/// `inputs`, against central finite differences in f64 ([`gradcheck`]), within `rtol`.
pub fn check_gradients(name: &str, inputs: &[Input], dtype: DType, rtol: f64, f: Function<'_>) {
    let device = shared_device();
    let mut rng = rng();
    let tensors: Vec<Tensor> = inputs
        .iter()
        .map(|i| {
            let v = values(&mut rng, Shape::new(i.shape).numel(), i.lo, i.hi);
            Tensor::new(Array::from_f64(&device, i.shape, dtype, &v).unwrap())
        })
        .collect();
    let report = gradcheck(f, &tensors, rng.next_u64()).unwrap_or_else(|e| panic!("{name}: {e}"));
    for (t, grad) in tensors.iter().zip(&report.analytic) {
        assert_eq!(
            grad.len(),
            t.numel(),
            "{name}: one gradient element per input element"
        );
    }
    if let Some(mismatch) = report.first_mismatch(rtol) {
        panic!("{name} in {dtype}: {mismatch}");
    }
}

/// Runs [`check_gradients`] in f64 (tight) and in f32 (looser).
pub fn gradcheck_f64_f32(name: &str, inputs: &[Input], f: Function<'_>) {
    check_gradients(name, inputs, DType::F64, 1e-6, f);
    check_gradients(name, inputs, DType::F32, 5e-3, f);
}

/// A plain MLP for the memory tests: linear layers (weights `[out, in]`, ReLU between them),
/// weights as variables.
pub struct Mlp {
    pub params: Vec<(Tensor, Tensor)>,
}

impl Mlp {
    /// `sizes[0] -> sizes[1] -> ... -> sizes[n]`, with seeded weights (tagged as weights).
    pub fn new(device: &Device, sizes: &[usize], dtype: DType, seed: u64) -> Self {
        let _weights = device.scoped_tag(headroom_alloc::Tag::WEIGHTS);
        let mut rng = SplitMix64::new(seed);
        let params = sizes
            .windows(2)
            .map(|io| {
                let (i, o) = (io[0], io[1]);
                let bound = 1.0 / (i as f64).sqrt();
                let w = values(&mut rng, i * o, -bound, bound);
                let b = values(&mut rng, o, -bound, bound);
                (
                    Tensor::variable(Array::from_f64(device, [o, i], dtype, &w).unwrap()),
                    Tensor::variable(Array::from_f64(device, [o], dtype, &b).unwrap()),
                )
            })
            .collect();
        Self { params }
    }

    /// Logits for `x`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for (k, (w, b)) in self.params.iter().enumerate() {
            h = h.linear(w, Some(b))?;
            if k + 1 < self.params.len() {
                h = h.relu()?;
            }
        }
        Ok(h)
    }

    /// Logits for `x`, every two layers (linear, ReLU, linear, ReLU) one recomputed segment.
    pub fn recomputed_forward(&self, x: &Tensor) -> Result<Tensor> {
        let layers = self.params.len();
        let mut h = x.clone();
        for first in (0..layers).step_by(2) {
            let params = self.params[first..(first + 2).min(layers)].to_vec();
            let variables: Vec<&Tensor> = params.iter().flat_map(|(w, b)| [w, b]).collect();
            let segment = {
                let params = params.clone();
                move |x: &[Tensor]| {
                    let mut h = x[0].clone();
                    for (k, (w, b)) in params.iter().enumerate() {
                        h = h.linear(w, Some(b))?;
                        if first + k + 1 < layers {
                            h = h.relu()?;
                        }
                    }
                    Ok(h)
                }
            };
            h = headroom_autograd::recompute(&[&h], &variables, segment)?;
        }
        Ok(h)
    }

    /// Every parameter.
    pub fn variables(&self) -> Vec<&Tensor> {
        self.params.iter().flat_map(|(w, b)| [w, b]).collect()
    }
}

/// A batch of `rows` inputs of `width` and class targets below `classes`.
pub fn batch(
    device: &Device,
    rows: usize,
    width: usize,
    classes: usize,
    seed: u64,
) -> (Tensor, Tensor) {
    let mut rng = SplitMix64::new(seed);
    let x = values(&mut rng, rows * width, -1.0, 1.0);
    let t: Vec<u32> = (0..rows)
        .map(|_| (rng.next_u64() % classes as u64) as u32)
        .collect();
    (
        Tensor::from_f64(device, [rows, width], DType::F32, &x).unwrap(),
        Tensor::from_host(device, [rows], &t).unwrap(),
    )
}

/// A one-block causal transformer small enough to test every allocation of a step: token and
/// position embeddings, a pre-norm attention block with a fused QKV projection split into heads,
/// a GELU MLP, and a cross-entropy over a vocabulary head. Touches nearly every op.
pub struct TinyTransformer {
    pub vocab: usize,
    pub context: usize,
    pub width: usize,
    pub heads: usize,
    pub params: Vec<Tensor>,
}

impl TinyTransformer {
    pub fn new(device: &Device, vocab: usize, context: usize, width: usize, heads: usize) -> Self {
        let _weights = device.scoped_tag(headroom_alloc::Tag::WEIGHTS);
        let mut rng = SplitMix64::new(11);
        let mut param = |shape: &[usize], scale: f64, offset: f64| {
            let n = Shape::new(shape).numel();
            let v: Vec<f64> = values(&mut rng, n, -scale, scale)
                .iter()
                .map(|x| x + offset)
                .collect();
            Tensor::variable(Array::from_f64(device, shape, DType::F32, &v).unwrap())
        };
        let c = width;
        let params = vec![
            param(&[vocab, c], 0.5, 0.0),   // 0 token embedding
            param(&[context, c], 0.5, 0.0), // 1 position embedding
            param(&[c], 0.1, 1.0),          // 2 ln1 gamma
            param(&[c], 0.1, 0.0),          // 3 ln1 beta
            param(&[c, 3 * c], 0.3, 0.0),   // 4 qkv
            param(&[c, c], 0.3, 0.0),       // 5 attention projection
            param(&[c], 0.1, 1.0),          // 6 ln2 gamma
            param(&[c], 0.1, 0.0),          // 7 ln2 beta
            param(&[c, 4 * c], 0.3, 0.0),   // 8 mlp up
            param(&[4 * c], 0.1, 0.0),      // 9 mlp up bias
            param(&[4 * c, c], 0.3, 0.0),   // 10 mlp down
            param(&[c, vocab], 0.3, 0.0),   // 11 vocabulary head
        ];
        Self {
            vocab,
            context,
            width,
            heads,
            params,
        }
    }

    /// The mean next-token cross-entropy of `ids` (`[B, T]`) against `targets` (`[B * T]`).
    pub fn loss(&self, ids: &Tensor, targets: &Tensor) -> Result<Tensor> {
        let p = &self.params;
        let (b, t) = (ids.dims()[0], ids.dims()[1]);
        let (c, h) = (self.width, self.heads);
        let d = c / h;
        let x = p[0].embedding(ids)?.add(&p[1].narrow(0, 0, t)?)?;
        let n = x.layer_norm(&p[2], &p[3], 1e-5)?;
        let qkv = n.matmul(&p[4])?.split(2, &[c, c, c])?;
        let heads = |m: &Tensor| m.reshape([b, t, h, d])?.permute(&[0, 2, 1, 3]);
        let (q, k, v) = (heads(&qkv[0])?, heads(&qkv[1])?, heads(&qkv[2])?);
        let scores = q
            .matmul_t(&k, false, true)?
            .scale(1.0 / (d as f64).sqrt())?;
        let attention = scores
            .causal_mask(f64::NEG_INFINITY)?
            .softmax()?
            .matmul(&v)?;
        let merged = attention.permute(&[0, 2, 1, 3])?.reshape([b, t, c])?;
        let x = x.add(&merged.matmul(&p[5])?)?;
        let n = x.layer_norm(&p[6], &p[7], 1e-5)?;
        let up = n.matmul(&p[8])?.add(&p[9])?.gelu()?;
        let x = x.add(&up.matmul(&p[10])?)?;
        let logits = x.matmul(&p[11])?.reshape([b * t, self.vocab])?;
        logits.cross_entropy(targets, None)
    }

    /// Every parameter.
    pub fn variables(&self) -> Vec<&Tensor> {
        self.params.iter().collect()
    }
}
