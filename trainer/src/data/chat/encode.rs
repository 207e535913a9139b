//! Conversations to token ids and their flags: each rendered with the chat template, tokenized
//! as transformers tokenizes a rendered chat (no special tokens added), and its scored tokens
//! marked: the assistant's turns, or every token.

use std::path::Path;

use rayon::prelude::*;

use super::jsonl::Conversation;
use super::mask::{assistant_spans, overlapping};
use super::render::Renderer;
use super::template::TemplateSource;
use crate::data::shards::{ChatManifest, SCORED, STARTS_CONVERSATION};
use crate::data::tokenizer::{END_OF_TURN_TOKENS, TextTokenizer, fnv1a, hash_hex};
use crate::error::{Error, Result};

/// Which tokens of a conversation the loss scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Score {
    /// The assistant's turns, each with the token that ends it.
    #[default]
    Assistant,
    /// Every token but a conversation's first.
    All,
}

impl Score {
    /// Its name, as flags and manifests write it.
    pub fn name(self) -> &'static str {
        match self {
            Score::Assistant => "assistant",
            Score::All => "all",
        }
    }
}

/// One conversation's tokens, and which the loss scores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedChat {
    /// The rendered text.
    pub text: String,
    /// Its token ids.
    pub ids: Vec<u32>,
    /// For each token, whether it is scored.
    pub scored: Vec<bool>,
}

/// The conversations of one file (or part of one): their tokens one after another, a flags
/// byte per token.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EncodedFile {
    /// Every conversation's ids, in order.
    pub tokens: Vec<u32>,
    /// A byte per token: [`SCORED`], and [`STARTS_CONVERSATION`] at each conversation's first.
    pub flags: Vec<u8>,
    /// Conversations.
    pub conversations: usize,
}

/// A chat template and a tokenizer, rendering conversations into scored tokens.
pub struct ChatEncoder<'a> {
    renderer: Renderer,
    tokenizer: &'a TextTokenizer,
    score: Score,
    /// The texts that end an assistant's turn (the template's end of sequence and the known
    /// ends of turn the tokenizer has).
    ends: Vec<String>,
}

impl<'a> ChatEncoder<'a> {
    /// An encoder of `source`'s template with `tokenizer`, scoring as `score` says.
    pub fn new(source: TemplateSource, tokenizer: &'a TextTokenizer, score: Score) -> Result<Self> {
        let origin = source.origin.clone();
        let mut ends: Vec<String> = END_OF_TURN_TOKENS
            .iter()
            .filter(|t| tokenizer.token_to_id(t).is_some())
            .map(|t| (*t).to_owned())
            .collect();
        ends.extend(source.special("eos_token").map(str::to_owned));
        let renderer = Renderer::new(source).map_err(|err| Error::Data {
            path: origin,
            detail: err.to_string(),
        })?;
        Ok(Self {
            renderer,
            tokenizer,
            score,
            ends,
        })
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &'a TextTokenizer {
        self.tokenizer
    }

    /// What a manifest records of the rendering: the template and what is scored.
    pub fn manifest(&self) -> ChatManifest {
        let source = self.renderer.source();
        ChatManifest {
            template: source.origin.clone(),
            template_hash: hash_hex(fnv1a(source.source.as_bytes())),
            scored: self.score.name().into(),
        }
    }

    /// The template's renderer.
    pub fn renderer(&self) -> &Renderer {
        &self.renderer
    }

    /// What the encoder scores.
    pub fn score(&self) -> Score {
        self.score
    }

    /// One conversation rendered, tokenized and masked; the error says why it cannot be.
    pub fn encode(&self, conversation: &Conversation) -> std::result::Result<EncodedChat, String> {
        let messages = &conversation.messages;
        let whole = self
            .renderer
            .render(messages, false)
            .map_err(|err| err.to_string())?;
        let (ids, offsets) = self
            .tokenizer
            .encode_with_offsets(&whole.text)
            .map_err(|err| err.to_string())?;
        let scored = match self.score {
            Score::All => (0..ids.len()).map(|at| at > 0).collect(),
            Score::Assistant => {
                let spans = match self.renderer.tagged() {
                    true => whole.generated.clone(),
                    false => assistant_spans(&self.renderer, messages, &whole, &self.ends)?,
                };
                overlapping(&offsets, &spans)
            }
        };
        if !scored.iter().any(|&s| s) {
            return Err("the template renders no assistant token to score".into());
        }
        Ok(EncodedChat {
            text: whole.text,
            ids,
            scored,
        })
    }

    /// The conversations of `text`, one per line (blank lines skipped), read from `path` where
    /// its first line is line `first_line`; a bad line is an error naming the file and line.
    pub fn encode_lines(&self, text: &str, path: &Path, first_line: usize) -> Result<EncodedFile> {
        let lines: Vec<(usize, &str)> = text
            .split('\n')
            .enumerate()
            .map(|(at, line)| (first_line + at, line.trim_end_matches('\r')))
            .filter(|(_, line)| !line.trim().is_empty())
            .collect();
        let encoded: Vec<std::result::Result<EncodedChat, (usize, String)>> = lines
            .par_iter()
            .map(|&(number, line)| {
                Conversation::parse(line)
                    .and_then(|conversation| self.encode(&conversation))
                    .map_err(|detail| (number, detail))
            })
            .collect();
        let mut file = EncodedFile::default();
        for chat in encoded {
            let chat = chat.map_err(|(line, detail)| Error::Line {
                path: path.to_owned(),
                line,
                detail,
            })?;
            file.conversations += 1;
            file.tokens.extend(&chat.ids);
            file.flags
                .extend(chat.scored.iter().enumerate().map(|(at, &scored)| {
                    let start = if at == 0 { STARTS_CONVERSATION } else { 0 };
                    start | if scored { SCORED } else { 0 }
                }));
        }
        Ok(file)
    }
}
