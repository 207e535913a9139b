//! A chat template rendered as transformers renders it (Jinja with `trim_blocks` and
//! `lstrip_blocks`, loop controls, Python's string methods, `raise_exception`), its
//! `{% generation %}` blocks turned into marks whose places are returned.

use std::ops::Range;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::Serde;
use minijinja::{Environment, Error as JinjaError, ErrorKind, Value};

use super::template::TemplateSource;

/// Marks where a `{% generation %}` block opens in the rendered text.
const OPEN: char = '\u{E000}';

/// Marks where it closes.
const CLOSE: char = '\u{E001}';

/// The template's name in its environment.
const NAME: &str = "chat";

/// A chat template ready to render.
pub struct Renderer {
    env: Environment<'static>,
    source: TemplateSource,
    /// The template marks the assistant's text with `{% generation %}` blocks.
    tagged: bool,
}

/// A rendered conversation: its text and the byte ranges of its `{% generation %}` blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The text, without marks.
    pub text: String,
    /// Each generation block's bytes in `text`, in order.
    pub generated: Vec<Range<usize>>,
}

/// Why a template did not render: it refused the conversation (`raise_exception`), or failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenderError {
    /// The template raised this message.
    Refused(String),
    /// The template could not be compiled or run.
    Failed(String),
}

impl std::fmt::Display for RenderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RenderError::Refused(message) => write!(f, "the chat template refuses it: {message}"),
            RenderError::Failed(message) => write!(f, "the chat template failed: {message}"),
        }
    }
}

impl Renderer {
    /// Compiles `source`; a template Jinja cannot parse is an error naming its line.
    pub fn new(source: TemplateSource) -> Result<Self, RenderError> {
        let (rewritten, tagged) = mark_generation(&source.source);
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(failed)?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function(
            "raise_exception",
            |message: String| -> Result<Value, JinjaError> {
                Err(JinjaError::new(ErrorKind::InvalidOperation, message))
            },
        );
        env.add_template_owned(NAME, rewritten).map_err(failed)?;
        Ok(Self {
            env,
            source,
            tagged,
        })
    }

    /// True where the template has `{% generation %}` blocks.
    pub fn tagged(&self) -> bool {
        self.tagged
    }

    /// The template and its special tokens.
    pub fn source(&self) -> &TemplateSource {
        &self.source
    }

    /// `messages` (JSON objects with a role and a content) rendered, with the prompt of the
    /// assistant's next turn after them when `add_generation_prompt`.
    pub fn render(
        &self,
        messages: &[serde_json::Value],
        add_generation_prompt: bool,
    ) -> Result<Rendered, RenderError> {
        let messages: Vec<Value> = messages.iter().map(|m| Value::from(Serde(m))).collect();
        let mut context: Vec<(&str, Value)> = vec![
            ("messages", Value::from(messages)),
            ("add_generation_prompt", Value::from(add_generation_prompt)),
        ];
        for (name, text) in &self.source.special {
            context.push((name.as_str(), Value::from(text.as_str())));
        }
        let template = self.env.get_template(NAME).map_err(failed)?;
        let marked =
            template
                .render(Value::from_pairs(context))
                .map_err(|err| match err.kind() {
                    ErrorKind::InvalidOperation => {
                        RenderError::Refused(err.detail().unwrap_or("").to_owned())
                    }
                    _ => failed(err),
                })?;
        Ok(unmark(&marked))
    }
}

/// A template error as text, with the line where the template has one.
fn failed(err: JinjaError) -> RenderError {
    let detail = err.detail().unwrap_or("").to_owned();
    RenderError::Failed(match err.line() {
        Some(line) => format!("{:?} at line {line}: {detail}", err.kind()),
        None => format!("{:?}: {detail}", err.kind()),
    })
}

/// The text without its marks, and the ranges the marks enclosed.
fn unmark(marked: &str) -> Rendered {
    let mut text = String::with_capacity(marked.len());
    let mut generated = Vec::new();
    let mut open = None;
    for c in marked.chars() {
        match c {
            OPEN => open = Some(text.len()),
            CLOSE => {
                if let Some(start) = open.take() {
                    generated.push(start..text.len());
                }
            }
            c => text.push(c),
        }
    }
    Rendered { text, generated }
}

/// True where `text` holds a character the renderer uses as a mark.
pub fn holds_marks(text: &str) -> bool {
    text.contains([OPEN, CLOSE])
}

/// `source` with each `{% generation %}` and `{% endgeneration %}` tag (minijinja knows neither)
/// replaced by an `if` block around a mark, which keeps the tag's whitespace control and its
/// `trim_blocks` and `lstrip_blocks` behaviour; and whether there was any.
fn mark_generation(source: &str) -> (String, bool) {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    let mut tagged = false;
    while let Some(at) = rest.find("{%") {
        out.push_str(&rest[..at]);
        let tag = &rest[at..];
        let Some(end) = tag.find("%}") else {
            out.push_str(tag);
            return (out, tagged);
        };
        let inner = &tag[2..end];
        let (left, body) = match inner.strip_prefix(['-', '+']) {
            Some(body) => (&inner[..1], body),
            None => ("", inner),
        };
        let (body, right) = match body.strip_suffix(['-', '+']) {
            Some(trimmed) => (trimmed, &body[body.len() - 1..]),
            None => (body, ""),
        };
        let mark = match body.trim() {
            "generation" => Some(OPEN),
            "endgeneration" => Some(CLOSE),
            _ => None,
        };
        match mark {
            Some(mark) => {
                tagged = true;
                out.push_str(&format!("{{%{left} if true %}}{mark}{{% endif {right}%}}"));
            }
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    (out, tagged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn renderer(source: &str) -> Renderer {
        Renderer::new(TemplateSource {
            source: source.into(),
            origin: "test.jinja".into(),
            special: vec![("eos_token".into(), "</s>".into())],
        })
        .unwrap()
    }

    fn messages() -> Vec<serde_json::Value> {
        vec![
            serde_json::json!({"role": "user", "content": " hi "}),
            serde_json::json!({"role": "assistant", "content": "hello"}),
        ]
    }

    #[test]
    fn generation_blocks_become_ranges_and_keep_their_whitespace_control() {
        let template = renderer(
            "{% for m in messages %}{{ m.role }}:\n  {%- if m.role == 'assistant' %}\n  \
             {%- generation %} {{ m.content }}{{ eos_token }}{% endgeneration %}\n{% else %} \
             {{ m.content.strip() }}\n{% endif %}{% endfor %}",
        );
        assert!(template.tagged());
        let rendered = template.render(&messages(), false).unwrap();
        // As Jinja2 renders it: trim_blocks drops the line break after the closing tag.
        assert_eq!(rendered.text, "user: hi\nassistant: hello</s>");
        let [span] = rendered.generated.as_slice() else {
            panic!("{rendered:?}")
        };
        assert_eq!(&rendered.text[span.clone()], " hello</s>");
    }

    #[test]
    fn raise_exception_is_a_refusal_and_a_bad_template_a_failure() {
        let template = renderer(
            "{% for m in messages %}{% if m.role == 'user' %}{{ raise_exception('no users') }}\
             {% endif %}{% endfor %}",
        );
        let err = template.render(&messages(), false).unwrap_err();
        assert_eq!(err, RenderError::Refused("no users".into()));
        let broken = Renderer::new(TemplateSource {
            source: "{% for %}".into(),
            origin: "x".into(),
            special: Vec::new(),
        });
        assert!(matches!(broken, Err(RenderError::Failed(_))));
    }

    #[test]
    fn loops_and_generation_prompts_render_as_jinja2_does() {
        let template = renderer(
            "{% for m in messages %}{% if loop.first %}[{% endif %}{{ m.content | trim }}\
             {% if not loop.last %}|{% endif %}{% endfor %}{% if add_generation_prompt %}>\
             {% endif %}",
        );
        assert_eq!(
            template.render(&messages(), true).unwrap().text,
            "[hi|hello>"
        );
        assert!(!template.tagged());
    }
}
