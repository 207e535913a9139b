//! The micro-batch size: halved on out-of-memory; after a run of clean steps, grown to the
//! largest size up to twice the current one (never above the effective batch) that the caller
//! predicts fits, and held where it predicts nothing larger does. A growth that fails all the
//! same (memory the prediction could not see, such as another process's) is not tried again
//! until the caller says the memory available has changed, and the next growth waits twice as
//! long.

use serde::{Deserialize, Serialize};

/// Why the micro-batch size changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Change {
    /// The planner's (or the configuration's) starting size.
    Start,
    /// Halved after an out-of-memory.
    Shrink,
    /// Doubled after a run of clean steps.
    Grow,
}

/// One change of size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeChange {
    /// The step during which it changed.
    pub step: u64,
    /// The new size.
    pub size: usize,
    /// Why.
    pub change: Change,
}

/// The adaptive micro-batch size and its history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MicroBatcher {
    size: usize,
    max: usize,
    /// Clean steps needed before the next growth.
    wait: u64,
    /// Clean steps since the last change.
    clean: u64,
    /// The largest size that has completed a step.
    proven: usize,
    /// The smallest size predicted not to fit, or that failed when grown to: no growth reaches
    /// it. Not saved: a resumed run predicts again, under what may be another limit.
    #[serde(skip)]
    ceiling: Option<usize>,
    /// Every change, in order.
    pub history: Vec<SizeChange>,
}

impl MicroBatcher {
    /// Starts at `size` (at most `max`, the effective batch), growing after `wait` clean steps.
    pub fn new(size: usize, max: usize, wait: u64) -> Self {
        let size = size.clamp(1, max.max(1));
        Self {
            size,
            max: max.max(1),
            wait: wait.max(1),
            clean: 0,
            proven: 0,
            ceiling: None,
            history: vec![SizeChange {
                step: 0,
                size,
                change: Change::Start,
            }],
        }
    }

    /// The size to use now.
    pub fn size(&self) -> usize {
        self.size
    }

    /// A micro-batch of `failed` samples ran out of memory during `step`: halve it. Returns
    /// false when it was a single sample (nothing smaller to try).
    pub fn shrink(&mut self, step: u64, failed: usize) -> bool {
        if failed <= 1 {
            return false;
        }
        if failed > self.proven && self.proven > 0 {
            // A growth that did not fit: not again, and wait twice as long before the next.
            self.wait = self.wait.saturating_mul(2);
            self.ceiling = Some(self.ceiling.map_or(failed, |c| c.min(failed)));
        }
        self.size = (failed / 2).max(1);
        self.clean = 0;
        self.history.push(SizeChange {
            step,
            size: self.size,
            change: Change::Shrink,
        });
        true
    }

    /// Checks the invariants a deserialized micro-batcher must hold: a size between 1 and the
    /// effective batch, and a history that starts somewhere.
    pub fn check(&self) -> Result<(), String> {
        if self.size == 0 || self.size > self.max {
            return Err(format!(
                "size {} is not between 1 and the batch of {}",
                self.size, self.max
            ));
        }
        if self.wait == 0 || self.history.is_empty() {
            return Err("a wait of 0 steps or an empty history".into());
        }
        Ok(())
    }

    /// The largest micro-batch size, the effective batch.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Forgets which sizes are known not to fit: the memory available has changed.
    pub fn forget_ceiling(&mut self) {
        self.ceiling = None;
    }

    /// Sets the effective batch to `max` (a resumed run may change it), clamping the size.
    pub fn set_max(&mut self, max: usize) {
        self.max = max.max(1);
        self.size = self.size.clamp(1, self.max);
        self.ceiling = None;
    }

    /// `step` completed (`clean` when no micro-batch of it ran out of memory). After enough
    /// clean steps the size grows to the largest one up to twice itself that `fits` accepts
    /// (`fits` is asked of sizes above the current one, largest first, then by bisection, so it
    /// must be monotone); when it accepts none, the size holds and no growth is tried again.
    pub fn finished(&mut self, step: u64, clean: bool, fits: &mut dyn FnMut(usize) -> bool) {
        self.proven = self.proven.max(self.size);
        if !clean {
            return;
        }
        self.clean += 1;
        let limit = self.ceiling.unwrap_or(usize::MAX).min(self.max + 1);
        if self.clean < self.wait || self.size + 1 >= limit {
            return;
        }
        self.clean = 0;
        let mut fail = (self.size * 2).min(limit - 1);
        let mut good = self.size;
        if fits(fail) {
            good = fail;
        } else {
            while fail - good > 1 {
                let mid = good + (fail - good) / 2;
                if fits(mid) {
                    good = mid;
                } else {
                    fail = mid;
                }
            }
            self.ceiling = Some(fail);
        }
        if good > self.size {
            self.size = good;
            self.history.push(SizeChange {
                step: step + 1,
                size: self.size,
                change: Change::Grow,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_on_oom_grows_after_clean_steps_and_backs_off_after_a_failed_growth() {
        let mut micro = MicroBatcher::new(64, 64, 2);
        assert!(micro.shrink(0, 64));
        assert_eq!(micro.size(), 32);
        micro.finished(0, false, &mut |_| true);
        micro.finished(1, true, &mut |_| true);
        assert_eq!(micro.size(), 32);
        micro.finished(2, true, &mut |_| true);
        assert_eq!(micro.size(), 64, "doubled after 2 clean steps");
        assert!(micro.shrink(3, 64));
        assert_eq!(micro.size(), 32);
        for step in 4..7 {
            micro.finished(step, true, &mut |_| true);
            assert_eq!(micro.size(), 32, "waits 4 clean steps now");
        }
        micro.finished(7, true, &mut |_| true);
        assert_eq!(micro.size(), 63, "below the size that failed");
        // Once the memory available changes, the size that failed may be tried again.
        micro.forget_ceiling();
        for step in 8..16 {
            micro.finished(step, true, &mut |_| true);
        }
        assert_eq!(micro.size(), 64);
        let mut one = MicroBatcher::new(1, 8, 1);
        assert!(!one.shrink(0, 1), "nothing below one sample");
        let kinds: Vec<Change> = micro.history.iter().map(|c| c.change).collect();
        assert_eq!(
            kinds,
            [
                Change::Start,
                Change::Shrink,
                Change::Grow,
                Change::Shrink,
                Change::Grow,
                Change::Grow
            ]
        );
    }

    #[test]
    fn grows_only_to_a_size_predicted_to_fit_and_holds_where_none_is() {
        // Sizes up to 45 fit: from 16, the first growth reaches 32, the next stops at 45.
        let asked = std::cell::Cell::new(0);
        let mut micro = MicroBatcher::new(16, 128, 1);
        let mut fits = |size: usize| {
            asked.set(asked.get() + 1);
            size <= 45
        };
        micro.finished(0, true, &mut fits);
        assert_eq!(micro.size(), 32);
        micro.finished(1, true, &mut fits);
        assert_eq!(micro.size(), 45, "the largest size predicted to fit");
        let asked_so_far = asked.get();
        for step in 2..10 {
            micro.finished(step, true, &mut fits);
        }
        assert_eq!(micro.size(), 45);
        assert_eq!(
            asked.get(),
            asked_so_far,
            "no size at the ceiling is asked again"
        );
        // Nothing above the start fits: the size holds, with no growth in the history.
        let mut held = MicroBatcher::new(62, 128, 1);
        for step in 0..5 {
            held.finished(step, true, &mut |size| size <= 62);
        }
        assert_eq!(held.size(), 62);
        assert_eq!(held.history.len(), 1);
        // A resumed run with a larger batch predicts again.
        held.set_max(256);
        held.finished(5, true, &mut |size| size <= 100);
        assert_eq!(held.size(), 100);
    }
}
