//! What the terminal shows while work goes on: a bar over a run's steps (with the last step's
//! figures) or over the bytes `headroom prepare` tokenizes, which log lines step around.

#[cfg(feature = "progress")]
use std::sync::Mutex;

#[cfg(feature = "progress")]
use indicatif::{ProgressBar, ProgressStyle};

/// The bar on the terminal now, for log lines to step around.
#[cfg(feature = "progress")]
static SHOWN: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// A progress bar on standard error, or nothing where it is hidden or the crate is built
/// without its `progress` feature.
pub struct Bar {
    #[cfg(feature = "progress")]
    bar: ProgressBar,
}

impl Bar {
    /// A bar over `total` steps, `done` of them done; hidden unless `shown`.
    pub fn steps(shown: bool, total: u64, done: u64) -> Self {
        let bar = Self::new(
            shown,
            total,
            "{elapsed_precise} [{bar:28}] {pos}/{len} {msg}",
        );
        #[cfg(feature = "progress")]
        bar.bar.set_position(done);
        #[cfg(not(feature = "progress"))]
        let _ = done;
        bar
    }

    /// A bar over `total` bytes of text to tokenize; hidden unless `shown`.
    pub fn bytes(shown: bool, total: u64) -> Self {
        Self::new(
            shown,
            total,
            "tokenizing [{bar:30}] {binary_bytes}/{binary_total_bytes} {binary_bytes_per_sec} \
             eta {eta}",
        )
    }

    #[cfg(feature = "progress")]
    fn new(shown: bool, total: u64, template: &str) -> Self {
        if !shown {
            return Self {
                bar: ProgressBar::hidden(),
            };
        }
        let bar = ProgressBar::new(total);
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        show_bar(&bar);
        Self { bar }
    }

    #[cfg(not(feature = "progress"))]
    fn new(_shown: bool, _total: u64, _template: &str) -> Self {
        Self {}
    }

    /// Moves the bar to `position`, with `message` beside it.
    pub fn show(&self, position: u64, message: String) {
        #[cfg(feature = "progress")]
        {
            self.bar.set_position(position);
            self.bar.set_message(message);
        }
        #[cfg(not(feature = "progress"))]
        let _ = (position, message);
    }

    /// Moves the bar `by` further.
    pub fn advance(&self, by: u64) {
        #[cfg(feature = "progress")]
        self.bar.inc(by);
        #[cfg(not(feature = "progress"))]
        let _ = by;
    }

    /// Clears the bar from the terminal.
    pub fn finish(&self) {
        #[cfg(feature = "progress")]
        self.bar.finish_and_clear();
    }
}

/// Makes `bar` the one log lines step around.
#[cfg(feature = "progress")]
fn show_bar(bar: &ProgressBar) {
    if let Ok(mut shown) = SHOWN.lock() {
        *shown = Some(bar.clone());
    }
}

/// Runs `write` with the bar shown now (if any) cleared from the terminal, and draws the bar
/// again after it: what `write` prints (a log line) lands on a line of its own above the bar
/// instead of on the bar's line.
pub fn above_the_bar<R>(write: impl FnOnce() -> R) -> R {
    #[cfg(feature = "progress")]
    if let Some(bar) = SHOWN.lock().ok().and_then(|shown| shown.clone())
        && !bar.is_finished()
    {
        return bar.suspend(write);
    }
    write()
}

#[cfg(all(test, feature = "progress"))]
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
