//! A batch on the device, as a model's loss reads it: its arrays by name. The built-in kinds
//! give two, [`INPUTS`] and [`TARGETS`], and packed conversations a third, [`STARTS`]; a model
//! of one's own reads them by the same names.

use headroom_autograd::Tensor;

use crate::error::{Error, Result};

/// The name of a batch's inputs (token ids `[B, T]`, or features `[B, D]`).
pub const INPUTS: &str = "inputs";

/// The name of a batch's targets (the next token at each position, `[B, T]`, or a class per
/// sample, `[B]`; U32, [`IGNORE`](super::IGNORE) where not scored).
pub const TARGETS: &str = "targets";

/// The name of a packed batch's document starts (`[B, T]` U32): position `i`'s document
/// begins at position `starts[i] <= i` of its window, `starts[i] == i` where one begins.
pub const STARTS: &str = "starts";

/// A batch's arrays on the device, by name, in the order the data gives them.
#[derive(Debug, Clone)]
pub struct DeviceBatch {
    /// Each array with its name; no name twice.
    fields: Vec<(String, Tensor)>,
}

impl DeviceBatch {
    /// A batch of these named arrays; a name given twice is an error.
    pub fn new(fields: Vec<(String, Tensor)>) -> Result<Self> {
        if let Some(name) = repeated(
            &fields
                .iter()
                .map(|(name, _)| name.as_str())
                .collect::<Vec<_>>(),
        ) {
            return Err(Error::config(format!(
                "data: the batch names `{name}` twice"
            )));
        }
        Ok(Self { fields })
    }

    /// The array named `name`; its absence is an error naming those the batch holds.
    pub fn get(&self, name: &str) -> Result<&Tensor> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
            .ok_or_else(|| {
                Error::config(format!(
                    "data: the batch holds no `{name}`, only {}",
                    self.names().collect::<Vec<_>>().join(", ")
                ))
            })
    }

    /// Its [`INPUTS`].
    pub fn inputs(&self) -> Result<&Tensor> {
        self.get(INPUTS)
    }

    /// Its [`TARGETS`].
    pub fn targets(&self) -> Result<&Tensor> {
        self.get(TARGETS)
    }

    /// Its [`STARTS`], where its windows pack several documents.
    pub fn starts(&self) -> Option<&Tensor> {
        self.get(STARTS).ok()
    }

    /// The names of its arrays, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.fields.iter().map(|(n, _)| n.as_str())
    }
}

/// The first of `names` that an earlier one repeats.
pub(super) fn repeated<'a>(names: &[&'a str]) -> Option<&'a str> {
    let at = (0..names.len()).find(|&at| names[..at].contains(&names[at]))?;
    Some(names[at])
}

#[cfg(test)]
mod tests {
    use headroom_kernels::{Device, DeviceConfig};

    use super::*;

    #[test]
    fn arrays_are_found_by_name_and_a_missing_or_repeated_name_is_an_error() {
        let cpu = Device::cpu(DeviceConfig::new(1 << 20)).unwrap();
        let array = |v: u32| Tensor::from_host(&cpu, [1], &[v]).unwrap();
        let batch =
            DeviceBatch::new(vec![(INPUTS.into(), array(1)), ("mask".into(), array(2))]).unwrap();
        assert_eq!(batch.inputs().unwrap().to_f64().unwrap(), [1.0]);
        assert_eq!(batch.get("mask").unwrap().to_f64().unwrap(), [2.0]);
        let missing = batch.targets().unwrap_err().to_string();
        assert!(
            missing.contains("no `targets`, only inputs, mask"),
            "{missing}"
        );
        let twice = vec![("a".into(), array(1)), ("a".into(), array(2))];
        let repeated = DeviceBatch::new(twice).unwrap_err().to_string();
        assert!(repeated.contains("`a` twice"), "{repeated}");
    }
}
