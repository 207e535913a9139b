//! Ctrl-C and `kill` without losing the run: the first SIGINT or SIGTERM asks the run to stop
//! after the step under way, as a callback's [`Flow::Stop`] does (the metric evaluated, the
//! checkpoint, the summary and the plots written); a second ends the process at once. The
//! process then exits as a shell expects of a signalled one: 128 plus the signal's number (130
//! for SIGINT, 143 for SIGTERM). A signal that arrives before the first step, while the run
//! starts, ends the start instead: what it made is removed and the process exits at once
//! (`unstarted.rs`).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

use crate::run_dir::record::StepRecord;
use crate::trainer::callback::{Callback, Flow};

/// The first stopping signal received (0: none).
static FIRST_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// Stopping signals received so far.
static RECEIVED: AtomicUsize = AtomicUsize::new(0);

/// The handlers are installed: a start watches for their signals.
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// A run is starting, watched: a signal ends the start, whose watcher says so, rather than the
/// step under way.
static STARTING: AtomicBool = AtomicBool::new(false);

/// What the first signal prints: the handler may only write raw bytes.
const NOTICE: &[u8] = b"\nheadroom: stopping after this step, with a checkpoint and the summary \
(signal again to stop at once)\n";

/// A callback that stops the run once SIGINT or SIGTERM has arrived.
#[derive(Debug)]
pub struct StopOnSignal(());

impl StopOnSignal {
    /// Installs the handlers of SIGINT and SIGTERM and returns the callback that reads them.
    /// Installed before the run is built, they also cover its start: a signal before the first
    /// step removes what the start made and ends the process (exit status 130 or 143), as a
    /// refused start leaves nothing. Where signals are not Unix's, the callback never stops the
    /// run.
    pub fn install() -> Self {
        #[cfg(unix)]
        {
            for signal in [libc::SIGINT, libc::SIGTERM] {
                // SAFETY: `on_signal` is an `extern "C" fn(c_int)`, the type `signal` expects
                // for a handler, and does only what a handler may: atomic operations, `write`
                // and `_exit`, all async-signal-safe.
                unsafe {
                    libc::signal(signal, on_signal as *const () as libc::sighandler_t);
                }
            }
            INSTALLED.store(true, Ordering::SeqCst);
        }
        Self(())
    }
}

impl Callback for StopOnSignal {
    fn after_step(&mut self, _record: &StepRecord) -> Flow {
        if received().is_some() {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

/// The first stopping signal this process received, by number, once
/// [`StopOnSignal::install`] has run.
pub fn received() -> Option<i32> {
    match FIRST_SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// Whether [`StopOnSignal::install`] has run, so that a start watches for signals.
pub(crate) fn installed() -> bool {
    INSTALLED.load(Ordering::SeqCst)
}

/// Whether a start is under way and watched for signals (a signal then ends the start), or
/// not (a signal stops the run after the step under way).
pub(crate) fn set_starting(starting: bool) {
    STARTING.store(starting, Ordering::SeqCst);
}

/// The exit status of a process stopped by `signal`, as shells report it.
pub fn exit_status(signal: i32) -> u8 {
    (128 + signal).clamp(0, 255) as u8
}

#[cfg(unix)]
extern "C" fn on_signal(signal: libc::c_int) {
    let first = RECEIVED.fetch_add(1, Ordering::SeqCst) == 0;
    if first {
        FIRST_SIGNAL.store(signal, Ordering::SeqCst);
    }
    if STARTING.load(Ordering::SeqCst) {
        // The start's watcher removes what the start made, says so and ends the process.
        return;
    }
    if first {
        // SAFETY: `NOTICE` is a live static buffer of `NOTICE.len()` bytes; a failed write
        // loses only the notice.
        unsafe {
            libc::write(libc::STDERR_FILENO, NOTICE.as_ptr().cast(), NOTICE.len());
        }
    } else {
        // SAFETY: `_exit` ends the process without running anything else, which is what a
        // second signal asks for.
        unsafe { libc::_exit(i32::from(exit_status(signal))) }
    }
}
