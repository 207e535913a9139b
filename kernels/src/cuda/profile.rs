//! An opt-in profile of a CUDA device's work, for finding where a training step's time goes:
//! with `HEADROOM_CUDA_PROFILE` set, every kernel launch, cuBLAS product and copy back to the
//! host is timed alone (the stream waited for before and after it), and the totals per kernel
//! are printed to standard error when the device goes. The waits slow a run down, so its
//! figures are for comparing parts of one run; the wall time of a step less the sum of its
//! parts is what the host adds.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use parking_lot::Mutex;

/// The variable that turns profiling on.
pub(crate) const VARIABLE: &str = "HEADROOM_CUDA_PROFILE";

/// Calls and time per name of work.
#[derive(Default)]
pub(crate) struct Profile {
    entries: Mutex<HashMap<String, (u64, Duration)>>,
}

impl Profile {
    /// A profile when the environment asks for one.
    pub(crate) fn from_env() -> Option<Self> {
        std::env::var_os(VARIABLE).map(|_| Self::default())
    }

    /// Counts one call of `name` that took `elapsed`.
    pub(crate) fn record(&self, name: String, elapsed: Duration) {
        let mut entries = self.entries.lock();
        let entry = entries.entry(name).or_default();
        entry.0 += 1;
        entry.1 += elapsed;
    }

    /// The totals, the longest first, each with its calls, time and share.
    pub(crate) fn table(&self) -> String {
        let entries = self.entries.lock();
        let mut rows: Vec<_> = entries.iter().collect();
        rows.sort_by_key(|(_, entry)| std::cmp::Reverse(entry.1));
        let total: Duration = rows.iter().map(|(_, e)| e.1).sum();
        let mut out = format!(
            "{VARIABLE}: {:.3} s of device work in {} calls\n",
            total.as_secs_f64(),
            rows.iter().map(|(_, e)| e.0).sum::<u64>()
        );
        for (name, (calls, busy)) in rows {
            let share = busy.as_secs_f64() / total.as_secs_f64().max(f64::MIN_POSITIVE);
            let _ = writeln!(
                out,
                "  {:>10.3} ms {:>5.1}% {calls:>8} calls {:>9.1} us each  {name}",
                busy.as_secs_f64() * 1e3,
                share * 100.0,
                busy.as_secs_f64() * 1e6 / *calls as f64,
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_adds_up_each_name_longest_first() {
        let profile = Profile::default();
        profile.record("gemm".into(), Duration::from_millis(3));
        profile.record("softmax".into(), Duration::from_millis(1));
        profile.record("gemm".into(), Duration::from_millis(3));
        let table = profile.table();
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[0].contains("0.007 s of device work in 3 calls"),
            "{table}"
        );
        assert!(
            lines[1].ends_with("gemm") && lines[1].contains("2 calls"),
            "{table}"
        );
        assert!(lines[1].contains("85.7%"), "{table}");
        assert!(lines[2].ends_with("softmax"), "{table}");
    }
}
