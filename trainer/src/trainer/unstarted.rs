//! What a run's start has made on disk (its new directory, or its allocation trace in a
//! directory it found), removed again when the start does not end in a run: when it is refused,
//! and when Ctrl-C or `kill` interrupts it before the first step, where the process then ends at
//! once (a thread watches for the signal, so that loading a model or planning need not finish
//! first). Files the directory held before are never touched.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::trainer::interrupt;

/// How often the watcher looks for a signal.
const WATCH_EVERY: Duration = Duration::from_millis(10);

/// What the interrupted start says before the process ends.
const INTERRUPTED: &str = "headroom: interrupted before the first step; nothing was written";

/// What a start made; its lock is held while the start makes something and while a signal's
/// clean-up runs, so that neither sees the other half done.
#[derive(Debug, Default)]
struct Made {
    /// A directory the start made: removed whole.
    dir: Option<PathBuf>,
    /// Files the start made in a directory it found.
    files: Vec<PathBuf>,
    /// The start is over: the watcher leaves.
    over: bool,
}

impl Made {
    /// Removes what the start made; what cannot be removed is logged.
    fn remove(&self) {
        if let Some(dir) = &self.dir {
            // The start may be writing into it meanwhile: a second try removes what it added.
            let removed = std::fs::remove_dir_all(dir).or_else(|_| std::fs::remove_dir_all(dir));
            match removed {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!("{}: cannot remove it ({err})", dir.display());
                }
                _ => {}
            }
        }
        for file in &self.files {
            match std::fs::remove_file(file) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                    tracing::warn!("{}: cannot remove it ({err})", file.display());
                }
                _ => {}
            }
        }
    }
}

/// The record of a start under way, and the thread that ends it on a signal (where the
/// handlers are installed, [`StopOnSignal::install`](interrupt::StopOnSignal::install)).
pub(crate) struct Unstarted {
    made: Arc<Mutex<Made>>,
    watcher: Option<JoinHandle<()>>,
}

/// What is being made, recorded as it is made.
pub(crate) struct Making<'a>(MutexGuard<'a, Made>);

impl Making<'_> {
    /// The start made the directory `dir`.
    pub(crate) fn dir(&mut self, dir: &Path) {
        self.0.dir.get_or_insert_with(|| dir.to_owned());
    }

    /// The start made the file `path` (in a directory it did not make).
    pub(crate) fn file(&mut self, path: &Path) {
        self.0.files.push(path.to_owned());
    }
}

impl Unstarted {
    /// Begins the record of a start, and watches for a signal where the handlers are installed.
    pub(crate) fn begin() -> Self {
        let made = Arc::new(Mutex::new(Made::default()));
        let watcher = match interrupt::installed() {
            true => {
                let shared = Arc::clone(&made);
                interrupt::set_starting(true);
                let spawned = std::thread::Builder::new()
                    .name("headroom-start-watch".into())
                    .spawn(move || watch(&shared));
                if let Err(err) = &spawned {
                    // Unwatched, a signal stops the run after its first step instead.
                    interrupt::set_starting(false);
                    tracing::warn!("a signal while the run starts waits for its first step: {err}");
                }
                spawned.ok()
            }
            false => None,
        };
        Self { made, watcher }
    }

    /// Holds the record while the start makes something, and records it.
    pub(crate) fn making(&self) -> Making<'_> {
        Making(lock(&self.made))
    }

    /// The run has started: what the start made stays, and a signal now stops the run after a
    /// step.
    pub(crate) fn keep(self) {
        self.end(false);
    }

    /// The start was refused: what it made goes.
    pub(crate) fn remove(self) {
        self.end(true);
    }

    fn end(mut self, remove: bool) {
        {
            let mut made = lock(&self.made);
            made.over = true;
            if remove {
                made.remove();
            }
        }
        if let Some(watcher) = self.watcher.take() {
            interrupt::set_starting(false);
            watcher.join().ok();
        }
    }
}

/// Waits for a signal while the start is under way; on one, removes what the start made, says
/// so and ends the process as the signal would have.
fn watch(made: &Mutex<Made>) {
    loop {
        if lock(made).over {
            return;
        }
        if let Some(signal) = interrupt::received() {
            // Held to the end: the start cannot make more, or finish, meanwhile.
            let made = lock(made);
            if made.over {
                return;
            }
            made.remove();
            eprintln!("{INTERRUPTED}");
            end_process(interrupt::exit_status(signal));
        }
        std::thread::sleep(WATCH_EVERY);
    }
}

/// Ends the process with `status` without running exit handlers, which would race the start's
/// work on other threads (a device being opened, a model being loaded).
fn end_process(status: u8) -> ! {
    #[cfg(unix)]
    // SAFETY: `_exit` ends the process at once; nothing of it is used afterwards.
    unsafe {
        libc::_exit(i32::from(status))
    }
    #[cfg(not(unix))]
    std::process::exit(i32::from(status))
}

fn lock(made: &Mutex<Made>) -> MutexGuard<'_, Made> {
    made.lock().unwrap_or_else(PoisonError::into_inner)
}
