//! Choosing tokens from logits: greedy, temperature, top-k, top-p, reproducibility.

use headroom_nn::{Error, Sampler, Sampling};

fn sampling(temperature: f64, top_k: Option<usize>, top_p: Option<f64>) -> Sampling {
    Sampling {
        temperature,
        top_k,
        top_p,
    }
}

/// Logits in [-4, 4) from a simple generator, with a few exact ties.
fn logits(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) % 16) as f32 / 2.0 - 4.0
        })
        .collect()
}

/// The most likely id, the lowest among equals.
fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

#[test]
fn greedy_is_the_argmax_with_ties_to_the_lowest_id() {
    let mut sampler = Sampler::new(Sampling::greedy(), 1).unwrap();
    assert_eq!(sampler.next(&[1.0, 3.0, 3.0, -2.0]).unwrap(), 1);
    assert_eq!(sampler.next(&[0.0, 0.0]).unwrap(), 0);
    for seed in 0..200 {
        let l = logits(seed, 37);
        assert_eq!(sampler.next(&l).unwrap(), argmax(&l), "{l:?}");
    }
}

#[test]
fn top_k_1_and_a_tiny_top_p_are_the_argmax_at_any_temperature() {
    for temperature in [0.1, 1.0, 10.0, 1e6] {
        let mut top_k = Sampler::new(sampling(temperature, Some(1), None), 2).unwrap();
        let mut top_p = Sampler::new(sampling(temperature, None, Some(1e-9)), 3).unwrap();
        for seed in 0..200 {
            let l = logits(seed, 37);
            assert_eq!(top_k.next(&l).unwrap(), argmax(&l), "T {temperature}");
            assert_eq!(top_p.next(&l).unwrap(), argmax(&l), "T {temperature}");
        }
    }
}

#[test]
fn a_seeded_sampler_is_reproducible() {
    let how = sampling(1.5, Some(20), Some(0.95));
    let draw = |seed| {
        let mut sampler = Sampler::new(how, seed).unwrap();
        (0..200)
            .map(|i| sampler.next(&logits(i, 37)).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(draw(42), draw(42));
    assert_ne!(draw(42), draw(43));
}

/// Frequencies of each of `n` ids in 20000 draws by `how` from `logits`.
fn frequencies(how: Sampling, logits: &[f32]) -> Vec<f64> {
    const DRAWS: usize = 20_000;
    let mut sampler = Sampler::new(how, 7).unwrap();
    let mut counts = vec![0usize; logits.len()];
    for _ in 0..DRAWS {
        counts[sampler.next(logits).unwrap() as usize] += 1;
    }
    counts.iter().map(|&c| c as f64 / DRAWS as f64).collect()
}

fn softmax(logits: &[f32], temperature: f64) -> Vec<f64> {
    let e: Vec<f64> = logits
        .iter()
        .map(|&l| (f64::from(l) / temperature).exp())
        .collect();
    let sum: f64 = e.iter().sum();
    e.iter().map(|x| x / sum).collect()
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 0.02, "{what}: {got:?} vs {want:?}");
    }
}

#[test]
fn draws_follow_the_softmax_at_the_temperature() {
    let logits = [0.0, 1.0, 2.0];
    for t in [1.0, 2.0, 0.5] {
        let got = frequencies(sampling(t, None, None), &logits);
        assert_close(&got, &softmax(&logits, t), &format!("T {t}"));
    }
}

#[test]
fn top_k_and_top_p_draw_from_the_renormalized_survivors() {
    // Probabilities 0.090, 0.245, 0.665.
    let logits = [0.0, 1.0, 2.0];
    let two = softmax(&logits[1..], 1.0);
    let want = [0.0, two[0], two[1]];
    let got = frequencies(sampling(1.0, Some(2), None), &logits);
    assert_close(&got, &want, "top_k 2");
    // 0.665 does not reach 0.7: the nucleus is the two most likely.
    let got = frequencies(sampling(1.0, None, Some(0.7)), &logits);
    assert_eq!(got[0], 0.0);
    assert_close(&got, &want, "top_p 0.7");
    // 0.665 reaches 0.6: the nucleus is the most likely alone.
    let got = frequencies(sampling(1.0, None, Some(0.6)), &logits);
    assert_eq!(got, [0.0, 0.0, 1.0]);
    // top_p 1 keeps everything.
    let got = frequencies(sampling(1.0, None, Some(1.0)), &logits);
    assert_close(&got, &softmax(&logits, 1.0), "top_p 1");
}

#[test]
fn validate_rejects_impossible_settings() {
    let bad = [
        sampling(-0.5, None, None),
        sampling(f64::NAN, None, None),
        sampling(f64::INFINITY, None, None),
        sampling(1.0, Some(0), None),
        sampling(1.0, None, Some(0.0)),
        sampling(1.0, None, Some(-0.1)),
        sampling(1.0, None, Some(1.5)),
        sampling(1.0, None, Some(f64::NAN)),
    ];
    for how in bad {
        assert!(
            matches!(how.validate(), Err(Error::Config { .. })),
            "{how:?}"
        );
        assert!(Sampler::new(how, 0).is_err(), "{how:?}");
    }
    for how in [
        Sampling::default(),
        Sampling::greedy(),
        sampling(0.7, Some(1), Some(1.0)),
        sampling(1e-9, Some(50), Some(1e-9)),
    ] {
        how.validate().unwrap();
    }
}

#[test]
fn no_logits_or_non_finite_logits_are_errors() {
    for how in [Sampling::greedy(), Sampling::default()] {
        let mut sampler = Sampler::new(how, 0).unwrap();
        for bad in [
            vec![],
            vec![1.0, f32::NAN],
            vec![f32::INFINITY, 0.0],
            vec![0.0, f32::NEG_INFINITY],
        ] {
            let err = sampler.next(&bad).unwrap_err();
            assert!(matches!(err, Error::Config { .. }), "{bad:?}: {err}");
        }
    }
}
