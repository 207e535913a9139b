//! `headroom generate`: text from a trained GPT, one token at a time through a key/value cache
//! ([`headroom_nn::KvCache`]), so that each new token costs its own work and attention over the
//! prefix, not the prefix again. Text is handed on as soon as it forms whole characters, and
//! generation stops at an end-of-text or end-of-turn token ([`TextTokenizer::stops`]), at
//! `max_tokens`, or at the model's context (a prompt longer than the context is refused before
//! anything is generated: no sliding window). Prompts are encoded as the model expects to read
//! them ([`TextTokenizer::encode_document`]: Llama 3's begin-of-text token in front).
//!
//! The cache and the weights come from the run's device and its allocator, under the same
//! memory limit as everything else.

use std::time::Instant;

use headroom_autograd::Tensor;
use headroom_kernels::DType;
use headroom_nn::{Gpt, Module, Sampler, Sampling};

use crate::config::PrecisionKind;
use crate::data::tokenizer::TextTokenizer;
use crate::error::{Error, Result};

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// The text to continue; empty: start from the tokenizer's begin-of-text token (Llama 3's)
    /// or its end-of-text token (as GPT-2 does).
    pub prompt: String,
    /// The most tokens to generate.
    pub max_tokens: usize,
    /// How each token is drawn.
    pub sampling: Sampling,
    /// Seeds the draws.
    pub seed: u64,
    /// The precision the products run in: the run's ([`TrainConfig::compute_precision`]), as
    /// it trained and as `eval` judges it (bf16 parameters and f32 adapters meet in bf16).
    ///
    /// [`TrainConfig::compute_precision`]: crate::config::TrainConfig::compute_precision
    pub precision: PrecisionKind,
    /// Ids that end the text besides the tokenizer's own ([`TextTokenizer::stops`]): the
    /// model's end-of-sequence ids, which its `generation_config.json` may list several of.
    pub stops: Vec<u32>,
    /// The prompt is a conversation rendered with a chat template, which writes its own
    /// special tokens: it is encoded without adding any.
    pub rendered: bool,
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// It generated `max_tokens`.
    MaxTokens,
    /// The model ended the text (or its turn).
    EndOfText,
    /// The sequence filled the model's context.
    Context,
}

/// What a generation did.
#[derive(Debug, Clone)]
pub struct Generated {
    /// The prompt's tokens.
    pub prompt_tokens: usize,
    /// The generated tokens.
    pub tokens: Vec<u32>,
    /// Why it stopped.
    pub stop: Stop,
    /// Device bytes the key/value cache held at the end.
    pub cache_bytes: usize,
    /// Seconds spent on the prompt.
    pub prompt_seconds: f64,
    /// Seconds spent on the generated tokens.
    pub seconds: f64,
}

/// The token ids of `prompt` for `gpt`, checked before anything is generated or shown: the
/// tokenizer must fit the model, the prompt must encode (a character run's vocabulary holds
/// each of its characters), and it must fit the model's context. A prompt longer than the
/// context is an error, not cropped: generation stops when the context is full (the key/value
/// cache holds each position once; there is no sliding window as in nanoGPT's `sample.py`), so
/// a cropped prompt would leave no room to generate. An empty prompt starts from the
/// begin-of-text token the tokenizer adds, or else from the end-of-text token.
pub fn prompt_ids(gpt: &Gpt, tokenizer: &TextTokenizer, prompt: &str) -> Result<Vec<u32>> {
    checked_prompt(gpt, tokenizer, prompt, false)
}

/// [`prompt_ids`], the prompt encoded without special tokens added where it is `rendered`
/// with a chat template.
pub fn checked_prompt(
    gpt: &Gpt,
    tokenizer: &TextTokenizer,
    prompt: &str,
    rendered: bool,
) -> Result<Vec<u32>> {
    let context = gpt.config().context;
    let vocab = gpt.config().vocab;
    if tokenizer.vocab() > vocab {
        return Err(Error::Data {
            path: tokenizer.path().to_owned(),
            detail: format!(
                "a vocabulary of {} tokens, more than the model's {vocab}: not this model's \
                 tokenizer",
                tokenizer.vocab()
            ),
        });
    }
    let mut ids = match rendered {
        true => tokenizer.encode(prompt)?,
        false => tokenizer.encode_document(prompt)?,
    };
    if ids.is_empty() {
        ids.extend(tokenizer.end_of_text());
    }
    if ids.is_empty() {
        return Err(Error::config(
            "an empty prompt needs a tokenizer with <|endoftext|> to start from; give a prompt \
             (--prompt)",
        ));
    }
    if ids.len() > context {
        return Err(Error::config(format!(
            "the prompt is {} tokens, longer than the model's context of {context}: shorten it \
             by at least {} tokens (generation stops when the context is full; prompts are not \
             cropped)",
            ids.len(),
            ids.len() - context
        )));
    }
    Ok(ids)
}

/// Continues `options.prompt` with `gpt`, handing each piece of text to `emit` as soon as it
/// forms whole characters; the prompt is checked first (see [`prompt_ids`]).
///
/// Running out of memory is an [`Error::DoesNotFit`] whose advice is about generation: what
/// the weights and the key/value cache held, and what makes them smaller.
pub fn generate(
    gpt: &Gpt,
    tokenizer: &TextTokenizer,
    options: &GenerateOptions,
    emit: &mut dyn FnMut(&str) -> Result<()>,
) -> Result<Generated> {
    let mut cached = 0;
    generated(gpt, tokenizer, options, emit, &mut cached)
        .map_err(|err| out_of_memory_advice(err, gpt, cached))
}

/// [`generate`], counting the positions the cache holds in `cached` as it goes.
fn generated(
    gpt: &Gpt,
    tokenizer: &TextTokenizer,
    options: &GenerateOptions,
    emit: &mut dyn FnMut(&str) -> Result<()>,
    cached: &mut usize,
) -> Result<Generated> {
    let context = gpt.config().context;
    let mut stops = tokenizer.stops();
    stops.extend(&options.stops);
    let prompt = checked_prompt(gpt, tokenizer, &options.prompt, options.rendered)?;
    let mut sampler = Sampler::new(options.sampling, options.seed)?;
    let _policy = options.precision.autocast();
    let device = gpt.tok_emb.weight.device().clone();
    let mut cache = gpt.kv_cache(1);
    let started = Instant::now();
    let ids = Tensor::from_host(&device, [1, prompt.len()], &prompt)?;
    let mut logits = gpt.forward_cached(&ids, &mut cache)?;
    let prompt_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut tokens = Vec::new();
    let mut pending = Vec::new();
    let stop = loop {
        if tokens.len() >= options.max_tokens {
            break Stop::MaxTokens;
        }
        let row: Vec<f32> = logits.to_f64()?.iter().map(|&x| x as f32).collect();
        let token = sampler.next(&row)?;
        tokens.push(token);
        if stops.contains(&token) {
            break Stop::EndOfText;
        }
        pending.push(token);
        let text = tokenizer.decode(&pending)?;
        if !text.ends_with(char::REPLACEMENT_CHARACTER) {
            emit(&text)?;
            pending.clear();
        }
        if cache.len() >= context {
            break Stop::Context;
        }
        *cached = cache.len();
        let next = Tensor::from_host(&device, [1, 1], &[token])?;
        logits = gpt.forward_cached(&next, &mut cache)?;
    };
    if !pending.is_empty() {
        emit(&tokenizer.decode(&pending)?)?;
    }
    Ok(Generated {
        prompt_tokens: prompt.len(),
        tokens,
        stop,
        cache_bytes: cache.bytes(),
        prompt_seconds,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// `err` as generation's own out-of-memory when it is one: the device's limit, the weights'
/// and the cache's share, and what would make them fit (other errors pass as they are).
pub fn out_of_memory_advice(err: Error, gpt: &Gpt, cached: usize) -> Error {
    let Some(report) = err.oom_report().cloned() else {
        return err;
    };
    let config = gpt.config();
    let dtype = gpt.tok_emb.weight.dtype();
    let per_token = 2 * config.layers * config.kv_heads() * config.head_dim() * dtype.size();
    let mut weights = 0;
    gpt.visit(&mut |_, t| weights += t.shape().numel() * t.dtype().size());
    let bytes = |n: usize| headroom_alloc::format_bytes(n as u64);
    let halves = match dtype {
        DType::F32 => "; bf16 weights take half: train with --param-dtype bf16, or export \
                      --dtype bf16 and generate from the export"
            .to_owned(),
        _ => String::new(),
    };
    let diagnosis = format!(
        "out of memory while generating, under a limit of {}: the weights take {}, and the \
         key/value cache {} a token ({} at the {cached} positions it held). Generate fewer \
         tokens (--max-tokens) or from a shorter prompt, or raise --memory-limit{halves}.",
        bytes(report.limit as usize),
        bytes(weights),
        bytes(per_token),
        bytes(per_token * cached),
    );
    Error::DoesNotFit {
        diagnosis,
        report: Box::new(report),
    }
}
