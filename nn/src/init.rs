//! Seeded parameter initialization: the same seed gives the same weights, bit for bit.

use headroom_alloc::Tag;
use headroom_autograd::Tensor;
use headroom_kernels::ops::quant::{QuantFormat, Quantized};
use headroom_kernels::ops::random::uniform;
use headroom_kernels::{Array, DType, Device, DeviceKind, Shape};

use crate::error::Result;
use crate::layers::linear_weight::Weight;
use crate::module::Module;
use crate::sharded_params::Cut;

/// How a parameter's values are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// Every value the same.
    Constant(f64),
    /// Normal with mean 0 and this standard deviation (GPT-2 uses 0.02).
    Normal(f64),
    /// Uniform in `[-bound, bound]`; PyTorch's default for Linear layers is
    /// `1 / sqrt(fan_in)` (Kaiming-uniform with `a = sqrt(5)`), weights and biases alike.
    Uniform(f64),
}

/// Makes the parameters of a model on one device and dtype, each from its own stream of a
/// seeded counter-based generator, tagged as weights.
///
/// ```
/// use headroom_nn::{Init, Initializer};
/// use headroom_kernels::{Device, DeviceConfig, DType};
/// let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
/// let mut a = Initializer::new(&cpu, DType::F32, 42);
/// let mut b = Initializer::new(&cpu, DType::F32, 42);
/// let x = a.param([4, 4], Init::Normal(0.02))?;
/// assert_eq!(x.to_f64()?, b.param([4, 4], Init::Normal(0.02))?.to_f64()?);
/// # Ok::<(), headroom_nn::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Initializer {
    device: Device,
    dtype: DType,
    seed: u64,
    streams: u64,
    /// How linear layers' weights are stored: quantized (frozen), or `None` for tensors.
    quantize: Option<QuantFormat>,
    /// Where a model's parts are cut to one rank's chunks as soon as they are drawn (a model
    /// sharded over ranks that never holds its whole weights), the shapes cut so far.
    cut: Option<Cut>,
}

impl Initializer {
    /// Parameters of `dtype` on `device`, drawn from `seed`.
    pub fn new(device: &Device, dtype: DType, seed: u64) -> Self {
        Self {
            device: device.clone(),
            dtype,
            seed,
            streams: 0,
            quantize: None,
            cut: None,
        }
    }

    /// Cuts each part of a model drawn from now on ([`Initializer::drawn`]) as `cut` says, or
    /// stops cutting; returns the cut so far.
    pub fn set_cut(&mut self, cut: Option<Cut>) -> Option<Cut> {
        std::mem::replace(&mut self.cut, cut)
    }

    /// `part` of a model, named `name` in it, just drawn: cut to the rank's chunks where
    /// parts are cut as they are drawn ([`Initializer::set_cut`]), left as it is otherwise.
    pub fn drawn(&mut self, name: &str, part: &mut dyn Module) -> Result<()> {
        match &mut self.cut {
            Some(cut) => cut.take(name, part),
            None => Ok(()),
        }
    }

    /// Stores the layers' weights that follow (linear layers', embeddings') quantized, drawn as they would be and
    /// quantized on the host, one at a time, so that they never exist whole on the device
    /// (`None`: as tensors).
    pub fn set_quantize(&mut self, format: Option<QuantFormat>) {
        self.quantize = format;
    }

    /// How the layers' weights that follow are stored.
    pub fn quantize(&self) -> Option<QuantFormat> {
        self.quantize
    }

    /// A layer's weight of `shape` (a linear layer's, an embedding's), drawn by `init`: a
    /// parameter, or frozen codes stored quantized after [`set_quantize`](Self::set_quantize).
    pub fn weight(&mut self, shape: impl Into<Shape>, init: Init) -> Result<Weight> {
        let Some(format) = self.quantize else {
            return Ok(Weight::Dense(self.param(shape, init)?));
        };
        let shape = shape.into();
        let seed = self.next_seed();
        let _weights = self.device.scoped_tag(Tag::WEIGHTS);
        let values: Vec<f32> = match self.device.kind() {
            DeviceKind::Meta => Vec::new(),
            _ => draw(seed, shape.numel(), init)
                .into_iter()
                .map(|v| v as f32)
                .collect(),
        };
        let stored = Quantized::quantize(&self.device, shape, &values, format, self.dtype)?;
        Ok(Weight::Quantized(Box::new(stored)))
    }

    /// The device parameters go to.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Draws the parameters that follow on `device` (a model's blocks on its host tier), from
    /// the streams that follow: the same values as on any other device.
    pub fn set_device(&mut self, device: &Device) {
        self.device = device.clone();
    }

    /// The dtype of the parameters.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Draws the parameters that follow in `dtype` (f32 adapters over a bf16 model), from the
    /// streams that follow.
    pub fn set_dtype(&mut self, dtype: DType) {
        self.dtype = dtype;
    }

    /// A new seed, for a generator of one's own (dropout masks, say).
    pub fn next_seed(&mut self) -> u64 {
        let stream = self.streams;
        self.streams += 1;
        // A hash of (seed, stream) drawn from the top of the index space, which parameters'
        // own draws (counted from 0) never reach: neighbouring streams are unrelated.
        uniform(self.seed, u64::MAX - stream).to_bits()
    }

    /// A new parameter (a variable tagged as weights) of `shape`, drawn by `init`.
    pub fn param(&mut self, shape: impl Into<Shape>, init: Init) -> Result<Tensor> {
        let shape = shape.into();
        let seed = self.next_seed();
        let _weights = self.device.scoped_tag(Tag::WEIGHTS);
        if self.device.kind() == DeviceKind::Meta {
            // A planning device holds no values: the allocation is all that counts.
            return Ok(Tensor::variable(Array::zeros(
                &self.device,
                shape,
                self.dtype,
            )?));
        }
        let values = draw(seed, shape.numel(), init);
        let array = Array::from_f64(&self.device, shape, self.dtype, &values)?;
        Ok(Tensor::variable(array))
    }
}

/// `n` values of stream `seed` drawn by `init`.
fn draw(seed: u64, n: usize, init: Init) -> Vec<f64> {
    let n = n as u64;
    match init {
        Init::Constant(c) => vec![c; n as usize],
        Init::Uniform(bound) => (0..n)
            .map(|i| bound * (2.0 * uniform(seed, i) - 1.0))
            .collect(),
        Init::Normal(std) => (0..n).map(|i| std * standard_normal(seed, i)).collect(),
    }
}

/// The `i`-th standard normal draw of stream `seed` (Box-Muller on two uniforms).
fn standard_normal(seed: u64, i: u64) -> f64 {
    let u1 = uniform(seed, 2 * i).max(f64::MIN_POSITIVE);
    let u2 = uniform(seed, 2 * i + 1);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}
