//! The sum of an array's squared elements, read in place in host memory: how a host thread
//! checks a gradient it received (finite, and its share of the global norm) without allocating
//! in the tier it shares with the thread that queues the device's work.

use rayon::prelude::*;

use crate::array::Array;
use crate::cpu::with_float;
use crate::dtype::{Compute, Float};
use crate::error::Result;
use crate::memory::DeviceKind;

/// Elements summed by one task.
const CHUNK: usize = 1 << 16;

impl Array {
    /// The sum of the squared elements, in f64, read in place in host memory (a CPU device's
    /// array or a host tier's) once queued copies into it have run; nothing is allocated. A
    /// NaN or an infinity among the elements makes it non-finite. A meta array's is 0 (it has
    /// no values); a GPU's is refused, its elements being on the device.
    ///
    /// ```
    /// use headroom_kernels::{Array, Device, DeviceConfig, DType};
    /// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
    /// let a = Array::from_f64(&cpu, [3], DType::BF16, &[1., -2., 3.])?;
    /// assert_eq!(a.host_square_sum()?, 14.0);
    /// let b = Array::from_f64(&cpu, [2], DType::F32, &[1., f64::NAN])?;
    /// assert!(b.host_square_sum()?.is_nan());
    /// # Ok::<(), headroom_kernels::Error>(())
    /// ```
    pub fn host_square_sum(&self) -> Result<f64> {
        const OP: &str = "host_square_sum";
        if self.device().kind() == DeviceKind::Meta {
            return Ok(0.0);
        }
        with_float!(self.dtype(), OP, |T| {
            let elements = self.buffer().host::<T>(OP)?;
            Ok(square_sum::<T>(elements))
        })
    }
}

/// The sum of the squares of `elements`, in f64, in chunks summed in parallel.
fn square_sum<T: Float>(elements: &[T]) -> f64 {
    elements
        .par_chunks(CHUNK)
        .map(|chunk| {
            chunk
                .iter()
                .map(|v| {
                    let v = v.load().f64();
                    v * v
                })
                .sum::<f64>()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use crate::{Array, DType, Device, DeviceConfig};

    #[test]
    fn sums_squares_in_place_on_the_host_and_nothing_on_a_plan() {
        let cpu = Device::cpu(DeviceConfig::new(1 << 22)).unwrap();
        let values: Vec<f64> = (0..200_000).map(|i| (i % 7) as f64 - 3.0).collect();
        let a = Array::from_f64(&cpu, [values.len()], DType::F32, &values).unwrap();
        let before = cpu.allocator().stats();
        let expected: f64 = values.iter().map(|v| v * v).sum();
        assert_eq!(a.host_square_sum().unwrap(), expected);
        let after = cpu.allocator().stats();
        assert_eq!(after.allocations, before.allocations, "nothing allocated");
        let infinite = Array::from_f64(&cpu, [2], DType::F16, &[1e5, 1.0]).unwrap();
        assert!(
            infinite.host_square_sum().unwrap().is_infinite(),
            "1e5 is an infinity in f16"
        );
        let planned = Device::meta(DeviceConfig::new(1 << 20)).unwrap();
        let m = Array::zeros(&planned, [4], DType::F32).unwrap();
        assert_eq!(m.host_square_sum().unwrap(), 0.0);
        let ids = Array::from_host(&cpu, [2], &[1u32, 2]).unwrap();
        assert!(ids.host_square_sum().is_err(), "ids are not floats");
    }
}
