//! The rotary frequencies, computed on the host: `theta^(-2i / head)` for each pair `i`, with
//! Llama 3's rescaling of the low frequencies when asked.

use crate::error::{Error, Result};

/// Llama 3's rope scaling (`rope_type: "llama3"` in a `config.json`'s `rope_scaling`): the
/// frequencies whose wavelength is longer than the original context over `low_freq_factor` are
/// divided by `factor`, those shorter than it over `high_freq_factor` are kept, and those in
/// between move smoothly from one to the other. Configurations write it with these field
/// names, as `config.json` does.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Llama3Scaling {
    /// How much the low frequencies slow down (8 for Llama 3.1, 32 for Llama 3.2).
    pub factor: f64,
    /// The original context over this is the wavelength beyond which a frequency is divided
    /// by `factor` (1 in Llama 3).
    pub low_freq_factor: f64,
    /// The original context over this is the wavelength below which a frequency is kept (4).
    pub high_freq_factor: f64,
    /// The context the model was pre-trained at (8192 in Llama 3).
    pub original_max_position_embeddings: usize,
}

/// The frequencies of a head of `head` features (even) rotated with base `theta` (`rope_theta`):
/// `theta^(-2i / head)` for `i < head / 2`, rescaled by `scaling` as transformers'
/// `_compute_llama3_parameters` does. Computed in f64; transformers computes them in f32, so
/// the two agree to f32 rounding, which is how the kernels take them for every dtype but f64.
///
/// ```
/// use headroom_kernels::ops::rotary::inv_freq;
/// assert_eq!(inv_freq(4, 10_000.0, None)?, [1.0, 0.01]);
/// # Ok::<(), headroom_kernels::Error>(())
/// ```
pub fn inv_freq(head: usize, theta: f64, scaling: Option<Llama3Scaling>) -> Result<Vec<f64>> {
    const OP: &str = "inv_freq";
    let fail = |detail: String| Err(Error::Argument { op: OP, detail });
    if !head.is_multiple_of(2) {
        return fail(format!(
            "a head of {head} features is odd: they rotate in pairs"
        ));
    }
    if !(theta.is_finite() && theta > 0.0) {
        return fail(format!("theta must be finite and > 0, got {theta}"));
    }
    let plain = (0..head / 2).map(|i| 1.0 / theta.powf((2 * i) as f64 / head as f64));
    let Some(scaling) = scaling else {
        return Ok(plain.collect());
    };
    check_scaling(&scaling).map_err(|detail| Error::Argument { op: OP, detail })?;
    Ok(plain.map(|f| llama3_scaled(f, &scaling)).collect())
}

/// Fails unless every field of `s` is in the range Llama 3's rule divides by.
fn check_scaling(s: &Llama3Scaling) -> Result<(), String> {
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !positive(s.factor) || !positive(s.low_freq_factor) || !positive(s.high_freq_factor) {
        return Err(format!(
            "llama3 scaling needs finite factors > 0, got {s:?}"
        ));
    }
    if s.high_freq_factor <= s.low_freq_factor {
        return Err(format!(
            "llama3 scaling needs high_freq_factor > low_freq_factor, got {s:?}"
        ));
    }
    if s.original_max_position_embeddings == 0 {
        return Err("llama3 scaling needs original_max_position_embeddings > 0".into());
    }
    Ok(())
}

/// One frequency `f` rescaled by Llama 3's rule.
fn llama3_scaled(f: f64, s: &Llama3Scaling) -> f64 {
    let context = s.original_max_position_embeddings as f64;
    let (low_wavelen, high_wavelen) = (context / s.low_freq_factor, context / s.high_freq_factor);
    let wavelen = 2.0 * std::f64::consts::PI / f;
    if wavelen < high_wavelen {
        f
    } else if wavelen > low_wavelen {
        f / s.factor
    } else {
        let smooth =
            (context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        (1.0 - smooth) * f / s.factor + smooth * f
    }
}
