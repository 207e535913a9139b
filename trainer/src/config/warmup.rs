//! `optimizer.warmup`: how long the learning rate warms up, in steps or as a share of the run.

use serde::{Deserialize, Serialize};

/// The warmup's share of the run when the configuration sets none: 3%, the `warmup_ratio` of
/// the Alpaca and QLoRA fine-tuning recipes for transformers' `Trainer` (45 steps of the
/// default 1500), so that a short fine-tune is not all warmup.
pub const DEFAULT_WARMUP: Warmup = Warmup::Fraction(0.03);

/// The steps of linear warmup: a number (`warmup = 50`, an integer) or a fraction of the run's
/// steps (`warmup = 0.03`, a number with a point), rounded up as transformers rounds its
/// `warmup_ratio`, so that any fraction above 0 warms up for at least one step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Warmup {
    /// This many steps (at most the run's).
    Steps(u64),
    /// This fraction of the run's steps, in `[0, 1]`.
    Fraction(f64),
}

impl Default for Warmup {
    fn default() -> Self {
        DEFAULT_WARMUP
    }
}

impl Warmup {
    /// The steps of warmup in a run of `total` steps.
    pub fn steps(self, total: u64) -> u64 {
        match self {
            Self::Steps(steps) => steps.min(total),
            Self::Fraction(fraction) => {
                let steps = (fraction.clamp(0.0, 1.0) * total as f64).ceil() as u64;
                steps.min(total)
            }
        }
    }

    /// What is wrong with it, if anything (a fraction outside `[0, 1]`).
    pub fn problem(self) -> Option<String> {
        match self {
            Self::Fraction(fraction) if !(0.0..=1.0).contains(&fraction) => Some(format!(
                "optimizer.warmup: {fraction} is neither a number of steps (an integer) nor a \
                 fraction of the run in [0, 1]"
            )),
            _ => None,
        }
    }
}

impl std::str::FromStr for Warmup {
    type Err = String;

    /// `50` is steps, `0.03` a fraction of the run.
    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Ok(steps) = text.parse::<u64>() {
            return Ok(Self::Steps(steps));
        }
        match text.parse::<f64>() {
            Ok(fraction) => {
                let warmup = Self::Fraction(fraction);
                warmup.problem().map_or(Ok(warmup), Err)
            }
            Err(_) => Err(format!(
                "optimizer.warmup: `{text}` is neither a number of steps (50) nor a fraction of \
                 the run (0.03)"
            )),
        }
    }
}

impl std::fmt::Display for Warmup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Steps(steps) => write!(f, "{steps} steps"),
            Self::Fraction(fraction) => write!(f, "{fraction} of the run"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fraction_rounds_up_to_whole_steps_and_steps_stop_at_the_run() {
        assert_eq!(DEFAULT_WARMUP.steps(3), 1);
        assert_eq!(DEFAULT_WARMUP.steps(1500), 45);
        assert_eq!(DEFAULT_WARMUP.steps(0), 0);
        assert_eq!(Warmup::Fraction(0.0).steps(100), 0);
        assert_eq!(Warmup::Fraction(1.0).steps(7), 7);
        assert_eq!(Warmup::Steps(50).steps(3), 3);
        assert_eq!(Warmup::Steps(50).steps(500), 50);
    }

    #[test]
    fn integers_are_steps_and_numbers_with_a_point_fractions() {
        assert_eq!("50".parse(), Ok(Warmup::Steps(50)));
        assert_eq!("0.1".parse(), Ok(Warmup::Fraction(0.1)));
        assert_eq!("1.0".parse(), Ok(Warmup::Fraction(1.0)));
        for bad in ["1.5", "-1", "ten"] {
            let err = bad.parse::<Warmup>().unwrap_err();
            assert!(err.starts_with("optimizer.warmup:"), "{bad}: {err}");
        }
        #[derive(Deserialize, Serialize)]
        struct Written {
            warmup: Warmup,
        }
        for (text, warmup) in [
            ("warmup = 50", Warmup::Steps(50)),
            ("warmup = 0.05", Warmup::Fraction(0.05)),
            ("warmup = 1.0", Warmup::Fraction(1.0)),
        ] {
            let read: Written = toml::from_str(text).unwrap();
            assert_eq!(read.warmup, warmup, "{text}");
            let again: Written = toml::from_str(&toml::to_string(&read).unwrap()).unwrap();
            assert_eq!(again.warmup, warmup, "{text} written and read again");
        }
    }
}
