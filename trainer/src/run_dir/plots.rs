//! SVG plots of a run: the loss on a log scale beside the held-out metric, and the memory per
//! tag per step with the limit drawn in, each recovered out-of-memory marked with its verdict
//! and each change of micro-batch size marked where it happened.

use std::path::Path;

use headroom_alloc::{Verdict, format_bytes};
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::error::{Error, Result};
use crate::run_dir::record::StepRecord;
use crate::step::micro::{Change, SizeChange};

fn plot_error(path: &Path) -> impl Fn(String) -> Error + '_ {
    move |detail| Error::Io {
        path: path.to_owned(),
        source: std::io::Error::other(detail),
    }
}

/// Runs of records whose steps increase: a line is never drawn back from a later step to an
/// earlier one (as between two runs appended to one file).
fn runs(records: &[StepRecord]) -> Vec<&[StepRecord]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..records.len() {
        if records[i].step <= records[i - 1].step {
            out.push(&records[start..i]);
            start = i;
        }
    }
    if start < records.len() {
        out.push(&records[start..]);
    }
    out
}

/// The loss per step on a log scale (steps whose loss was not finite marked at the top), and
/// beside it the held-out `metric` where it was evaluated, ending with the `last` value (the
/// run's final evaluation, after its last step).
pub fn loss_curve(
    records: &[StepRecord],
    metric: &str,
    last: Option<f64>,
    path: &Path,
) -> Result<()> {
    let fail = plot_error(path);
    let root = SVGBackend::new(path, (1100, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let (left, right) = root.split_horizontally(700);
    draw_loss(records, &left).map_err(&fail)?;
    draw_metric(records, metric, last, &right).map_err(&fail)?;
    root.present().map_err(|e| fail(e.to_string()))
}

fn draw_loss(records: &[StepRecord], area: &DrawingArea<SVGBackend, Shift>) -> Result<(), String> {
    let last = records.iter().map(|r| r.step).max().unwrap_or(1).max(1) as f64;
    let finite = || {
        records
            .iter()
            .map(|r| r.loss)
            .filter(|l| l.is_finite() && *l > 0.0)
    };
    let low = finite().fold(f64::INFINITY, f64::min);
    let high = finite().fold(0.0f64, f64::max);
    let (low, high) = if high > 0.0 {
        (low / 1.5, high * 1.5)
    } else {
        (1e-3, 1.0)
    };
    let mut chart = ChartBuilder::on(area)
        .caption("training loss (log scale)", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..last, (low..high).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("loss")
        .draw()
        .map_err(|e| e.to_string())?;
    for (k, run) in runs(records).into_iter().enumerate() {
        let series = chart
            .draw_series(LineSeries::new(
                run.iter()
                    .filter(|r| r.loss.is_finite() && r.loss > 0.0)
                    .map(|r| (r.step as f64, r.loss)),
                &BLUE,
            ))
            .map_err(|e| e.to_string())?;
        if k == 0 {
            series
                .label("loss")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
        }
    }
    let nonfinite: Vec<f64> = records
        .iter()
        .filter(|r| !r.loss.is_finite())
        .map(|r| r.step as f64)
        .collect();
    if !nonfinite.is_empty() {
        chart
            .draw_series(
                nonfinite
                    .iter()
                    .map(|&step| Cross::new((step, high / 1.2), 4, RED.stroke_width(2))),
            )
            .map_err(|e| e.to_string())?
            .label("loss not finite")
            .legend(|(x, y)| Cross::new((x + 10, y), 4, RED.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| e.to_string())
}

fn draw_metric(
    records: &[StepRecord],
    metric: &str,
    final_value: Option<f64>,
    area: &DrawingArea<SVGBackend, Shift>,
) -> Result<(), String> {
    let last = records.iter().map(|r| r.step).max().unwrap_or(1).max(1) as f64;
    let points: Vec<(f64, f64)> = records
        .iter()
        .filter_map(|r| Some((r.step as f64, r.metric?)))
        .chain(final_value.map(|m| (last, m)))
        .filter(|(_, m)| m.is_finite())
        .collect();
    let top = points.iter().map(|p| p.1).fold(0.0f64, f64::max);
    let top = if metric == "loss" { top * 1.1 } else { 1.0 }.max(1e-3);
    let caption = format!("held-out {metric}");
    let mut chart = linear_chart(area, &caption, (last, top), metric)?;
    if points.is_empty() {
        return area
            .draw(&Text::new(
                "not evaluated during the run",
                (60, 200),
                ("sans-serif", 16),
            ))
            .map_err(|e| e.to_string());
    }
    chart
        .draw_series(LineSeries::new(points.iter().copied(), &GREEN))
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(points.iter().map(|&p| Circle::new(p, 3, GREEN.filled())))
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// A chart of values per step, both axes linear.
type StepChart<'a, 'b> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A chart over steps `0..last` and values `0..top` on `area`, with its mesh drawn.
fn linear_chart<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: &str,
    (last, top): (f64, f64),
    y_desc: &str,
) -> Result<StepChart<'a, 'b>, String> {
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0f64..last, 0f64..top)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc(y_desc)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(chart)
}

/// The peak bytes per tag and in all during each step, with the limit as a red line, each
/// recovered out-of-memory marked by its verdict, and each change of micro-batch size of
/// `changes` marked with the new size.
pub fn memory_timeline(records: &[StepRecord], changes: &[SizeChange], path: &Path) -> Result<()> {
    let fail = plot_error(path);
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    draw_memory(records, changes, &root).map_err(&fail)?;
    root.present().map_err(|e| fail(e.to_string()))
}

/// The memory plot of [`memory_timeline`] on `area`: the peaks per tag, the limit, the
/// recovered out-of-memory failures and the changes of micro-batch size, then the legend.
fn draw_memory(
    records: &[StepRecord],
    changes: &[SizeChange],
    area: &DrawingArea<SVGBackend, Shift>,
) -> Result<(), String> {
    let last = records.iter().map(|r| r.step).max().unwrap_or(1).max(1) as f64;
    let limit = records.iter().map(|r| r.limit).max().unwrap_or(1);
    let top = mib(limit) * 1.12;
    let caption = format!("memory per step (limit {})", format_bytes(limit));
    let mut chart = linear_chart(area, &caption, (last, top), "MiB")?;
    draw_peaks(&mut chart, records)?;
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, mib(limit)), (last, mib(limit))],
            RED.stroke_width(2),
        ))
        .map_err(|e| e.to_string())?
        .label("limit")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    mark_out_of_memory(&mut chart, records)?;
    mark_size_changes(&mut chart, changes, limit)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| e.to_string())
}

/// Bytes in MiB, the memory plot's unit.
fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

/// The peak bytes in use per step in black, each tag's in a colour of its own (never the
/// limit's red), and the host tier's peak where the run offloads to it, each labelled once.
fn draw_peaks(chart: &mut StepChart<'_, '_>, records: &[StepRecord]) -> Result<(), String> {
    let mut tags: Vec<&str> = records
        .iter()
        .flat_map(|r| r.tags.iter().map(|t| t.tag.as_str()))
        .collect();
    tags.sort_unstable();
    tags.dedup();
    /// What a line of the plot follows.
    enum Line<'a> {
        Peak,
        Tag(&'a str),
        Host,
    }
    let host = records.iter().any(|r| r.host_peak.is_some());
    let series = std::iter::once(("in use (peak)", BLACK.to_rgba(), Line::Peak))
        .chain(
            tags.iter()
                .enumerate()
                .map(|(k, &tag)| (tag, Palette99::pick(k + 2).to_rgba(), Line::Tag(tag))),
        )
        .chain(host.then(|| ("host tier (peak)", Palette99::pick(1).to_rgba(), Line::Host)));
    for (name, color, line) in series {
        let value = |r: &StepRecord| match line {
            Line::Peak => mib(r.peak),
            Line::Tag(tag) => mib(r.tags.iter().find(|t| t.tag == tag).map_or(0, |t| t.peak)),
            Line::Host => mib(r.host_peak.unwrap_or(0)),
        };
        for (k, run) in runs(records).into_iter().enumerate() {
            let drawn = chart
                .draw_series(LineSeries::new(
                    run.iter().map(|r| (r.step as f64, value(r))),
                    color,
                ))
                .map_err(|e| e.to_string())?;
            if k == 0 {
                drawn
                    .label(name)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
            }
        }
    }
    Ok(())
}

/// A triangle on the peak in use of each step that recovered from an out-of-memory, coloured
/// by its verdict.
fn mark_out_of_memory(chart: &mut StepChart<'_, '_>, records: &[StepRecord]) -> Result<(), String> {
    for (verdict, color) in [
        (Verdict::Capacity, RGBColor(200, 0, 0)),
        (Verdict::Fragmentation, RGBColor(230, 140, 0)),
    ] {
        let marks: Vec<(f64, f64)> = records
            .iter()
            .filter(|r| r.ooms.iter().any(|o| o.verdict == verdict))
            .map(|r| (r.step as f64, mib(r.peak)))
            .collect();
        if marks.is_empty() {
            continue;
        }
        chart
            .draw_series(
                marks
                    .iter()
                    .map(|&p| TriangleMarker::new(p, 7, color.filled())),
            )
            .map_err(|e| e.to_string())?
            .label(format!("out of memory, recovered ({verdict})"))
            .legend(move |(x, y)| TriangleMarker::new((x + 10, y), 6, color.filled()));
    }
    Ok(())
}

/// A grey line at each change of micro-batch size in `changes` (but the first size), with
/// the new size written above it, under the top of a chart of `limit`.
fn mark_size_changes(
    chart: &mut StepChart<'_, '_>,
    changes: &[SizeChange],
    limit: u64,
) -> Result<(), String> {
    let grey = RGBColor(120, 120, 120);
    for change in changes.iter().filter(|c| c.change != Change::Start) {
        let x = change.step as f64;
        chart
            .draw_series(LineSeries::new(
                vec![(x, 0.0), (x, mib(limit) * 1.04)],
                grey.stroke_width(1),
            ))
            .map_err(|e| e.to_string())?;
        let label = match change.change {
            Change::Grow => format!("micro {} (grown)", change.size),
            _ => format!("micro {}", change.size),
        };
        chart
            .draw_series(std::iter::once(Text::new(
                label,
                (x, mib(limit) * 1.09),
                ("sans-serif", 12).into_font().color(&grey),
            )))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_never_drawn_back_to_an_earlier_step() {
        let steps = |records: &[StepRecord]| -> Vec<Vec<u64>> {
            runs(records)
                .iter()
                .map(|run| run.iter().map(|r| r.step).collect())
                .collect()
        };
        let records: Vec<StepRecord> = [1, 2, 3, 1, 2, 2, 5]
            .into_iter()
            .map(|step| StepRecord::sample(step, 1.0))
            .collect();
        assert_eq!(steps(&records), [vec![1, 2, 3], vec![1, 2], vec![2, 5]]);
        assert_eq!(steps(&records[..3]), [vec![1, 2, 3]]);
        assert!(steps(&[]).is_empty());
    }
}
