//! Generation with a key/value cache: the cached logits equal the full forward pass's.

mod common;

use common::{device, seed};
use headroom_autograd::{Tape, Tensor};
use headroom_kernels::{DType, Device};
use headroom_nn::{Error, Family, Gpt, GptConfig, Initializer, KvCache, Module};

const CONFIG: GptConfig = GptConfig {
    vocab: 37,
    context: 16,
    width: 32,
    heads: 4,
    layers: 2,
    dropout: 0.0,
    tie_embeddings: false,
    family: Family::Gpt2,
};

const BATCH: usize = 2;

/// Uniform numbers in [-1, 1) from `state` (SplitMix64).
fn next(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// A GPT whose parameters are all uniform in [-0.5, 0.5): large enough that every position's
/// logits differ clearly from every other's.
fn gpt(device: &Device, tied: bool, seed: u64) -> Gpt {
    let config = GptConfig {
        tie_embeddings: tied,
        ..CONFIG
    };
    let mut gpt = Gpt::new(&mut Initializer::new(device, DType::F32, seed), config).unwrap();
    let mut state = seed;
    gpt.visit_mut(&mut |_, t| {
        let values: Vec<f64> = (0..t.numel()).map(|_| 0.5 * next(&mut state)).collect();
        *t = Tensor::from_f64(device, t.shape().clone(), DType::F32, &values)?;
        Ok(())
    })
    .unwrap();
    gpt
}

/// `BATCH` sequences of `context` random ids, row-major.
fn sequence(seed: u64) -> Vec<u32> {
    let mut state = seed ^ 0xABCD;
    (0..BATCH * CONFIG.context)
        .map(|_| ((next(&mut state) + 1.0) / 2.0 * CONFIG.vocab as f64) as u32)
        .collect()
}

/// Positions `start..start + len` of every row of `ids`, as a `[BATCH, len]` tensor.
fn slice(device: &Device, ids: &[u32], start: usize, len: usize) -> Tensor {
    let rows: Vec<u32> = ids
        .chunks(CONFIG.context)
        .flat_map(|row| row[start..start + len].to_vec())
        .collect();
    Tensor::from_host(device, [BATCH, len], &rows).unwrap()
}

/// Feeds `ids` to `gpt` in chunks of `chunks` tokens through one cache, checking the logits
/// after each chunk against `full` (`[BATCH, context, vocab]`) at the chunk's last position.
fn check_chunks(device: &Device, gpt: &Gpt, ids: &[u32], full: &[f64], chunks: &[usize]) {
    let (vocab, context) = (CONFIG.vocab, CONFIG.context);
    let mut cache = gpt.kv_cache(BATCH);
    let mut start = 0;
    for &t in chunks {
        let logits = gpt
            .forward_cached(&slice(device, ids, start, t), &mut cache)
            .unwrap();
        assert_eq!(logits.dims(), [BATCH, vocab]);
        start += t;
        assert_eq!(cache.len(), start);
        let got = logits.to_f64().unwrap();
        for b in 0..BATCH {
            let at = (b * context + start - 1) * vocab;
            let want = &full[at..at + vocab];
            for (i, (g, w)) in got[b * vocab..(b + 1) * vocab].iter().zip(want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5,
                    "chunks {chunks:?}, position {}, row {b}, logit {i}: {g} vs {w}",
                    start - 1
                );
            }
        }
    }
}

/// The chunkings the tests feed a whole sequence in.
fn chunkings() -> Vec<Vec<usize>> {
    let context = CONFIG.context;
    vec![
        // A prompt of 5, then one token at a time.
        [5].into_iter().chain(vec![1; context - 5]).collect(),
        // One token at a time from empty.
        vec![1; context],
        // Several tokens on a non-empty cache (causal among themselves).
        vec![3, 4, 1, 6, 2],
        // The whole sequence at once.
        vec![context],
    ]
}

fn check_model(tied: bool, materialized: bool) {
    let (device, seed) = (device(), seed());
    let mut gpt = gpt(&device, tied, seed);
    gpt.set_materialized_attention(materialized);
    let ids = sequence(seed);
    let full = gpt
        .forward(&slice(&device, &ids, 0, CONFIG.context))
        .unwrap();
    assert_eq!(full.dims(), [BATCH, CONFIG.context, CONFIG.vocab]);
    let full = full.to_f64().unwrap();
    for chunks in chunkings() {
        check_chunks(&device, &gpt, &ids, &full, &chunks);
    }
}

#[test]
fn cached_logits_equal_the_full_forward_pass_untied() {
    check_model(false, false);
}

#[test]
fn cached_logits_equal_the_full_forward_pass_tied() {
    check_model(true, false);
}

#[test]
fn cached_logits_equal_the_full_forward_pass_with_materialized_attention() {
    check_model(true, true);
}

fn config_detail(err: Error) -> String {
    match err {
        Error::Config { detail, .. } => detail,
        other => panic!("expected a configuration error, got {other}"),
    }
}

#[test]
fn feeding_past_the_context_is_an_error_that_leaves_the_cache_as_it_was() {
    let device = device();
    let gpt = gpt(&device, false, 3);
    let ids = sequence(3);
    let mut cache = gpt.kv_cache(BATCH);
    gpt.forward_cached(&slice(&device, &ids, 0, 12), &mut cache)
        .unwrap();
    let bytes = cache.bytes();
    let err = gpt
        .forward_cached(&slice(&device, &ids, 0, 5), &mut cache)
        .unwrap_err();
    let detail = config_detail(err);
    assert!(
        detail.contains("5 new tokens after 12 cached") && detail.contains("context of 16"),
        "{detail}"
    );
    assert_eq!((cache.len(), cache.bytes()), (12, bytes));
    // What fits still works, up to the context exactly.
    gpt.forward_cached(&slice(&device, &ids, 12, 4), &mut cache)
        .unwrap();
    assert_eq!(cache.len(), CONFIG.context);
    let err = gpt
        .forward_cached(&slice(&device, &ids, 0, 1), &mut cache)
        .unwrap_err();
    assert!(config_detail(err).contains("context of 16"));
    // A prompt longer than the context on an empty cache, too.
    let long = Tensor::from_host(&device, [1, 17], &[1u32; 17]).unwrap();
    let err = gpt.forward_cached(&long, &mut gpt.kv_cache(1)).unwrap_err();
    assert!(config_detail(err).contains("17 new tokens after 0 cached"));
}

#[test]
fn ids_of_the_wrong_shape_batch_or_dtype_are_errors() {
    let device = device();
    let gpt = gpt(&device, true, 4);
    let mut cache = gpt.kv_cache(BATCH);
    let cases = [
        Tensor::from_host(&device, [BATCH * 3], &[1u32; BATCH * 3]).unwrap(),
        Tensor::from_host(&device, [BATCH, 1, 3], &[1u32; BATCH * 3]).unwrap(),
        Tensor::from_host(&device, [BATCH + 1, 3], &[1u32; (BATCH + 1) * 3]).unwrap(),
        Tensor::from_host(&device, [BATCH, 0], &[0u32; 0]).unwrap(),
        Tensor::from_f64(&device, [BATCH, 3], DType::F32, &[1.0; BATCH * 3]).unwrap(),
    ];
    for ids in cases {
        let err = gpt.forward_cached(&ids, &mut cache).unwrap_err();
        assert!(config_detail(err).contains("ids of shape"));
        assert!(cache.is_empty());
    }
    // A cache made for another model.
    let deeper = Gpt::new(
        &mut Initializer::new(&device, DType::F32, 1),
        GptConfig {
            layers: 3,
            ..CONFIG
        },
    )
    .unwrap();
    let ids = Tensor::from_host(&device, [BATCH, 1], &[1u32; BATCH]).unwrap();
    let err = deeper.forward_cached(&ids, &mut cache).unwrap_err();
    assert!(config_detail(err).contains("a cache of 2 blocks"));
}

#[test]
fn the_cache_holds_every_position_s_keys_and_values_and_records_nothing() {
    let device = device();
    let gpt = gpt(&device, false, 5);
    let ids = sequence(5);
    let mut cache: KvCache = gpt.kv_cache(BATCH);
    assert_eq!((cache.len(), cache.batch(), cache.bytes()), (0, BATCH, 0));
    let tape = Tape::new();
    let _recording = tape.start();
    let logits = gpt
        .forward_cached(&slice(&device, &ids, 0, 3), &mut cache)
        .unwrap();
    assert!(!tape.tracks(&logits));
    // Keys and values, per block, of [BATCH, width] f32 per position.
    let per_position = 2 * CONFIG.layers * BATCH * CONFIG.width * 4;
    assert!(cache.bytes() >= 3 * per_position, "{}", cache.bytes());
    let three = cache.bytes();
    gpt.forward_cached(&slice(&device, &ids, 3, 1), &mut cache)
        .unwrap();
    assert!(cache.bytes() > three && cache.bytes() >= 4 * per_position);
    assert!(!cache.is_empty());
    cache.clear();
    assert_eq!((cache.len(), cache.bytes()), (0, 0));
    assert!(cache.is_empty());
    // A cleared cache starts again at position 0.
    gpt.forward_cached(&slice(&device, &ids, 0, 2), &mut cache)
        .unwrap();
    assert_eq!(cache.len(), 2);
}
