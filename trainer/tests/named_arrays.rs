//! Data of one's own as named arrays of any dtype and shape: a recommender learns ratings from
//! user and item ids (U32), with an f16 array of two values and a U8 mask beside them, planned
//! under a limit that cuts its batches; a sample unlike what its dataset says is an error
//! naming the sample and the array.

mod common;

use common::TempDir;
use half::f16;
use headroom_autograd::Tensor;
use headroom_kernels::{DType, Device};
use headroom_nn::loss::mse;
use headroom_nn::{Embedding, Init, Initializer, Module, visit_child, visit_child_mut};
use headroom_trainer::data::{DataShape, Dataset, DeviceBatch, Field, Metric, Sample, Values};
use headroom_trainer::model::{ModelFactory, ModelSettings, TrainableModel};
use headroom_trainer::{Error, Result, Trainer};

const USERS: usize = 24;
const ITEMS: usize = 16;
const RANK: usize = 3;

/// A factor of `index` (a user's or an item's), the same on every call.
fn factor(index: usize, salt: usize) -> [f32; RANK] {
    std::array::from_fn(|k| (((index * 7 + k * 5 + salt) % 11) as f32 - 5.0) / 5.0)
}

/// Every (user, item) pair rated by the product of their factors. A pair's sample also holds
/// `context` (f16 [2], unused by the model) and `mask` (U8, 0 for one pair in five: not
/// scored). With `broken`, sample 3 gives its rating as U32.
struct Ratings {
    pairs: Vec<(usize, usize)>,
    broken: bool,
}

impl Ratings {
    fn new(held_out: bool) -> Self {
        let pairs = (0..USERS * ITEMS)
            .map(|i| (i / ITEMS, i % ITEMS))
            .filter(|&(u, i)| ((u * 3 + i) % 7 == 0) == held_out)
            .collect();
        Self {
            pairs,
            broken: false,
        }
    }
}

impl Dataset for Ratings {
    fn len(&self) -> usize {
        self.pairs.len()
    }

    fn shape(&self) -> DataShape {
        DataShape::new(vec![
            Field::new("user", DType::U32, &[]).below(USERS),
            Field::new("item", DType::U32, &[]).below(ITEMS),
            Field::new("context", DType::F16, &[2]),
            Field::new("mask", DType::U8, &[]),
            Field::new("rating", DType::F32, &[]),
        ])
        .expect("distinct names")
    }

    fn sample(&self, index: usize) -> Result<Sample> {
        let (user, item) = self.pairs[index];
        let (a, b) = (factor(user, 0), factor(item, 3));
        let rating: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let rating: Values = match (self.broken, index) {
            (true, 3) => vec![1u32].into(),
            _ => vec![rating].into(),
        };
        Ok(Sample::new(vec![
            vec![user as u32].into(),
            vec![item as u32].into(),
            vec![f16::from_f32(user as f32), f16::from_f32(item as f32)].into(),
            vec![u8::from(!index.is_multiple_of(5))].into(),
            rating,
        ]))
    }
}

/// Matrix factorization: a rating is the dot product of a user's and an item's embedding.
struct Factorization {
    users: Embedding,
    items: Embedding,
}

impl Module for Factorization {
    fn forward(&self, _: &Tensor) -> headroom_nn::Result<Tensor> {
        Err(headroom_nn::Error::config(
            "factorization",
            "reads user and item ids: train it through its loss",
        ))
    }

    fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
        visit_child(&self.users, "users", f);
        visit_child(&self.items, "items", f);
    }

    fn visit_mut(
        &mut self,
        f: &mut dyn FnMut(&str, &mut Tensor) -> headroom_nn::Result<()>,
    ) -> headroom_nn::Result<()> {
        visit_child_mut(&mut self.users, "users", f)?;
        visit_child_mut(&mut self.items, "items", f)
    }
}

impl TrainableModel for Factorization {
    fn module(&self) -> &dyn Module {
        self
    }

    fn module_mut(&mut self) -> &mut dyn Module {
        self
    }

    /// The squared error of the scored pairs' predicted ratings.
    fn loss(&self, batch: &DeviceBatch) -> Result<Tensor> {
        let n = batch.get("user")?.dims()[0];
        // Every array arrives as the dataset said, the samples in front.
        let context = batch.get("context")?;
        assert_eq!((context.dtype(), context.dims()), (DType::F16, &[n, 2][..]));
        let mask = batch.get("mask")?.cast(DType::F32)?;
        assert_eq!(mask.dims(), [n]);
        let u = self.users.forward(batch.get("user")?)?;
        let v = self.items.forward(batch.get("item")?)?;
        let predicted = u.mul(&v)?.sum(1)?;
        let rating = batch.get("rating")?;
        Ok(mse(&predicted.mul(&mask)?, &rating.mul(&mask)?)?)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }
}

struct FactorizationFactory;

impl ModelFactory for FactorizationFactory {
    fn build(
        &self,
        device: &Device,
        shape: &DataShape,
        settings: &ModelSettings,
    ) -> Result<Box<dyn TrainableModel>> {
        let count = |name| shape.field(name).and_then(|f| f.bound);
        let (Some(users), Some(items)) = (count("user"), count("item")) else {
            return Err(Error::config(format!(
                "a factorization reads ids, not {shape}"
            )));
        };
        let init = &mut Initializer::new(device, DType::F32, settings.seed);
        Ok(Box::new(Factorization {
            users: Embedding::new(init, users, RANK, Init::Normal(0.5))?,
            items: Embedding::new(init, items, RANK, Init::Normal(0.5))?,
        }))
    }
}

fn trainer(dir: &TempDir, train: Ratings, micro: Option<usize>) -> Result<Trainer> {
    let builder = Trainer::builder()
        .model(FactorizationFactory)
        .data(train, Ratings::new(true), Metric::Loss)
        .batch(128)
        .steps(150)
        .lr(5e-2)
        .memory_limit(headroom_alloc::ByteSize::kib(8))
        .run_dir(&dir.0)
        .overwrite();
    match micro {
        Some(micro) => builder.micro_batch(micro).build(),
        None => builder.build(),
    }
}

#[test]
fn a_recommender_learns_from_arrays_of_its_own_names_dtypes_and_shapes() {
    let dir = TempDir::new("named-arrays");
    let mut trainer = trainer(&dir, Ratings::new(false), None).unwrap();
    let plan = trainer.plan().expect("planned").clone();
    assert!(plan.micro < 128, "the limit cuts the batch: {plan}");
    let before = trainer.evaluate().unwrap().unwrap();
    let summary = trainer.run(false).unwrap();
    assert_eq!(summary.first_step_peak, Some(plan.predicted_peak));
    let after = summary.metric.unwrap();
    assert!(after < before * 0.2, "held-out loss {before} -> {after}");
}

#[test]
fn a_sample_unlike_its_dataset_is_an_error_naming_it_and_its_array() {
    let dir = TempDir::new("named-arrays-broken");
    let broken = Ratings {
        broken: true,
        ..Ratings::new(false)
    };
    let err = trainer(&dir, broken, Some(16))
        .and_then(|mut trainer| trainer.run(false))
        .map(drop)
        .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, Error::Sample { index: 3, .. }), "{message}");
    assert!(
        message.contains("`rating` holds 1 values of u32") && message.contains("rating f32 []"),
        "{message}"
    );
}
