//! What the collectives' tests share.
#![allow(dead_code)]

use headroom_collectives::Error;

/// Asserts that `err` refuses the arguments of collective `op`.
pub fn assert_refused(err: &Error, op: &str) {
    assert!(
        matches!(err, Error::Argument { op: refused, .. } if *refused == op),
        "{err}"
    );
}
