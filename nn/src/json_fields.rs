//! Reading the fields of a Hugging Face `config.json`, each error naming the file and the
//! field, and writing one: what every family's configuration reads with.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Error, Result};

/// The file name of a model directory's configuration.
pub const CONFIG_FILE: &str = "config.json";

/// Reads `path` as a JSON object: a missing or unreadable file is [`Error::Io`], one that is
/// not a JSON object [`Error::Checkpoint`].
pub(crate) fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })?;
    let value: Value = serde_json::from_slice(&text).map_err(|err| Error::Checkpoint {
        path: path.to_owned(),
        key: "(file)".into(),
        detail: format!("not JSON: {err}"),
    })?;
    match value.is_object() {
        true => Ok(value),
        false => Err(Error::Checkpoint {
            path: path.to_owned(),
            key: "(file)".into(),
            detail: "not a JSON object".into(),
        }),
    }
}

/// Writes `value` to `path` as pretty JSON with a final newline, atomically.
pub(crate) fn write_json(path: &Path, value: &Value) -> Result<()> {
    let mut text = serde_json::to_vec_pretty(value).map_err(|err| Error::Checkpoint {
        path: path.to_owned(),
        key: "(file)".into(),
        detail: err.to_string(),
    })?;
    text.push(b'\n');
    crate::checkpoint::write_atomically(path, &text)
}

/// Reads the fields of one `config.json`, each error naming the file and the field.
pub(crate) struct Fields<'a> {
    pub path: &'a Path,
    pub map: &'a Map<String, Value>,
}

impl Fields<'_> {
    pub(crate) fn error(&self, field: &str, detail: impl Into<String>) -> Error {
        Error::Checkpoint {
            path: self.path.to_owned(),
            key: field.to_owned(),
            detail: detail.into(),
        }
    }

    /// The field's value; none when it is absent or null.
    pub(crate) fn get(&self, field: &str) -> Option<&Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    pub(crate) fn count(&self, field: &str) -> Result<Option<u64>> {
        self.get(field)
            .map(|v| {
                v.as_u64()
                    .ok_or_else(|| self.error(field, format!("{v} is not a whole number")))
            })
            .transpose()
    }

    pub(crate) fn size(&self, field: &str) -> Result<usize> {
        let value = self
            .count(field)?
            .ok_or_else(|| self.error(field, "missing"))?;
        usize::try_from(value).map_err(|_| self.error(field, format!("{value} is too large")))
    }

    pub(crate) fn number(&self, field: &str, default: f64) -> Result<f64> {
        match self.get(field) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .ok_or_else(|| self.error(field, format!("{v} is not a number"))),
        }
    }

    pub(crate) fn flag(&self, field: &str, default: bool) -> Result<bool> {
        match self.get(field) {
            None => Ok(default),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| self.error(field, format!("{v} is not true or false"))),
        }
    }

    /// Errors unless the flag is `want` (or absent, when `want` is transformers' default).
    pub(crate) fn require_flag(&self, field: &str, want: bool, why: &str) -> Result<()> {
        if self.flag(field, want)? != want {
            return Err(self.error(field, format!("{} is not supported: {why}", !want)));
        }
        Ok(())
    }

    /// The dtype the weights were saved in: `torch_dtype`, or transformers 5's `dtype`.
    pub(crate) fn torch_dtype(&self) -> Option<String> {
        ["torch_dtype", "dtype"]
            .iter()
            .find_map(|f| self.get(f).and_then(Value::as_str).map(str::to_owned))
    }

    /// A token id field that holds one id or a list of them.
    pub(crate) fn token_ids(&self, field: &str) -> Result<Vec<u64>> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(ids)) => ids
                .iter()
                .map(|id| {
                    id.as_u64()
                        .ok_or_else(|| self.error(field, format!("{id} is not a token id")))
                })
                .collect(),
            Some(_) => Ok(self.count(field)?.into_iter().collect()),
        }
    }
}

/// Token ids as `config.json` writes `eos_token_id`: null for none, a number for one, a list
/// for several; what [`Fields::token_ids`] reads back.
pub(crate) fn token_ids_value(ids: &[u64]) -> Value {
    match ids {
        [] => Value::Null,
        [one] => Value::from(*one),
        many => Value::from(many.to_vec()),
    }
}
