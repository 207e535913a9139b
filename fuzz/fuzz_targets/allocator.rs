//! Drives the allocator with arbitrary scenarios (a whole configuration, edges first, and a list
//! of actions) and checks it against the shadow model, construction included; `validate()` runs
//! after every operation (feature `validate`).
#![no_main]

use headroom_alloc::model::Scenario;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|scenario: Scenario| {
    if let Err(disagreement) = scenario.run() {
        panic!("{disagreement}\nscenario: {scenario:?}");
    }
});
