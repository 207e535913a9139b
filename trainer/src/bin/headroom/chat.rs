//! `headroom prepare --chat`: conversations rendered with the model's chat template into
//! shards that flag the scored tokens, or shown as ids and mask (`--show`); and the prompt of
//! `headroom generate --chat`.

use std::path::{Path, PathBuf};

use clap::Args;
use headroom_trainer::data::chat::{ChatEncoder, Conversation, Renderer, Score, TemplateSource};
use headroom_trainer::data::shards::{find_files, prepare_chat, read_text_file};
use headroom_trainer::data::tokenizer::TextTokenizer;
use headroom_trainer::{Error, Result};

use crate::say;
use crate::text::PrepareArgs;

/// The flags of `headroom prepare` for conversations.
#[derive(Args)]
pub struct ChatArgs {
    /// The inputs are JSON Lines of conversations ({"messages": [{"role": ..., "content":
    /// ...}, ...]} or {"prompt": ..., "completion": ...}), rendered with the model's chat
    /// template (that of --tokenizer's directory or GGUF file), the assistant's tokens scored.
    #[arg(long)]
    pub chat: bool,
    /// A chat template (Jinja) instead of the model's, such as one with {% generation %} blocks.
    #[arg(long, value_name = "FILE.jinja")]
    pub chat_template: Option<PathBuf>,
    /// Which tokens the loss scores: assistant (its turns, each with the token that ends it)
    /// or all.
    #[arg(long, default_value = "assistant", value_parser = parse_score)]
    pub score: Score,
    /// Print the first N conversations of the inputs as JSON lines ({"file", "line", "ids",
    /// "mask", "text"}), and write nothing.
    #[arg(long, value_name = "N")]
    pub show: Option<usize>,
}

/// `--score`.
fn parse_score(text: &str) -> std::result::Result<Score, String> {
    match text {
        "assistant" => Ok(Score::Assistant),
        "all" => Ok(Score::All),
        other => Err(format!("{other} is neither assistant nor all")),
    }
}

/// The chat template of `model` (a tokenizer directory or file, a model directory or a GGUF
/// file), or the file `template` with `model`'s special tokens.
pub fn template_source(model: &Path, template: Option<&Path>) -> Result<TemplateSource> {
    match template {
        Some(file) => TemplateSource::from_file(file, Some(model)),
        None => TemplateSource::find(model),
    }
}

/// Runs `headroom prepare --chat` (or `--show`).
pub fn prepare_chat_shards(args: &PrepareArgs, tokenizer: &TextTokenizer) -> Result<()> {
    let source = template_source(&args.tokenizer, args.chat.chat_template.as_deref())?;
    let encoder = ChatEncoder::new(source, tokenizer, args.chat.score)?;
    let mut filter = args.filter.filter();
    if filter.extensions.is_empty() {
        filter.extensions.push("jsonl".into());
    }
    if let Some(count) = args.chat.show {
        return show(&encoder, &args.inputs, &filter, count);
    }
    let Some(out) = &args.out else {
        return Err(Error::config("prepare: give --out"));
    };
    let mut options = args.options(out);
    options.filter = filter;
    let started = std::time::Instant::now();
    let prepared = prepare_chat(&encoder, &options)?;
    let (train, held_out) = prepared.manifest.scored_tokens();
    let conversations = |side: &[headroom_trainer::data::shards::ShardEntry]| -> usize {
        side.iter().map(|s| s.documents).sum()
    };
    say(format_args!(
        "{} training conversations ({train} scored tokens), {} held out ({held_out} scored \
         tokens), rendered with {}",
        conversations(&prepared.manifest.train),
        conversations(&prepared.manifest.held_out),
        encoder.renderer().source().origin.display()
    ))?;
    crate::text::report(&prepared, out, started)
}

/// Prints the first `count` conversations of `inputs` as JSON lines: ids, mask and text.
fn show(
    encoder: &ChatEncoder,
    inputs: &[PathBuf],
    filter: &headroom_trainer::data::shards::FileFilter,
    count: usize,
) -> Result<()> {
    let mut shown = 0;
    for path in find_files(inputs, filter)? {
        let text = read_text_file(&path).map_err(|detail| Error::Data {
            path: path.clone(),
            detail,
        })?;
        for (at, line) in text.lines().enumerate() {
            if shown >= count {
                return Ok(());
            }
            if line.trim().is_empty() {
                continue;
            }
            let encoded = Conversation::parse(line)
                .and_then(|conversation| encoder.encode(&conversation))
                .map_err(|detail| Error::Line {
                    path: path.clone(),
                    line: at + 1,
                    detail,
                })?;
            let mask: Vec<u8> = encoded.scored.iter().map(|&s| u8::from(s)).collect();
            let json = serde_json::json!({
                "file": path.display().to_string(),
                "line": at + 1,
                "ids": encoded.ids,
                "mask": mask,
                "text": encoded.text,
            });
            println!("{json}");
            shown += 1;
        }
    }
    Ok(())
}

/// The prompt of `generate --chat`: the user's `message` (after the `system` one, if given)
/// rendered with the chat template of the first of `sources` that has one (or `template`),
/// with the assistant's turn opened; and the template's end-of-sequence token.
pub fn chat_prompt(
    sources: &[PathBuf],
    template: Option<&Path>,
    system: Option<&str>,
    message: &str,
) -> Result<(String, Option<String>)> {
    let mut found = Err(Error::config(
        "generate --chat: the model has no chat template (give --chat-template)",
    ));
    for source in sources {
        found = template_source(source, template);
        if found.is_ok() {
            break;
        }
    }
    let source = found?;
    let eos = source.special("eos_token").map(str::to_owned);
    let origin = source.origin.clone();
    let renderer = Renderer::new(source).map_err(|err| Error::Data {
        path: origin.clone(),
        detail: err.to_string(),
    })?;
    let mut messages = Vec::new();
    if let Some(system) = system {
        messages.push(serde_json::json!({"role": "system", "content": system}));
    }
    messages.push(serde_json::json!({"role": "user", "content": message}));
    let rendered = renderer
        .render(&messages, true)
        .map_err(|err| Error::Data {
            path: origin,
            detail: err.to_string(),
        })?;
    Ok((rendered.text, eos))
}
