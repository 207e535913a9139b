//! Callbacks around the training loop: they see every step, evaluation, recovered
//! out-of-memory and checkpoint, in order, and one may stop the run cleanly, after which a
//! resume goes on from where it stopped.

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};

use common::{TempDir, resume, small_config};
use headroom_alloc::OomCause;
use headroom_trainer::Trainer;
use headroom_trainer::callback::{Callback, Flow};
use headroom_trainer::data::Metric;
use headroom_trainer::run_dir::StepRecord;
use headroom_trainer::step::Oom;

/// Writes down every hook called, as `step 3`, `eval 2`, `oom 1`, `checkpoint 4`, and stops
/// after step `stop_after` when given.
struct Log {
    events: Arc<Mutex<Vec<String>>>,
    stop_after: Option<u64>,
}

impl Log {
    fn new(stop_after: Option<u64>) -> (Self, Arc<Mutex<Vec<String>>>) {
        let events = Arc::new(Mutex::new(Vec::new()));
        let log = Self {
            events: Arc::clone(&events),
            stop_after,
        };
        (log, events)
    }

    fn note(&self, event: String) {
        self.events.lock().unwrap().push(event);
    }
}

impl Callback for Log {
    fn after_step(&mut self, record: &StepRecord) -> Flow {
        self.note(format!("step {}", record.step));
        match self.stop_after {
            Some(step) if record.step == step => Flow::Stop,
            _ => Flow::Continue,
        }
    }

    fn after_evaluation(&mut self, step: u64, metric: Metric, value: f64) -> Flow {
        assert_eq!(metric, Metric::ExactMatch);
        assert!((0.0..=1.0).contains(&value));
        self.note(format!("eval {step}"));
        Flow::Continue
    }

    fn on_oom(&mut self, step: u64, oom: &Oom) -> Flow {
        assert_eq!(oom.report.cause, OomCause::Injected);
        self.note(format!("oom {step}"));
        Flow::Continue
    }

    fn on_checkpoint(&mut self, step: u64, path: &Path) -> Flow {
        assert!(path.is_file(), "{} is written", path.display());
        self.note(format!("checkpoint {step}"));
        Flow::Continue
    }
}

fn events(log: &Arc<Mutex<Vec<String>>>) -> Vec<String> {
    log.lock().unwrap().clone()
}

#[test]
fn callbacks_see_every_step_evaluation_and_checkpoint_in_order() {
    let dir = TempDir::new("callbacks-order");
    let mut config = small_config(&dir);
    config.steps = Some(4);
    config.eval_every = 2;
    config.checkpoint.every = 2;
    let mut trainer = Trainer::new(config).unwrap();
    let (first, first_log) = Log::new(None);
    let (second, second_log) = Log::new(None);
    trainer.add_callback(first);
    trainer.add_callback(second);
    trainer.run(false).unwrap();
    let expected = [
        "step 1",
        "eval 2",
        "step 2",
        "checkpoint 2",
        "step 3",
        "step 4",
        "eval 4",
        "checkpoint 4",
    ];
    assert_eq!(events(&first_log), expected);
    assert_eq!(
        events(&second_log),
        expected,
        "each callback sees each hook"
    );
}

#[test]
fn a_callback_stops_the_run_cleanly_and_a_resume_goes_on_from_there() {
    let dir = TempDir::new("callbacks-stop");
    let mut config = small_config(&dir);
    config.steps = Some(20);
    let mut trainer = Trainer::new(config.clone()).unwrap();
    let (stopper, stopped_log) = Log::new(Some(5));
    let (other, other_log) = Log::new(None);
    trainer.add_callback(stopper);
    trainer.add_callback(other);
    let summary = trainer.run(false).unwrap();
    assert_eq!(summary.steps, 5);
    assert_eq!(summary.stopped_at, Some(5));
    assert!(
        summary.metric.is_some(),
        "the metric is evaluated at the stop"
    );
    assert!(
        summary
            .to_string()
            .contains("stopped at step 5, as a signal or a callback asked")
    );
    let log = events(&stopped_log);
    assert_eq!(log[4..], ["step 5", "eval 5", "checkpoint 5"]);
    assert_eq!(
        events(&other_log),
        log,
        "the other callback still saw step 5"
    );
    let metrics =
        std::fs::read_to_string(dir.0.join(headroom_trainer::run_dir::METRICS_FILE)).unwrap();
    assert_eq!(metrics.lines().count(), 5);

    let resumed = resume(config).unwrap();
    assert_eq!(resumed.steps_done(), 5);
}

#[test]
fn a_recovered_out_of_memory_reaches_the_callbacks_with_its_report() {
    let dir = TempDir::new("callbacks-oom");
    let mut config = small_config(&dir);
    config.steps = Some(2);
    let mut trainer = Trainer::new(config).unwrap();
    let (log, events_of) = Log::new(None);
    trainer.add_callback(log);
    // The tenth allocation of the first step fails; the step goes on in smaller micro-batches.
    trainer.device().allocator().with(|a| a.inject_oom(10));
    let summary = trainer.run(false).unwrap();
    assert_eq!(summary.ooms_recovered, 1);
    assert_eq!(events(&events_of)[..2], ["oom 1", "step 1"]);
}
