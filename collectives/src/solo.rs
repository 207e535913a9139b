//! A world of one process: every collective is a copy or nothing.

use headroom_kernels::ops::data::copy_into;
use headroom_kernels::{Array, Device};

use crate::checks::{Chunks, chunked, reducible, root};
use crate::{Collective, Error, ReduceOp, Result};

/// The only rank of a world of one, on `device`: a reduction over one rank is its own array,
/// so the collectives check their arguments as a larger world's would and copy where the
/// output is another array.
pub struct Solo {
    device: Device,
}

impl Solo {
    /// The world of one process on `device`.
    pub fn new(device: &Device) -> Self {
        Self {
            device: device.clone(),
        }
    }

    /// Fails unless `array` is on this rank's device.
    fn on_device(&self, op: &'static str, array: &Array) -> Result<()> {
        if array.device().same(&self.device) {
            Ok(())
        } else {
            Err(Error::Argument {
                op,
                detail: format!(
                    "an array on {}, where this rank runs on {}",
                    array.device(),
                    self.device
                ),
            })
        }
    }

    /// Copies `from` into `to`, which holds as many elements.
    fn copy(&self, op: &'static str, from: &Array, to: &mut Array) -> Result<()> {
        self.on_device(op, from)?;
        let from = from.reshape(to.shape().clone())?;
        Ok(copy_into(&from, to)?)
    }
}

impl Collective for Solo {
    fn rank(&self) -> usize {
        0
    }

    fn world_size(&self) -> usize {
        1
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn all_reduce(&mut self, array: &mut Array, op: ReduceOp) -> Result<()> {
        self.on_device("all_reduce", array)?;
        reducible("all_reduce", op, array.dtype())?;
        array.buffer_mut("all_reduce")?;
        Ok(())
    }

    fn reduce_scatter(&mut self, input: &Array, output: &mut Array, op: ReduceOp) -> Result<()> {
        chunked("reduce_scatter", input, output, Chunks::Input, 1)?;
        reducible("reduce_scatter", op, input.dtype())?;
        self.copy("reduce_scatter", input, output)
    }

    fn all_gather(&mut self, input: &Array, output: &mut Array) -> Result<()> {
        chunked("all_gather", input, output, Chunks::Output, 1)?;
        self.copy("all_gather", input, output)
    }

    fn broadcast(&mut self, array: &mut Array, from: usize) -> Result<()> {
        root("broadcast", from, 1)?;
        self.on_device("broadcast", array)?;
        array.buffer_mut("broadcast")?;
        Ok(())
    }

    fn barrier(&mut self) -> Result<()> {
        Ok(())
    }
}
