//! SVG plots of a run: the loss curve, and the memory timeline per tag with the limit drawn in.

use std::path::Path;

use headroom_alloc::format_bytes;
use plotters::prelude::*;

use crate::error::{Error, Result};
use crate::record::StepRecord;

fn plot_error(path: &Path) -> impl Fn(String) -> Error + '_ {
    move |detail| Error::Io {
        path: path.to_owned(),
        source: std::io::Error::other(detail),
    }
}

/// The loss per step (and the held-out metric, where evaluated, on its own axis scale).
pub fn loss_curve(records: &[StepRecord], path: &Path) -> Result<()> {
    let fail = plot_error(path);
    let root = SVGBackend::new(path, (800, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let last = records.last().map_or(1, |r| r.step) as f64;
    let top = records
        .iter()
        .map(|r| r.loss)
        .filter(|l| l.is_finite())
        .fold(0.0f64, f64::max)
        .max(1e-3);
    let mut chart = ChartBuilder::on(&root)
        .caption("training loss", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..last, 0f64..top * 1.05)
        .map_err(|e| fail(e.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("loss")
        .draw()
        .map_err(|e| fail(e.to_string()))?;
    chart
        .draw_series(LineSeries::new(
            records
                .iter()
                .filter(|r| r.loss.is_finite())
                .map(|r| (r.step as f64, r.loss)),
            &BLUE,
        ))
        .map_err(|e| fail(e.to_string()))?
        .label("loss")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .draw()
        .map_err(|e| fail(e.to_string()))?;
    root.present().map_err(|e| fail(e.to_string()))
}

/// The peak bytes per tag and in all during each step, with the limit as a red line.
pub fn memory_timeline(records: &[StepRecord], path: &Path) -> Result<()> {
    let fail = plot_error(path);
    let root = SVGBackend::new(path, (800, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let last = records.last().map_or(1, |r| r.step) as f64;
    let limit = records.iter().map(|r| r.limit).max().unwrap_or(1);
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("memory per step (limit {})", format_bytes(limit)),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..last, 0f64..mib(limit) * 1.08)
        .map_err(|e| fail(e.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("MiB")
        .draw()
        .map_err(|e| fail(e.to_string()))?;
    let mut tags: Vec<String> = records
        .iter()
        .flat_map(|r| r.tags.iter().map(|t| t.tag.clone()))
        .collect();
    tags.sort();
    tags.dedup();
    let series: Vec<(String, Vec<(f64, f64)>)> = std::iter::once((
        "in use (peak)".to_owned(),
        records
            .iter()
            .map(|r| (r.step as f64, mib(r.peak)))
            .collect(),
    ))
    .chain(tags.iter().map(|tag| {
        let points = records
            .iter()
            .map(|r| {
                let peak = r.tags.iter().find(|t| &t.tag == tag).map_or(0, |t| t.peak);
                (r.step as f64, mib(peak))
            })
            .collect();
        (tag.clone(), points)
    }))
    .collect();
    for (k, (name, points)) in series.into_iter().enumerate() {
        // The total in black; each tag in a colour of its own (never the limit's red).
        let color = if k == 0 {
            BLACK.to_rgba()
        } else {
            Palette99::pick(k + 1).to_rgba()
        };
        chart
            .draw_series(LineSeries::new(points, color))
            .map_err(|e| fail(e.to_string()))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, mib(limit)), (last, mib(limit))],
            RED.stroke_width(2),
        ))
        .map_err(|e| fail(e.to_string()))?
        .label("limit")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| fail(e.to_string()))?;
    root.present().map_err(|e| fail(e.to_string()))
}
