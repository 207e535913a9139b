//! What the terminal shows while a run trains: a bar over the steps with the last step's loss,
//! throughput, micro-batch size and memory.

use std::sync::Mutex;

use headroom_alloc::format_bytes;
use indicatif::{ProgressBar, ProgressStyle};

use crate::record::StepRecord;

/// The bar on the terminal now, for log lines to step around.
static SHOWN: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// A bar over `total` steps, `done` of them done; hidden unless `shown`.
pub fn bar(shown: bool, total: u64, done: u64) -> ProgressBar {
    let bar = if shown {
        ProgressBar::new(total)
    } else {
        ProgressBar::hidden()
    };
    if shown {
        show_bar(&bar);
    }
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:28}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_position(done);
    bar
}

/// Makes `bar` the one log lines step around.
fn show_bar(bar: &ProgressBar) {
    if let Ok(mut shown) = SHOWN.lock() {
        *shown = Some(bar.clone());
    }
}

/// Runs `write` with the bar shown now (if any) cleared from the terminal, and draws the bar
/// again after it: what `write` prints (a log line) lands on a line of its own above the bar
/// instead of on the bar's line.
pub fn above_the_bar<R>(write: impl FnOnce() -> R) -> R {
    let bar = SHOWN.lock().ok().and_then(|shown| shown.clone());
    match bar {
        Some(bar) if !bar.is_finished() => bar.suspend(write),
        _ => write(),
    }
}

/// Moves `bar` to `record`'s step, with its figures and the next step's micro-batch size.
pub fn show(bar: &ProgressBar, record: &StepRecord, micro: usize) {
    bar.set_position(record.step);
    bar.set_message(format!(
        "loss {:.4} | {:.0} tok/s | micro {micro} | mem {} (peak {}) of {}",
        record.loss,
        record.tokens_per_s,
        format_bytes(record.in_use),
        format_bytes(record.peak),
        format_bytes(record.limit),
    ));
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use indicatif::{ProgressDrawTarget, TermLike};

    use super::*;

    /// A terminal that records what is drawn on it, line by line.
    #[derive(Debug, Clone, Default)]
    struct Screen(Arc<Mutex<Vec<String>>>);

    impl Screen {
        fn put(&self, what: String) -> io::Result<()> {
            self.0.lock().unwrap().push(what);
            Ok(())
        }
    }

    impl TermLike for Screen {
        fn width(&self) -> u16 {
            120
        }
        fn move_cursor_up(&self, n: usize) -> io::Result<()> {
            self.put(format!("up {n}"))
        }
        fn move_cursor_down(&self, n: usize) -> io::Result<()> {
            self.put(format!("down {n}"))
        }
        fn move_cursor_right(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> io::Result<()> {
            self.put(s.to_owned())
        }
        fn write_str(&self, s: &str) -> io::Result<()> {
            self.put(s.to_owned())
        }
        fn clear_line(&self) -> io::Result<()> {
            self.put("clear".into())
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_log_line_clears_the_bar_and_the_bar_is_drawn_again_below_it() {
        let screen = Screen::default();
        let target = ProgressDrawTarget::term_like_with_hz(Box::new(screen.clone()), 200);
        let bar = ProgressBar::with_draw_target(Some(10), target);
        bar.set_position(3);
        bar.force_draw();
        show_bar(&bar);
        above_the_bar(|| screen.put("a log line".into())).unwrap();
        let mut drawn = screen.0.lock().unwrap().clone();
        drawn.retain(|d| d != "up 0");
        let log = drawn.iter().position(|d| d == "a log line").unwrap();
        assert_eq!(
            drawn[log - 1],
            "clear",
            "the bar's line is cleared first: {drawn:?}"
        );
        assert!(
            drawn[log + 1..].iter().any(|d| d.contains("3/10")),
            "the bar comes back below the line: {drawn:?}"
        );
        bar.finish_and_clear();
    }
}
