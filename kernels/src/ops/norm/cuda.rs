//! CUDA kernels: softmax and layer normalization over the last axis (`norm.cu`).

use cudarc::driver::LaunchConfig;

use crate::backend::norm::{NormKernels, RowSpec, SoftmaxKind, SoftmaxSpec, parameter_partials};
use crate::buffer::Buffer;
use crate::cuda::{Arg, BLOCK, CudaBackend, Family, float_kernel};
use crate::dtype::DType;
use crate::error::Result;

/// A shape a row kernel is built in (`norm.cu`, `_GxN_` in its name): `G` threads to a row,
/// each keeping `N` of its elements in registers.
type RowShape = (u32, usize);

/// The shapes a family of row kernels is built in.
struct RowShapes {
    /// Those that hold a row of up to `G * N` elements, in the order they are preferred: the
    /// first that holds a row takes it (the fewest registers, a warp before a block).
    held: [RowShape; 7],
    /// The one for rows longer than every shape holds, read again for each pass: the fewest
    /// registers.
    streaming: RowShape,
}

/// The forward kernels (softmax, layer normalization).
const FORWARD: RowShapes = RowShapes {
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
const BACKWARD: RowShapes = RowShapes {
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

/// Every row kernel the backend may launch, without its dtype (`crate::cuda::norm_row_kernels`).
pub(crate) fn row_kernel_stems() -> Vec<String> {
    let families = [
        (["softmax", "layer_norm"], &FORWARD),
        (["softmax_backward", "layer_norm_dx"], &BACKWARD),
    ];
    let mut stems = Vec::new();
    for (kernels, shapes) in families {
        for kernel in kernels {
            let every = shapes.held.into_iter().chain([shapes.streaming]);
            stems.extend(every.map(|shape| stem(kernel, shape)));
        }
    }
    stems
}

impl CudaBackend {
    /// The name and grid of row kernel `kernel` (`softmax_256x16_f32`) over `spec`'s rows, in
    /// the first of `shapes` that holds a row, else in its streaming shape.
    fn row_kernel(
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

impl NormKernels for CudaBackend {
    fn softmax(
        &self,
        softmax: SoftmaxSpec,
        spec: RowSpec,
        x: &Buffer,
        y: &mut Buffer,
    ) -> Result<()> {
        let op = softmax.kind.name();
        float_kernel("softmax", x.dtype(), op)?;
        if y.is_empty() || spec.len == 0 {
            return Ok(());
        }
        let (name, grid) = self.row_kernel("softmax", x.dtype(), op, spec, &FORWARD)?;
        let args = [
            (softmax.kind == SoftmaxKind::LogSoftmax).into(),
            softmax.scale.into(),
            softmax.causal.into(),
            x.into(),
            y.into(),
            spec.rows.into(),
            spec.len.into(),
        ];
        self.launch(op, Family::Norm, &name, grid, &args)
    }

    fn softmax_backward(
        &self,
        softmax: SoftmaxSpec,
        spec: RowSpec,
        y: &Buffer,
        dy: &Buffer,
        dx: &mut Buffer,
    ) -> Result<()> {
        let op = softmax.kind.backward_name();
        float_kernel("softmax_backward", y.dtype(), op)?;
        if dx.is_empty() || spec.len == 0 {
            return Ok(());
        }
        let (name, grid) = self.row_kernel("softmax_backward", y.dtype(), op, spec, &BACKWARD)?;
        let args = [
            (softmax.kind == SoftmaxKind::LogSoftmax).into(),
            softmax.scale.into(),
            softmax.causal.into(),
            y.into(),
            dy.into(),
            dx.into(),
            spec.rows.into(),
            spec.len.into(),
        ];
        self.launch(op, Family::Norm, &name, grid, &args)
    }

    fn layer_norm(
        &self,
        spec: RowSpec,
        eps: f64,
        x: &Buffer,
        gamma: &Buffer,
        beta: &Buffer,
        y: &mut Buffer,
        mean: &mut Buffer,
        rstd: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "layer_norm";
        float_kernel(OP, x.dtype(), OP)?;
        if spec.rows == 0 {
            return Ok(());
        }
        let (name, grid) = self.row_kernel(OP, x.dtype(), OP, spec, &FORWARD)?;
        let args: [Arg; 9] = [
            eps.into(),
            x.into(),
            gamma.into(),
            beta.into(),
            y.into(),
            mean.into(),
            rstd.into(),
            spec.rows.into(),
            spec.len.into(),
        ];
        self.launch(OP, Family::Norm, &name, grid, &args)
    }

    fn layer_norm_backward(
        &self,
        spec: RowSpec,
        x: &Buffer,
        gamma: &Buffer,
        mean: &Buffer,
        rstd: &Buffer,
        dy: &Buffer,
        dx: &mut Buffer,
        dgamma: &mut Buffer,
        dbeta: &mut Buffer,
    ) -> Result<()> {
        const OP: &str = "layer_norm_backward";
        let dtype = x.dtype();
        float_kernel(OP, dtype, OP)?;
        let RowSpec { rows, len } = spec;
        if len == 0 {
            return Ok(());
        }
        if rows > 0 {
            let (name, grid) = self.row_kernel("layer_norm_dx", dtype, OP, spec, &BACKWARD)?;
            let args: [Arg; 8] = [
                x.into(),
                gamma.into(),
                mean.into(),
                rstd.into(),
                dy.into(),
                dx.into(),
                rows.into(),
                len.into(),
            ];
            self.launch(OP, Family::Norm, &name, grid, &args)?;
        }
        // dgamma and dbeta: per-slice partial sums in f64, then summed in slice order.
        let (slices, partials) = parameter_partials(rows, len);
        let partial = x.memory().alloc_workspace(DType::F64, partials, OP)?;
        let grid = LaunchConfig {
            grid_dim: (len.div_ceil(BLOCK as usize) as u32, slices as u32, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let name = float_kernel("layer_norm_dparams_partial", dtype, OP)?;
        let args: [Arg; 7] = [
            x.into(),
            mean.into(),
            rstd.into(),
            dy.into(),
            (&partial).into(),
            rows.into(),
            len.into(),
        ];
        self.launch(OP, Family::Norm, &name, grid, &args)?;
        let name = float_kernel("layer_norm_dparams_sum", dtype, OP)?;
        let args = [
            (&partial).into(),
            slices.into(),
            dgamma.into(),
            dbeta.into(),
            len.into(),
        ];
        self.launch(OP, Family::Norm, &name, self.grid(len as u64), &args)
    }
}
