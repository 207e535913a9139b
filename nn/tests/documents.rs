//! Packed documents: a batch row holding several documents gives the loss and the parameter
//! gradients of its documents run one at a time (their losses weighted by their scored
//! tokens), on GPT-2 (learned positions), a small Llama (rotary, grouped heads) and the tiny
//! Gemma 3 (sliding windows, two rotary bases); with every way of keeping memory, streamed
//! weights and the materialized attention. Bad starts are refused.

mod common;

use std::path::Path;

use common::transformers_cases::data;
use common::{device, recorded_step, small_llama};
use headroom_autograd::Tensor;
use headroom_kernels::{DType, Device};
use headroom_nn::hf::{self, Gemma3Config};
use headroom_nn::{Family, Gpt, GptConfig, Initializer, Module, Recompute};

/// The target that is not scored.
const IGNORE: u32 = u32::MAX;

/// A packed row: the documents' lengths, their ids and targets (each document's first target
/// ignored, so that documents score different numbers of tokens).
struct Pack {
    lengths: Vec<usize>,
    ids: Vec<u32>,
    targets: Vec<u32>,
}

impl Pack {
    fn new(lengths: &[usize], vocab: usize) -> Self {
        let total: usize = lengths.iter().sum();
        let ids: Vec<u32> = (0..total).map(|i| ((i * 37 + 5) % vocab) as u32).collect();
        let mut targets: Vec<u32> = ids.iter().map(|&i| (i * 3 + 1) % vocab as u32).collect();
        let mut first = 0;
        for &n in lengths {
            targets[first] = IGNORE;
            first += n;
        }
        Self {
            lengths: lengths.to_vec(),
            ids,
            targets,
        }
    }

    fn starts(&self) -> Vec<u32> {
        let mut starts = Vec::new();
        for &n in &self.lengths {
            let start = starts.len() as u32;
            starts.extend(std::iter::repeat_n(start, n));
        }
        starts
    }

    /// Each document's range.
    fn documents(&self) -> Vec<std::ops::Range<usize>> {
        let mut first = 0;
        let mut out = Vec::new();
        for &n in &self.lengths {
            out.push(first..first + n);
            first += n;
        }
        out
    }

    fn scored(&self, range: std::ops::Range<usize>) -> usize {
        self.targets[range].iter().filter(|&&t| t != IGNORE).count()
    }
}

type Step = (Vec<f64>, Vec<Vec<f64>>);

/// The packed step of `gpt` on `pack`.
fn packed(gpt: &Gpt, device: &Device, pack: &Pack) -> Step {
    let t = pack.ids.len();
    let tensor = |values: &[u32]| Tensor::from_host(device, [1, t], values).unwrap();
    let (ids, targets, starts) = (
        tensor(&pack.ids),
        tensor(&pack.targets),
        tensor(&pack.starts()),
    );
    let (loss, grads, _) = recorded_step(gpt, device, || {
        gpt.loss_in_documents(&ids, &targets, Some(IGNORE), &starts)
    });
    (loss, grads)
}

/// The documents of `pack` run one at a time, their losses weighted by their scored tokens.
fn separate(gpt: &Gpt, device: &Device, pack: &Pack) -> Step {
    let total = pack.scored(0..pack.ids.len()) as f64;
    let (loss, grads, _) = recorded_step(gpt, device, || {
        let mut sum: Option<Tensor> = None;
        for range in pack.documents() {
            let n = range.len();
            let weight = pack.scored(range.clone()) as f64 / total;
            let ids = Tensor::from_host(device, [1, n], &pack.ids[range.clone()])?;
            let targets = Tensor::from_host(device, [1, n], &pack.targets[range])?;
            let loss = gpt.loss(&ids, &targets, Some(IGNORE))?.scale(weight)?;
            sum = Some(match sum {
                Some(sum) => sum.add(&loss)?,
                None => loss,
            });
        }
        Ok(sum.expect("a document at least"))
    });
    (loss, grads)
}

fn assert_close(what: &str, got: &Step, want: &Step) {
    let close = |a: f64, b: f64| (a - b).abs() <= 2e-5 * (1.0 + a.abs().max(b.abs()));
    assert!(
        close(got.0[0], want.0[0]),
        "{what}: loss {:?} vs {:?}",
        got.0,
        want.0
    );
    assert_eq!(got.1.len(), want.1.len());
    for (p, (g, w)) in got.1.iter().zip(&want.1).enumerate() {
        for (i, (&a, &b)) in g.iter().zip(w).enumerate() {
            assert!(
                close(a, b),
                "{what}: gradient {p} element {i} is {a}, want {b}"
            );
        }
    }
}

/// Packed equals separate for `make`'s model with every placement, and the packed loss
/// differs from the plain causal loss over the same row (the documents do not see each other).
fn check_family(name: &str, make: impl Fn(&Device) -> Gpt, pack: &Pack) {
    let device = device();
    let want = separate(&make(&device), &device, pack);
    for (recompute, stream, materialized) in [
        (Recompute::None, false, false),
        (Recompute::Cheap, false, false),
        (Recompute::CheapUp, false, false),
        (Recompute::Blocks, false, false),
        (Recompute::BlocksTiledMlp { rows: 3 }, false, false),
        (Recompute::Blocks, true, false),
        (Recompute::Blocks, false, true),
    ] {
        let mut gpt = make(&device);
        gpt.set_recompute(recompute);
        gpt.set_materialized_attention(materialized);
        if stream {
            gpt.set_offload_weights(Some(device.clone())).unwrap();
        }
        let what = format!("{name} {recompute:?} streamed {stream} materialized {materialized}");
        assert_close(&what, &packed(&gpt, &device, pack), &want);
    }
    let gpt = make(&device);
    let t = pack.ids.len();
    let ids = Tensor::from_host(&device, [1, t], &pack.ids).unwrap();
    let targets = Tensor::from_host(&device, [1, t], &pack.targets).unwrap();
    let plain = gpt
        .loss(&ids, &targets, Some(IGNORE))
        .unwrap()
        .to_f64()
        .unwrap();
    assert!(
        (plain[0] - want.0[0]).abs() > 1e-4,
        "{name}: documents made no difference"
    );
}

fn gpt2(device: &Device) -> Gpt {
    let config = GptConfig {
        vocab: 29,
        context: 16,
        width: 32,
        heads: 4,
        layers: 2,
        dropout: 0.0,
        tie_embeddings: true,
        family: Family::Gpt2,
    };
    Gpt::new(&mut Initializer::new(device, DType::F32, 3), config).unwrap()
}

fn llama(device: &Device) -> Gpt {
    let config = GptConfig {
        context: 16,
        ..small_llama(32, 8, 48)
    };
    Gpt::new(&mut Initializer::new(device, DType::F32, 5), config).unwrap()
}

fn gemma3(device: &Device) -> Gpt {
    let dir: &Path = &data("tiny-gemma3");
    let config = Gemma3Config::read(dir).unwrap();
    let mut init = Initializer::new(device, DType::F32, 7);
    let mut gpt = Gpt::new(&mut init, config.gpt_config(0.0)).unwrap();
    hf::load_llama(dir, &mut gpt).unwrap();
    gpt
}

#[test]
fn a_packed_gpt2_batch_is_its_documents_one_at_a_time() {
    check_family("gpt2", gpt2, &Pack::new(&[5, 1, 7], 29));
}

#[test]
fn a_packed_llama_batch_is_its_documents_one_at_a_time() {
    check_family("llama", llama, &Pack::new(&[4, 9, 2], 11));
}

#[test]
fn a_packed_gemma3_batch_is_its_documents_one_at_a_time() {
    // Documents longer than the window of 4 and shorter.
    check_family("gemma3", gemma3, &Pack::new(&[7, 2, 6], 320));
}

#[test]
fn a_row_of_one_document_is_the_plain_loss() {
    let device = device();
    let gpt = llama(&device);
    let pack = Pack::new(&[12], 11);
    let tensor = |values: &[u32]| Tensor::from_host(&device, [1, 12], values).unwrap();
    let (ids, targets) = (tensor(&pack.ids), tensor(&pack.targets));
    let starts = tensor(&pack.starts());
    let plain = gpt.loss(&ids, &targets, Some(IGNORE)).unwrap();
    let packed = gpt.loss_in_documents(&ids, &targets, Some(IGNORE), &starts);
    assert_eq!(packed.unwrap().to_f64().unwrap(), plain.to_f64().unwrap());
}

#[test]
fn bad_starts_are_refused() {
    let device = device();
    let gpt = gpt2(&device);
    let ids = Tensor::from_host(&device, [1, 4], &[1u32, 2, 3, 4]).unwrap();
    let loss = |starts: &Tensor| gpt.loss_in_documents(&ids, &ids, None, starts);
    let message = |starts: &Tensor| loss(starts).unwrap_err().to_string();
    let starts = |values: &[u32]| Tensor::from_host(&device, [1, values.len()], values).unwrap();
    assert!(message(&starts(&[0, 0, 3, 3])).contains("starts[0][2] = 3"));
    assert!(message(&starts(&[0, 0, 1, 1])).contains("starts[0][2] = 1"));
    assert!(message(&starts(&[0, 0, 0])).contains("the ids' shape"));
    let floats = Tensor::from_f64(&device, [1, 4], DType::F32, &[0.0; 4]).unwrap();
    assert!(message(&floats).contains("u32"));
}

/// The peak of a packed step of `make`'s model on `device`, whole blocks recomputed.
fn packed_peak(device: &Device, make: &dyn Fn(&Device) -> Gpt, pack: &Pack) -> u64 {
    let mut gpt = make(device);
    gpt.set_recompute(Recompute::Blocks);
    let t = pack.ids.len();
    let tensor = |values: &[u32]| Tensor::from_host(device, [1, t], values).unwrap();
    let (ids, targets, starts) = (
        tensor(&pack.ids),
        tensor(&pack.targets),
        tensor(&pack.starts()),
    );
    let tape = headroom_autograd::Tape::new();
    let loss = tape
        .record(|| gpt.loss_in_documents(&ids, &targets, Some(IGNORE), &starts))
        .unwrap();
    let parameters = gpt.parameters();
    let sources: Vec<&Tensor> = parameters.iter().collect();
    drop(tape.gradient(&loss, &sources).unwrap());
    device.allocator().stats().peak_in_use
}

#[test]
fn the_meta_device_plans_a_packed_step_exactly() {
    let config = || headroom_kernels::DeviceConfig::new(512 << 20);
    for (name, make) in [
        ("gpt2", &gpt2 as &dyn Fn(&Device) -> Gpt),
        ("llama", &llama),
    ] {
        let pack = Pack::new(&[5, 1, 7], 11);
        let cpu = packed_peak(&Device::cpu(config()).unwrap(), make, &pack);
        let meta = packed_peak(&Device::meta(config()).unwrap(), make, &pack);
        assert_eq!(cpu, meta, "{name}");
    }
}
