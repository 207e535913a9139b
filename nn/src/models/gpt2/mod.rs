//! GPT-2: learned positions, LayerNorm, a GELU MLP four times the width, biases everywhere; its
//! `config.json` and its checkpoints' names and layout.

pub(crate) mod blocks;
pub(crate) mod config;
pub(crate) mod names;
mod presets;

pub use config::Gpt2Config;
pub use presets::GPT2_VOCAB;
pub(crate) use presets::PRESETS;

/// Every way `heads` fails a width of `width`: GPT-2's heads divide it.
pub(crate) fn problems(width: usize, heads: usize) -> Vec<(&'static str, String)> {
    match heads == 0 || !width.is_multiple_of(heads) {
        true => vec![(
            "heads",
            format!("{heads} heads do not divide a width of {width}"),
        )],
        false => Vec::new(),
    }
}
