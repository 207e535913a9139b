//! A world whose ranks are threads of one process, each on its own device: every collective
//! meets in shared memory. It runs multi-rank code without a launcher, in tests above all, as
//! PyTorch's threaded process group does.

use std::sync::{Arc, Barrier};

use headroom_kernels::ops::data::copy_into;
use headroom_kernels::{Array, Device};
use parking_lot::Mutex;

use crate::checks::{Chunks, chunked, reducible, root};
use crate::{Collective, Error, ReduceOp, Result};

/// What the ranks of a [`Threads`] world share: one slot of values per rank, and the barrier
/// they meet at.
struct Meeting {
    slots: Mutex<Vec<Vec<f64>>>,
    barrier: Barrier,
}

/// One rank of a world of threads. Values travel as f64 (exact for every dtype the kernels
/// hold) and reductions add in rank order, so every rank gets the same result.
pub struct Threads {
    meeting: Arc<Meeting>,
    device: Device,
    rank: usize,
    size: usize,
}

impl Threads {
    /// A world of one rank per device of `devices`, rank `r` on `devices[r]`; hand each
    /// rank to its own thread.
    pub fn world(devices: &[Device]) -> Vec<Threads> {
        let meeting = Arc::new(Meeting {
            slots: Mutex::new(vec![Vec::new(); devices.len()]),
            barrier: Barrier::new(devices.len()),
        });
        let ranks = devices.iter().enumerate();
        ranks
            .map(|(rank, device)| Threads {
                meeting: Arc::clone(&meeting),
                device: device.clone(),
                rank,
                size: devices.len(),
            })
            .collect()
    }

    /// Puts `values` in this rank's slot, waits for every rank, reads every slot through
    /// `read`, and waits again so that no slot changes before every rank has read.
    fn meet<T>(&self, values: Vec<f64>, read: impl FnOnce(&[Vec<f64>]) -> T) -> T {
        self.meeting.slots.lock()[self.rank] = values;
        self.meeting.barrier.wait();
        let out = read(&self.meeting.slots.lock());
        self.meeting.barrier.wait();
        out
    }

    /// Fails unless `array` is on this rank's device.
    fn on_device(&self, op: &'static str, array: &Array) -> Result<()> {
        match array.device().same(&self.device) {
            true => Ok(()),
            false => Err(Error::Argument {
                op,
                detail: format!(
                    "an array on {}, where rank {} runs on {}",
                    array.device(),
                    self.rank,
                    self.device
                ),
            }),
        }
    }
}

/// The reduction `op` of the ranks' `slots`, element by element, in rank order.
fn reduced(slots: &[Vec<f64>], op: ReduceOp) -> Vec<f64> {
    let mut out = slots[0].clone();
    for slot in &slots[1..] {
        for (o, &v) in out.iter_mut().zip(slot) {
            *o = match op {
                ReduceOp::Sum | ReduceOp::Avg => *o + v,
                ReduceOp::Max => o.max(v),
                ReduceOp::Min => o.min(v),
            };
        }
    }
    if op == ReduceOp::Avg {
        out.iter_mut().for_each(|o| *o /= slots.len() as f64);
    }
    out
}

/// Writes `values` into `array`, converted to its dtype.
fn write(array: &mut Array, values: &[f64]) -> Result<()> {
    let from = Array::from_f64(array.device(), array.shape().clone(), array.dtype(), values)?;
    Ok(copy_into(&from, array)?)
}

impl Collective for Threads {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.size
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn all_reduce(&mut self, array: &mut Array, op: ReduceOp) -> Result<()> {
        self.on_device("all_reduce", array)?;
        reducible("all_reduce", op, array.dtype())?;
        let values = self.meet(array.to_f64()?, |slots| reduced(slots, op));
        write(array, &values)
    }

    fn reduce_scatter(&mut self, input: &Array, output: &mut Array, op: ReduceOp) -> Result<()> {
        self.on_device("reduce_scatter", input)?;
        chunked(
            "reduce_scatter",
            input,
            output,
            Chunks::Input,
            self.world_size(),
        )?;
        reducible("reduce_scatter", op, input.dtype())?;
        let len = output.numel();
        let values = self.meet(input.to_f64()?, |slots| reduced(slots, op));
        write(output, &values[self.rank * len..(self.rank + 1) * len])
    }

    fn all_gather(&mut self, input: &Array, output: &mut Array) -> Result<()> {
        self.on_device("all_gather", input)?;
        chunked(
            "all_gather",
            input,
            output,
            Chunks::Output,
            self.world_size(),
        )?;
        let values = self.meet(input.to_f64()?, |slots| slots.concat());
        write(output, &values)
    }

    fn broadcast(&mut self, array: &mut Array, from: usize) -> Result<()> {
        root("broadcast", from, self.world_size())?;
        self.on_device("broadcast", array)?;
        let values = self.meet(array.to_f64()?, |slots| slots[from].clone());
        write(array, &values)
    }

    fn barrier(&mut self) -> Result<()> {
        self.meet(Vec::new(), |_| ());
        Ok(())
    }
}
