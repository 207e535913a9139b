//! Replays the committed fuzz corpus (`fuzz/corpus/allocator`) on stable Rust, exactly as the fuzz
//! target decodes it.

use std::path::Path;

use arbitrary::{Arbitrary, Unstructured};
use headroom_alloc::model::Scenario;

#[test]
fn every_corpus_input_agrees_with_the_shadow_model() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/allocator");
    let mut files: Vec<_> = std::fs::read_dir(&corpus)
        .unwrap_or_else(|err| panic!("{}: {err}", corpus.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "the corpus holds only {} inputs",
        files.len()
    );
    let mut actions = 0;
    for file in &files {
        let bytes = std::fs::read(file).unwrap();
        // libfuzzer-sys decodes with `arbitrary_take_rest`; so do we.
        let Ok(scenario) = Scenario::arbitrary_take_rest(Unstructured::new(&bytes)) else {
            continue;
        };
        match scenario.run() {
            // Count the actions applied, not those decoded: a configuration that cannot build an
            // allocator applies none.
            Ok(summary) => actions += summary.actions,
            Err(disagreement) => panic!("{}: {disagreement}", file.display()),
        }
    }
    println!("replayed {} corpus inputs, {actions} actions", files.len());
    assert!(actions > 100, "the corpus exercises only {actions} actions");
}
