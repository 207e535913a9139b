//! One line of a JSON Lines file of conversations: `{"messages": [...]}`, or a prompt and its
//! completion (strings, the user's turn and the assistant's answer, or TRL's lists of
//! messages), read into the messages a chat template renders.

use serde_json::{Map, Value};

/// The roles a message may have.
pub const ROLES: [&str; 3] = ["system", "user", "assistant"];

/// A conversation: messages with a role among [`ROLES`] and a string content, at least one the
/// assistant's.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// Each message as the template reads it (a JSON object with `role` and `content`, and any
    /// other keys the line gave it).
    pub messages: Vec<Value>,
}

impl Conversation {
    /// The conversation of one line; the error says what is wrong with it.
    pub fn parse(line: &str) -> Result<Self, String> {
        let value: Value = serde_json::from_str(line).map_err(|err| format!("not JSON: {err}"))?;
        let Value::Object(object) = value else {
            return Err("not a JSON object: a line holds {\"messages\": [...]} or \
                        {\"prompt\": ..., \"completion\": ...}"
                .into());
        };
        let messages = match (
            object.get("messages"),
            object.get("prompt"),
            object.get("completion"),
        ) {
            (Some(messages), None, None) => list(messages, "messages")?,
            (None, Some(prompt), Some(completion)) => {
                let mut messages = turns(prompt, "prompt", "user")?;
                messages.extend(turns(completion, "completion", "assistant")?);
                messages
            }
            _ => {
                return Err(format!(
                    "holds {}: a line holds either `messages`, or `prompt` and `completion`",
                    keys(&object)
                ));
            }
        };
        for (at, message) in messages.iter().enumerate() {
            check(message).map_err(|why| format!("message {at}: {why}"))?;
        }
        if !messages.iter().any(|m| m["role"] == "assistant") {
            return Err("no assistant turn: nothing to learn from".into());
        }
        Ok(Self { messages })
    }
}

/// The messages of `value`: a list of message objects.
fn list(value: &Value, what: &str) -> Result<Vec<Value>, String> {
    match value {
        Value::Array(messages) => Ok(messages.clone()),
        other => Err(format!(
            "`{what}` is {}, not a list of messages",
            kind(other)
        )),
    }
}

/// A prompt's or a completion's messages: a string as one message of `role`, or a list.
fn turns(value: &Value, what: &str, role: &str) -> Result<Vec<Value>, String> {
    match value {
        Value::String(text) => Ok(vec![serde_json::json!({"role": role, "content": text})]),
        other => list(other, what).map_err(|why| format!("{why} or a string")),
    }
}

/// Why `message` is not one a template renders: not an object, no known role, no string content.
fn check(message: &Value) -> Result<(), String> {
    let Value::Object(object) = message else {
        return Err(format!("{}, not an object", kind(message)));
    };
    let role = match object.get("role") {
        Some(Value::String(role)) => role,
        Some(other) => return Err(format!("its role is {}, not a string", kind(other))),
        None => return Err(format!("no `role` (it holds {})", keys(object))),
    };
    if !ROLES.contains(&role.as_str()) {
        return Err(format!("the role {role:?} is none of {}", ROLES.join(", ")));
    }
    match object.get("content") {
        Some(Value::String(content)) if super::render::holds_marks(content) => Err(
            "its content holds U+E000 or U+E001, private characters the renderer marks the \
             assistant's text with"
                .into(),
        ),
        Some(Value::String(_)) => Ok(()),
        Some(other) => Err(format!("its content is {}, not a string", kind(other))),
        None => Err(format!("no `content` (it holds {})", keys(object))),
    }
}

/// The keys of `object`, for messages.
fn keys(object: &Map<String, Value>) -> String {
    match object.len() {
        0 => "no keys".into(),
        _ => object
            .keys()
            .map(|k| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// A JSON value's kind, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_give_messages() {
        let chat = Conversation::parse(
            r#"{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}], "id": 3}"#,
        )
        .unwrap();
        assert_eq!(chat.messages.len(), 3);
        let pair = Conversation::parse(r#"{"prompt": "q", "completion": "a"}"#).unwrap();
        assert_eq!(pair.messages[0]["role"], "user");
        assert_eq!(
            pair.messages[1],
            serde_json::json!({"role": "assistant", "content": "a"})
        );
        let trl = Conversation::parse(
            r#"{"prompt": [{"role": "user", "content": "q"}], "completion": [{"role": "assistant", "content": "a"}]}"#,
        )
        .unwrap();
        assert_eq!(trl, pair);
    }

    #[test]
    fn bad_lines_say_why() {
        let why = |line: &str| Conversation::parse(line).unwrap_err();
        assert!(why("{oops").contains("not JSON"));
        assert!(why("[1]").contains("not a JSON object"));
        assert!(why(r#"{"text": "x"}"#).contains("`text`"));
        assert!(
            why(r#"{"messages": [{"role": "user", "content": "u"}]}"#).contains("no assistant")
        );
        assert!(
            why(r#"{"messages": [{"role": "tool", "content": "u"}]}"#)
                .contains("message 0: the role \"tool\"")
        );
        assert!(why(r#"{"messages": [{"role": "user"}]}"#).contains("no `content`"));
        assert!(why(r#"{"prompt": 1, "completion": "a"}"#).contains("`prompt` is a number"));
    }
}
