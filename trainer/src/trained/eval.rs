//! The held-out metric: exact match of greedily generated answers, mean loss, or accuracy.
//! Evaluated in chunks of the current micro-batch size, halved if one runs out of memory.

use headroom_autograd::no_grad;
use headroom_kernels::Device;

use crate::config::PrecisionKind;
use crate::data::{HostBatch, IGNORE, INPUTS, Metric, TARGETS, Task, Values};
use crate::error::{Error, Result};
use crate::model::TrainableModel;

/// Tallies of a metric over chunks.
#[derive(Default)]
struct Tally {
    hits: f64,
    count: f64,
}

/// The task's metric on its held-out samples; none when it has none.
pub fn evaluate(
    model: &dyn TrainableModel,
    task: &Task,
    device: &Device,
    precision: PrecisionKind,
    chunk: usize,
) -> Result<Option<f64>> {
    let _off = no_grad();
    let _policy = precision.autocast();
    let mut chunk = chunk.max(1);
    let mut tally = Tally::default();
    let mut start = 0;
    while start < task.eval.len() {
        let end = (start + chunk).min(task.eval.len());
        let indices: Vec<usize> = (start..end).collect();
        let batch = HostBatch::collect(&*task.eval, &indices)?;
        match judge(model, task.metric, &batch, device) {
            Ok((hits, count)) => {
                tally.hits += hits;
                tally.count += count;
                start = end;
            }
            Err(err) if err.is_out_of_memory() && chunk > 1 => chunk /= 2,
            Err(err) => return Err(err),
        }
    }
    Ok((tally.count > 0.0).then(|| tally.hits / tally.count))
}

/// The metric's numerator and denominator over one chunk.
fn judge(
    model: &dyn TrainableModel,
    metric: Metric,
    batch: &HostBatch,
    device: &Device,
) -> Result<(f64, f64)> {
    match metric {
        Metric::Loss => {
            let loss = model.loss(&batch.to_device(device)?)?.to_f64()?[0];
            let scored = batch.scored() as f64;
            Ok((loss * scored, scored))
        }
        Metric::Accuracy => {
            let on_device = batch.to_device(device)?;
            let logits = model.logits(on_device.inputs()?)?;
            let classes = logits.dims()[1];
            let values = logits.to_f64()?;
            let hits = values
                .chunks(classes)
                .zip(u32_array(batch, TARGETS)?)
                .filter(|(row, class)| argmax(row) == **class as usize)
                .count();
            Ok((hits as f64, batch.len() as f64))
        }
        Metric::ExactMatch => exact_match(model, batch, device),
    }
}

/// The U32 values of the array `name` (each sample's class, for accuracy).
fn u32_array<'a>(batch: &'a HostBatch, name: &str) -> Result<&'a [u32]> {
    batch.array(name).and_then(Values::as_u32).ok_or_else(|| {
        Error::config(format!(
            "data: the metric reads U32 `{name}`, which the samples lack"
        ))
    })
}

fn argmax(row: &[f64]) -> usize {
    (0..row.len())
        .max_by(|&a, &b| row[a].total_cmp(&row[b]))
        .unwrap_or(0)
}

/// Generates each sample's scored tokens greedily, one position at a time (each generated
/// token feeds the next position), and counts the samples whose every token is right.
fn exact_match(
    model: &dyn TrainableModel,
    batch: &HostBatch,
    device: &Device,
) -> Result<(f64, f64)> {
    let (Some(ids), Some(targets)) = (
        batch.array(INPUTS).and_then(Values::as_u32),
        batch.array(TARGETS).and_then(Values::as_u32),
    ) else {
        return Ok((0.0, 0.0));
    };
    let n = batch.len();
    let len = ids.len() / n.max(1);
    let mut ids = ids.to_vec();
    let starts: Vec<usize> = targets
        .chunks(len)
        .map(|t| t.iter().position(|&x| x != IGNORE).unwrap_or(len))
        .collect();
    let answer = targets[..len].iter().filter(|&&t| t != IGNORE).count();
    let mut right = vec![true; n];
    for step in 0..answer {
        let input = batch.with_array(INPUTS, Values::U32(ids.clone()))?;
        let on_device = input.to_device(device)?;
        let tokens = on_device.inputs()?;
        let logits = model.logits(tokens)?;
        let vocab = logits.dims()[2];
        let values = logits.to_f64()?;
        for s in 0..n {
            let position = starts[s] + step;
            if position >= len {
                continue;
            }
            let row = &values[(s * len + position) * vocab..(s * len + position + 1) * vocab];
            let predicted = argmax(row) as u32;
            right[s] &= predicted == targets[s * len + position];
            if position + 1 < len {
                ids[s * len + position + 1] = predicted;
            }
        }
    }
    Ok((right.iter().filter(|&&r| r).count() as f64, n as f64))
}
