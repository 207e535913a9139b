//! A step in several micro-batches adds each gradient into the step's as soon as it is
//! complete: it holds one set of gradients, not two, and updates the weights exactly as the
//! accumulation of whole micro-batches' gradients did.

use headroom_alloc::Tag;
use headroom_autograd::Gradients;
use headroom_kernels::{Device, DeviceConfig};

use super::context::StepContext;
use super::train_step::{Sizes, train_step, update};
use crate::config::{ModelConfig, TrainConfig};
use crate::data::{HostBatch, Task};
use crate::model::{BuiltinModel, ModelFactory, ModelSettings, TrainableModel};
use crate::step::context::Forward;
use crate::step::optimizer::build_optimizer;
use crate::step::precision::LossScaler;

/// A four-block GPT wide enough that its weights' gradients outweigh its activations'.
fn config() -> TrainConfig {
    let mut config = TrainConfig {
        model: ModelConfig {
            width: 64,
            heads: 2,
            layers: 4,
            dropout: 0.1,
            ..ModelConfig::default()
        },
        ..TrainConfig::default()
    };
    config.data.digits = 2;
    config.data.train_size = 64;
    config.data.eval_size = 16;
    config.batch.size = 8;
    config
}

/// What one step works on, on a CPU device of its own.
struct Run {
    device: Device,
    model: Box<dyn TrainableModel>,
    optimizer: Box<dyn headroom_nn::Optimizer>,
    scaler: LossScaler,
}

impl Run {
    fn new(config: &TrainConfig, task: &Task) -> Run {
        let device = Device::cpu(DeviceConfig::new(256 << 20)).unwrap();
        let factory = BuiltinModel(config.model.clone());
        let settings = ModelSettings::of(config);
        let mut model = factory
            .build(&device, &task.train.shape(), &settings)
            .unwrap();
        factory.initialize(&mut *model).unwrap();
        let optimizer = build_optimizer(&config.optimizer, model.module(), None).unwrap();
        let scaler = LossScaler::new(&config.precision);
        Run {
            device,
            model,
            optimizer,
            scaler,
        }
    }

    fn context<'a>(&'a mut self, config: &TrainConfig) -> StepContext<'a> {
        StepContext::new(
            &self.device,
            &mut *self.model,
            &mut *self.optimizer,
            &mut self.scaler,
            config,
        )
    }

    /// The most the gradients' tag held at once.
    fn gradient_peak(&self) -> u64 {
        let stats = self.device.allocator().stats();
        stats
            .tags
            .iter()
            .find(|t| t.tag == Tag::GRADIENTS)
            .map_or(0, |t| t.peak)
    }

    fn weights(&self) -> Vec<Vec<u64>> {
        let params = self.model.module().parameters();
        params
            .iter()
            .map(|p| p.to_f64().unwrap().into_iter().map(f64::to_bits).collect())
            .collect()
    }

    fn parameter_bytes(&self) -> u64 {
        let params = self.model.module().parameters();
        params
            .iter()
            .map(|p| p.array().buffer().bytes() as u64)
            .sum()
    }
}

/// The accumulation a step made before: each micro-batch's whole set of gradients, then
/// summed into the step's.
fn accumulate_whole_sets(ctx: &mut StepContext<'_>, batch: &HostBatch, sizes: &[usize]) {
    let scored = batch.scored() as f64;
    let mut total = Gradients::default();
    let mut done = 0;
    for &size in sizes {
        let slice = batch.slice(done, done + size);
        done += size;
        let params = ctx.model.module().parameters();
        let Forward {
            tape, loss, seed, ..
        } = ctx.forward(&slice, slice.scored() as f64 / scored).unwrap();
        let grads = tape
            .gradient_with(&loss, seed, &params.iter().collect::<Vec<_>>())
            .unwrap();
        total.accumulate(grads).unwrap();
    }
    update(ctx, &total, &mut None).unwrap();
}

#[test]
fn a_step_in_micro_batches_holds_one_set_of_gradients_and_updates_as_whole_sets_did() {
    let config = config();
    let task = Task::from_config(&config.data, &config.model, config.seed).unwrap();
    let indices: Vec<usize> = (0..config.batch.size).collect();
    let batch = HostBatch::collect(&*task.train, &indices).unwrap();
    let sizes = [2, 2, 2, 2];

    let mut stepped = Run::new(&config, &task);
    stepped.device.allocator().with(|a| a.reset_peak());
    train_step(
        &mut stepped.context(&config),
        &batch,
        0,
        Sizes::Fixed(&sizes),
    )
    .unwrap();

    let mut whole = Run::new(&config, &task);
    whole.device.allocator().with(|a| a.reset_peak());
    accumulate_whole_sets(&mut whole.context(&config), &batch, &sizes);

    assert_eq!(stepped.weights(), whole.weights(), "bit for bit");
    let set = stepped.parameter_bytes();
    let (peak, whole_peak) = (stepped.gradient_peak(), whole.gradient_peak());
    // The gradients' tag also holds the activations' gradients, alike in both.
    assert!(peak >= set, "{peak} < {set}");
    assert!(
        whole_peak >= peak + set * 3 / 4,
        "the gradients peaked at {peak} bytes, {whole_peak} accumulating whole sets, for \
         {set} bytes of parameters"
    );
}
