//! Model-based test: random scenarios, each step checked against a shadow model and `validate()`.
//! The fuzz target runs the same `Scenario`.

use arbitrary::{Arbitrary, Unstructured};
use headroom_alloc::model::{Action, Scenario};
use headroom_alloc::{AllocatorConfig, GRANULE, Growth};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The configuration is drawn from `setup` as the fuzz target draws it, and each action from
    /// its own 8 bytes (uniform bytes would end the fuzz target's action list after about one
    /// action, where a fuzzer learns to go on).
    #[test]
    fn random_scenarios_agree_with_the_shadow_model(
        setup in prop::collection::vec(any::<u8>(), 0..32),
        actions in prop::collection::vec(prop::collection::vec(any::<u8>(), 8), 0..400),
    ) {
        if let Ok(mut scenario) = Scenario::arbitrary_take_rest(Unstructured::new(&setup)) {
            scenario.actions.extend(
                actions
                    .iter()
                    .filter_map(|bytes| Action::arbitrary(&mut Unstructured::new(bytes)).ok()),
            );
            if let Err(disagreement) = scenario.run() {
                prop_assert!(false, "{disagreement}\nscenario: {scenario:?}");
            }
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
    // The configuration the scenario had when it was drawn from five small integers: a 4 MiB
    // limit over a 4 MiB source, a 1 MiB internal-fragmentation cap, 64 events of history.
    let config = AllocatorConfig::default()
        .with_limit_bytes(4 << 20)
        .with_max_internal_fragmentation(1 << 20)
        .with_history(64);
    let run = |config: AllocatorConfig, fail_reserve: u8, growth_step: Option<u64>| {
        let scenario = Scenario {
            capacity: 4 << 20,
            config,
            fail_reserve,
            growth_step,
            streams: false,
            actions: actions.clone(),
        };
        scenario.run().unwrap_or_else(|err| panic!("{err}"))
    };
    use Growth::{Expandable, OnDemand, Preallocate};
    for (growth, fail_reserve) in [
        (OnDemand, 0),
        (Preallocate, 0),
        (Expandable, 0),
        (OnDemand, 3),
        (Expandable, 5),
    ] {
        for (slack, growth_step) in [
            (1 << 20, Some(2 << 20)),
            (0, Some(2 << 20)),
            (1 << 20, None),
            (0, Some(GRANULE)),
        ] {
            let config = config
                .clone()
                .with_growth(growth)
                .with_max_internal_fragmentation(slack);
            let summary = run(config, fail_reserve, growth_step);
            assert!(summary.allocs > 100, "{summary:?}");
            assert!(summary.ooms > 10, "{summary:?}");
            assert!(summary.frees > 100, "{summary:?}");
            assert!(summary.refused_frees > 100, "{summary:?}");
        }
        // A one-granule limit: every request above 256 bytes exceeds it, the few below fit one
        // at a time.
        let tiny = config.clone().with_growth(growth).with_limit_bytes(GRANULE);
        for slack in [0, GRANULE] {
            let summary = run(
                tiny.clone().with_max_internal_fragmentation(slack),
                fail_reserve,
                Some(2 << 20),
            );
            assert_eq!(summary.actions, 3000, "{summary:?}");
            assert!(summary.ooms > 1000, "{summary:?}");
            assert!(summary.refused_frees > 100, "{summary:?}");
        }
    }
}

/// Three streams, their work run now and then: no block freed on one stream reaches another
/// before the work queued on it has run, and blocks held for streams count as in use.
#[test]
fn a_long_scenario_on_three_streams_never_hands_a_busy_block_to_another_stream() {
    let mut actions = Vec::new();
    for i in 0..3000u32 {
        actions.push(match i % 9 {
            0..=3 => Action::AllocOn {
                size: (i.wrapping_mul(2_654_435_761) >> 20) as u16,
                shift: (i % 7) as u8,
                tag: (i % 7) as u8,
                stream: (i / 9 % 3) as u8 + (i % 2) as u8,
            },
            4..=6 => Action::Free {
                index: (i * 31) as u16,
            },
            7 if i % 27 == 7 => Action::RunStream {
                stream: (i / 27) as u8,
            },
            7 => Action::FreeInvalid { index: i as u16 },
            _ if i % 90 == 8 => Action::ReleaseCached,
            _ => Action::AllocAgain {
                index: i as u16,
                tag: 1,
            },
        });
    }
    for (growth, slack) in [
        (Growth::OnDemand, 1 << 20),
        (Growth::OnDemand, 0),
        (Growth::Preallocate, 1 << 20),
    ] {
        let scenario = Scenario {
            capacity: 4 << 20,
            config: AllocatorConfig::default()
                .with_limit_bytes(4 << 20)
                .with_growth(growth)
                .with_max_internal_fragmentation(slack)
                .with_history(64),
            fail_reserve: 0,
            growth_step: Some(GRANULE),
            streams: true,
            actions: actions.clone(),
        };
        let summary = scenario.run().unwrap_or_else(|err| panic!("{err}"));
        assert!(summary.allocs > 500, "{summary:?}");
        assert!(summary.ooms > 10, "{summary:?}");
        assert!(summary.frees > 500, "{summary:?}");
    }
}
