//! Samples gathered for one step, on the host: for each array of the data's shape, the samples'
//! values one after another. A step cuts it into micro-batches and sends each to the device as
//! a [`DeviceBatch`].

use headroom_alloc::Tag;
use headroom_kernels::Device;

use super::device_batch::{DeviceBatch, TARGETS};
use super::shape::DataShape;
use super::values::Values;
use super::{Dataset, IGNORE};
use crate::error::{Error, Result};

/// Samples of one dataset, collated.
#[derive(Debug, Clone, PartialEq)]
pub struct HostBatch {
    /// The dataset index of each sample, in order.
    pub indices: Vec<usize>,
    /// What each sample holds.
    shape: DataShape,
    /// One per field of `shape`: `indices.len()` times the field's elements.
    arrays: Vec<Values>,
}

impl HostBatch {
    /// The samples `indices` of `dataset`, collated; a sample unlike the dataset's shape (other
    /// arrays, dtypes or sizes) is an error naming the sample and the array.
    pub fn collect(dataset: &dyn Dataset, indices: &[usize]) -> Result<Self> {
        let shape = dataset.shape();
        let fields = shape.fields();
        let mut arrays: Vec<Values> = fields.iter().map(|f| Values::empty(f.dtype)).collect();
        for &index in indices {
            let sample = dataset.sample(index)?;
            if sample.arrays().len() != fields.len() {
                return Err(Error::Sample {
                    index,
                    detail: format!(
                        "{} arrays, where the data's samples hold {} ({shape})",
                        sample.arrays().len(),
                        fields.len()
                    ),
                });
            }
            for ((field, values), array) in fields.iter().zip(sample.arrays()).zip(&mut arrays) {
                if values.dtype() != field.dtype || values.len() != field.numel() {
                    return Err(Error::Sample {
                        index,
                        detail: format!(
                            "`{}` holds {} values of {}, where the data's samples hold {}",
                            field.name,
                            values.len(),
                            values.dtype(),
                            field
                        ),
                    });
                }
                array.append(values);
            }
        }
        Ok(Self {
            indices: indices.to_vec(),
            shape,
            arrays,
        })
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    /// True without samples.
    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// What each sample holds.
    pub fn shape(&self) -> &DataShape {
        &self.shape
    }

    /// The values of the array named `name`, every sample's in turn.
    pub fn array(&self, name: &str) -> Option<&Values> {
        let at = self.shape.fields().iter().position(|f| f.name == name)?;
        Some(&self.arrays[at])
    }

    /// The same samples with other values for the array named `name` (as many, of its dtype).
    pub fn with_array(&self, name: &str, values: Values) -> Result<Self> {
        let at = self.shape.fields().iter().position(|f| f.name == name);
        match at {
            Some(at)
                if values.dtype() == self.arrays[at].dtype()
                    && values.len() == self.arrays[at].len() =>
            {
                let mut arrays = self.arrays.clone();
                arrays[at] = values;
                Ok(Self {
                    arrays,
                    ..self.clone()
                })
            }
            _ => Err(Error::config(format!(
                "data: the batch has no `{name}` of {} values of {}",
                values.len(),
                values.dtype()
            ))),
        }
    }

    /// Samples `start..end`, as a batch of their own.
    pub fn slice(&self, start: usize, end: usize) -> Self {
        let arrays = self
            .shape
            .fields()
            .iter()
            .zip(&self.arrays)
            .map(|(field, values)| {
                let n = field.numel();
                values.slice(start * n, end * n)
            })
            .collect();
        Self {
            indices: self.indices[start..end].to_vec(),
            shape: self.shape.clone(),
            arrays,
        }
    }

    /// What a mean loss divides by: the [`TARGETS`] that are scored (not [`IGNORE`]) where the
    /// batch has U32 targets, the samples otherwise.
    pub fn scored(&self) -> usize {
        match self.array(TARGETS).and_then(Values::as_u32) {
            Some(targets) => targets.iter().filter(|&&t| t != IGNORE).count(),
            None => self.len(),
        }
    }

    /// The batch on `device`: each array `[samples, ...its shape]`, by name, tagged as data.
    pub fn to_device(&self, device: &Device) -> Result<DeviceBatch> {
        let _data = device.scoped_tag(Tag::DATA);
        let fields = self.shape.fields().iter().zip(&self.arrays);
        let on_device = fields
            .map(|(field, values)| {
                let dims: Vec<usize> = [&[self.len()][..], &field.dims].concat();
                Ok((field.name.clone(), values.to_tensor(device, &dims)?))
            })
            .collect::<Result<Vec<_>>>()?;
        DeviceBatch::new(on_device)
    }
}
