//! How the row kernels of `softmax.cu` and `norm.cu` are launched: each is built in several
//! shapes (`_GxN_` in its name: `G` threads to a row, each keeping `N` of its elements in
//! registers), as those files' `*_SHAPES` macros list them, and a launch takes the first shape
//! that holds its rows.

use cudarc::driver::LaunchConfig;

use super::spec::RowSpec;
use crate::cuda::{CudaBackend, float_kernel};
use crate::dtype::DType;
use crate::error::Result;

/// A shape a row kernel is built in (`_GxN_` in its name): `G` threads to a row, each keeping
/// `N` of its elements in registers.
type RowShape = (u32, usize);

/// The shapes a family of row kernels is built in.
pub(crate) struct RowShapes {
    /// Those that hold a row of up to `G * N` elements, in the order they are preferred: the
    /// first that holds a row takes it (the fewest registers, a warp before a block).
    held: [RowShape; 7],
    /// The one for rows longer than every shape holds, read again for each pass: the fewest
    /// registers.
    streaming: RowShape,
}

/// The forward kernels (softmax, layer normalization).
pub(crate) const FORWARD: RowShapes = RowShapes {
    held: [
        (32, 8),
        (32, 16),
        (32, 32),
        (256, 8),
        (256, 16),
        (512, 16),
        (512, 32),
    ],
    streaming: (512, 8),
};

/// The backward kernels, which keep `N` elements of each of two rows.
pub(crate) const BACKWARD: RowShapes = RowShapes {
    held: [
        (32, 4),
        (32, 8),
        (32, 16),
        (256, 4),
        (256, 8),
        (256, 16),
        (512, 16),
    ],
    streaming: (512, 4),
};

/// The name of row kernel `kernel` in `shape`, without its dtype: `softmax_256x16`.
fn stem(kernel: &str, (group, cache): RowShape) -> String {
    format!("{kernel}_{group}x{cache}")
}

/// A forward row kernel and its backward one, as their family's `.cu` file names them.
pub(crate) struct RowKernels {
    /// The forward kernel, built in the [`FORWARD`] shapes.
    pub(crate) forward: &'static str,
    /// The backward kernel, built in the [`BACKWARD`] shapes.
    pub(crate) backward: &'static str,
}

impl RowKernels {
    /// Every kernel of the two the backend may launch, in every shape, without its dtype
    /// suffix (`softmax_256x16`).
    pub(crate) fn stems(&self) -> Vec<String> {
        let both = [(self.forward, &FORWARD), (self.backward, &BACKWARD)];
        let mut stems = Vec::new();
        for (kernel, shapes) in both {
            let every = shapes.held.into_iter().chain([shapes.streaming]);
            stems.extend(every.map(|shape| stem(kernel, shape)));
        }
        stems
    }
}

impl CudaBackend {
    /// The name and grid of row kernel `kernel` (`softmax_256x16_f32`) over `spec`'s rows, in
    /// the first of `shapes` that holds a row, else in its streaming shape.
    pub(crate) fn row_kernel(
        &self,
        kernel: &str,
        dtype: DType,
        op: &'static str,
        spec: RowSpec,
        shapes: &RowShapes,
    ) -> Result<(String, LaunchConfig)> {
        let shape = shapes
            .held
            .into_iter()
            .find(|&(group, cache)| group as usize * cache >= spec.len)
            .unwrap_or(shapes.streaming);
        let name = float_kernel(&stem(kernel, shape), dtype, op)?;
        Ok((name, self.group_grid(spec.rows, shape.0)))
    }
}
