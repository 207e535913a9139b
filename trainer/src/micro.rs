//! The micro-batch size: halved on out-of-memory, doubled again after a run of clean steps
//! (never above the effective batch), waiting twice as long after each growth that failed.

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
            // A growth that did not fit: wait twice as long before the next try.
            self.wait = self.wait.saturating_mul(2);
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

    /// `step` completed (`clean` when no micro-batch of it ran out of memory); after enough
    /// clean steps, try twice the size.
    pub fn finished(&mut self, step: u64, clean: bool) {
        self.proven = self.proven.max(self.size);
        if !clean {
            return;
        }
        self.clean += 1;
        if self.clean >= self.wait && self.size < self.max {
            self.size = (self.size * 2).min(self.max);
            self.clean = 0;
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
        micro.finished(0, false);
        micro.finished(1, true);
        assert_eq!(micro.size(), 32);
        micro.finished(2, true);
        assert_eq!(micro.size(), 64, "doubled after 2 clean steps");
        assert!(micro.shrink(3, 64));
        assert_eq!(micro.size(), 32);
        for step in 4..7 {
            micro.finished(step, true);
            assert_eq!(micro.size(), 32, "waits 4 clean steps now");
        }
        micro.finished(7, true);
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
                Change::Grow
            ]
        );
    }
}
