//! Model-based test: random scenarios, each step checked against a shadow model and `validate()`.
//! The fuzz target runs the same `Scenario`.

use arbitrary::{Arbitrary, Unstructured};
use headroom_alloc::model::{Action, Scenario};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_scenarios_agree_with_the_shadow_model(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        let mut input = Unstructured::new(&bytes);
        if let Ok(scenario) = Scenario::arbitrary(&mut input)
            && let Err(disagreement) = scenario.run() {
                prop_assert!(false, "{disagreement}\nscenario: {scenario:?}");
            }
    }
}

/// A long deterministic scenario that must exercise every path: success, OOM, refused frees.
#[test]
fn a_long_scenario_exercises_every_outcome() {
    let mut actions = Vec::new();
    for i in 0..3000u32 {
        actions.push(match i % 7 {
            0..=2 => Action::Alloc {
                size: (i.wrapping_mul(2_654_435_761) >> 16) as u16,
                shift: (i % 9) as u8,
                tag: (i % 7) as u8,
            },
            3..=4 => Action::Free {
                index: (i * 31) as u16,
            },
            5 => Action::FreeInvalid { index: i as u16 },
            _ if i % 70 == 6 => Action::ReleaseCached,
            _ => Action::ResetPeak,
        });
    }
    for (growth, fail_reserve) in [(0, 0), (1, 0), (2, 0), (0, 3), (2, 5)] {
        let scenario = Scenario {
            limit_mib: 3,
            growth,
            no_garbage_collection: false,
            frag_shift: 12,
            fail_reserve,
            actions: actions.clone(),
        };
        let summary = scenario.run().unwrap_or_else(|err| panic!("{err}"));
        assert!(summary.allocs > 100, "{summary:?}");
        assert!(summary.ooms > 10, "{summary:?}");
        assert!(summary.frees > 100, "{summary:?}");
        assert!(summary.refused_frees > 100, "{summary:?}");
    }
}
