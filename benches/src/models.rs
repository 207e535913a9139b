//! The models the training benches time: the MLP and the transformer block of the issue
//! statements, built with headroom-nn, and one forward + backward step of each.

use headroom_autograd::{Tape, Tensor};
use headroom_kernels::ops::random::uniform;
use headroom_kernels::{DType, Device, DeviceConfig};
use headroom_nn::{Activation, Block, DropoutCounter, Initializer, Module, Sequential, loss, mlp};

/// A model, its inputs and how its loss is computed.
pub struct Workload {
    /// What it is, for tables.
    pub name: &'static str,
    /// The device it runs on.
    pub device: Device,
    model: Box<dyn Module>,
    input: Tensor,
    targets: Option<Tensor>,
}

/// `n` values in `[-1, 1)` from `seed`.
fn values(seed: u64, n: usize) -> Vec<f64> {
    (0..n as u64)
        .map(|i| 2.0 * uniform(seed, i) - 1.0)
        .collect()
}

fn device() -> Device {
    Device::cpu(DeviceConfig::new(8 << 30)).expect("a CPU device")
}

impl Workload {
    /// The MLP 784-1024-1024-10 with ReLU on a batch of 256, cross-entropy loss.
    pub fn mlp() -> Self {
        let device = device();
        let model: Sequential = mlp(
            &mut Initializer::new(&device, DType::F32, 1),
            &[784, 1024, 1024, 10],
            Activation::Relu,
        )
        .expect("the MLP");
        let input = Tensor::from_f64(&device, [256, 784], DType::F32, &values(2, 256 * 784))
            .expect("inputs");
        let labels: Vec<u32> = (0..256).map(|i| (i * 7 % 10) as u32).collect();
        let targets = Tensor::from_host(&device, [256], &labels).expect("targets");
        Self {
            name: "mlp 784-1024-1024-10 b256",
            device,
            model: Box::new(model),
            input,
            targets: Some(targets),
        }
    }

    /// One pre-norm transformer block, width 256, 4 heads, on 32 sequences of 64, with the mean
    /// square of its output as the loss.
    pub fn transformer_block() -> Self {
        let device = device();
        let block = Block::new(
            &mut Initializer::new(&device, DType::F32, 3),
            256,
            4,
            0.02,
            (0.0, &DropoutCounter::default()),
        )
        .expect("the block");
        let input = Tensor::from_f64(
            &device,
            [32, 64, 256],
            DType::F32,
            &values(4, 32 * 64 * 256),
        )
        .expect("inputs");
        Self {
            name: "transformer block d256 h4 t64 b32",
            device,
            model: Box::new(block),
            input,
            targets: None,
        }
    }

    /// One forward and backward pass; returns the loss.
    pub fn step(&self) -> headroom_nn::Result<f64> {
        let tape = Tape::new();
        let loss = tape.record(|| {
            let y = self.model.forward(&self.input)?;
            match &self.targets {
                Some(targets) => loss::cross_entropy(&y, targets, None),
                None => Ok(y.mul(&y)?.mean_all()?),
            }
        })?;
        let params = self.model.parameters();
        let grads = tape.gradient(&loss, &params.iter().collect::<Vec<_>>())?;
        drop(grads);
        Ok(loss.to_f64()?[0])
    }
}
