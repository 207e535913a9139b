//! Floats in JSON that survive being read back: JSON has no NaN or infinity, and serde_json
//! writes them as `null`, which then fails to read as a number. Non-finite values are written
//! as the strings `"NaN"`, `"inf"` and `"-inf"` (what Python's `float()` parses), and read back
//! from those strings, from numbers, and from `null` (as NaN, for files written before).
//!
//! Use with `#[serde(with = "crate::run_dir::float_json")]` on an `f64`, or
//! `#[serde(with = "crate::run_dir::float_json::option")]` on an `Option<f64>`.

use serde::{Deserialize, Deserializer, Serializer};

/// Writes `value`: a number, or one of the strings for a non-finite one.
pub fn serialize<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    if value.is_finite() {
        serializer.serialize_f64(*value)
    } else if value.is_nan() {
        serializer.serialize_str("NaN")
    } else if *value > 0.0 {
        serializer.serialize_str("inf")
    } else {
        serializer.serialize_str("-inf")
    }
}

/// Reads a number, one of the strings, or `null` (NaN).
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    Option::<Float>::deserialize(deserializer)?.map_or(Ok(f64::NAN), Float::value::<D::Error>)
}

/// The same for an `Option<f64>`: `None` is `null`, and `null` reads back as `None`.
pub mod option {
    use super::Float;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes `None` as `null`, a value as [`super::serialize`] does.
    pub fn serialize<S: Serializer>(value: &Option<f64>, serializer: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(value) => super::serialize(value, serializer),
            None => serializer.serialize_none(),
        }
    }

    /// Reads `null` as `None`, anything else as [`super::deserialize`] does.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<f64>, D::Error> {
        Option::<Float>::deserialize(deserializer)?
            .map(Float::value::<D::Error>)
            .transpose()
    }
}

/// A float as JSON may hold it.
#[derive(Deserialize)]
#[serde(untagged)]
enum Float {
    Number(f64),
    Text(String),
}

impl Float {
    fn value<E: serde::de::Error>(self) -> Result<f64, E> {
        match self {
            Float::Number(value) => Ok(value),
            Float::Text(text) => match text.as_str() {
                "NaN" => Ok(f64::NAN),
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                _ => Err(E::custom(format!(
                    "`{text}` is not a number, \"NaN\", \"inf\" or \"-inf\""
                ))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Serialize, Deserialize)]
    struct Record {
        #[serde(with = "super")]
        loss: f64,
        #[serde(with = "super::option")]
        metric: Option<f64>,
    }

    #[test]
    fn non_finite_values_round_trip_through_json() {
        for (loss, metric) in [
            (f64::NAN, Some(f64::INFINITY)),
            (f64::INFINITY, None),
            (f64::NEG_INFINITY, Some(0.25)),
            (1.5, Some(f64::NAN)),
        ] {
            let text = serde_json::to_string(&Record { loss, metric }).unwrap();
            let back: Record = serde_json::from_str(&text).unwrap();
            assert_eq!(back.loss.to_bits(), loss.to_bits(), "{text}");
            assert_eq!(
                back.metric.map(f64::to_bits),
                metric.map(f64::to_bits),
                "{text}"
            );
        }
        let old: Record = serde_json::from_str(r#"{"loss":null,"metric":null}"#).unwrap();
        assert!(old.loss.is_nan() && old.metric.is_none());
        assert!(serde_json::from_str::<Record>(r#"{"loss":"x","metric":null}"#).is_err());
        assert!(serde_json::from_str::<Record>(r#"{"loss":1,"metric":"many"}"#).is_err());
    }
}
