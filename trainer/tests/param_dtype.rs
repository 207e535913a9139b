//! `model.param_dtype = "bf16"`: a GPT's weights kept in bf16, checked against the rest of the
//! configuration, planned exactly, and resumed bit for bit.

mod common;

use common::{TempDir, resume, small_config, weights};
use headroom_kernels::DType;
use headroom_trainer::Trainer;
use headroom_trainer::config::{
    DataKind, ModelKind, Overrides, ParamDtype, PolicyKind, PrecisionKind, TrainConfig,
};

#[test]
fn bf16_parameters_are_a_choice_of_the_file_or_a_flag_refused_where_they_cannot_apply() {
    let config: TrainConfig = toml::from_str("[model]\nparam_dtype = \"bf16\"\n").unwrap();
    assert_eq!(config.model.param_dtype, ParamDtype::Bf16);
    config.validate().unwrap();
    assert!(toml::from_str::<TrainConfig>("[model]\nparam_dtype = \"f16\"\n").is_err());
    let mut flagged = TrainConfig::default();
    assert_eq!(flagged.model.param_dtype, ParamDtype::F32, "f32 by default");
    Overrides {
        param_dtype: Some(ParamDtype::Bf16),
        ..Overrides::default()
    }
    .apply(&mut flagged);
    assert_eq!(flagged.model, config.model);
    let mut f16 = config.clone();
    f16.precision.dtype = PrecisionKind::F16;
    let err = f16.validate().unwrap_err().to_string();
    assert!(
        err.contains("model.param_dtype") && err.contains("f16"),
        "{err}"
    );
    let mut mlp = config;
    mlp.model.kind = ModelKind::Mlp;
    mlp.data.kind = DataKind::Csv;
    mlp.data.path = Some("points.csv".into());
    let err = mlp.validate().unwrap_err().to_string();
    assert!(
        err.contains("model.param_dtype") && err.contains("MLP"),
        "{err}"
    );
}

/// The small GPT with bf16 parameters.
fn bf16_config(dir: &TempDir) -> TrainConfig {
    let mut config = small_config(dir);
    config.model.param_dtype = ParamDtype::Bf16;
    config
}

#[test]
fn a_bf16_run_is_planned_exactly_with_and_without_the_update_in_the_backward_pass() {
    let dir = TempDir::new("param-dtype-plan");
    for (in_backward, precision) in [
        (false, PrecisionKind::F32),
        (true, PrecisionKind::F32),
        (false, PrecisionKind::Bf16),
    ] {
        let mut config = bf16_config(&dir);
        config.precision.dtype = precision;
        config.batch.micro = None;
        config.model.width = 64;
        config.model.layers = 2;
        config.optimizer.clip = 0.0;
        config.optimizer.in_backward = Some(in_backward);
        let mut trainer = Trainer::builder()
            .config(config)
            .overwrite()
            .build()
            .unwrap();
        let dtypes: Vec<DType> = trainer
            .model()
            .module()
            .parameters()
            .iter()
            .map(|p| p.dtype())
            .collect();
        assert!(dtypes.iter().all(|&d| d == DType::BF16), "{dtypes:?}");
        let plan = trainer.plan().unwrap().clone();
        let loss = trainer.train_step().unwrap().loss;
        assert!(loss.is_finite(), "a loss of {loss}");
        let measured = trainer.device().allocator().stats().peak_in_use;
        assert_eq!(
            measured, plan.predicted_peak,
            "in backward {in_backward}, precision {precision:?}: {plan}"
        );
    }
}

#[test]
fn a_resumed_bf16_run_continues_the_same_trajectory_bit_for_bit() {
    let dir = TempDir::new("param-dtype-resume");
    let mut config = bf16_config(&dir);
    config.steps = Some(8);
    let mut stopped = Trainer::new(config.clone()).unwrap();
    let first = weights(&stopped);
    for _ in 0..4 {
        stopped.train_step().unwrap();
    }
    assert!(weights(&stopped) != first, "the steps moved no weight");
    stopped.save_checkpoint().unwrap();
    drop(stopped);
    let mut resumed = resume(config.clone()).unwrap();
    assert_eq!(resumed.steps_done(), 4);
    for _ in 4..8 {
        resumed.train_step().unwrap();
    }
    let straight_dir = TempDir::new("param-dtype-straight");
    config.run_dir = Some(straight_dir.0.clone());
    let mut straight = Trainer::new(config).unwrap();
    for _ in 0..8 {
        straight.train_step().unwrap();
    }
    assert!(
        weights(&resumed) == weights(&straight),
        "the weights differ"
    );
}

#[test]
fn when_only_bf16_parameters_would_hold_the_training_state_the_plan_suggests_them() {
    use headroom_trainer::data::Task;
    use headroom_trainer::planning::{advise, plan, run_device};
    let dir = TempDir::new("param-dtype-diagnosis");
    let mut config = small_config(&dir);
    config.memory.policy = PolicyKind::Manual;
    let roomy = Trainer::new(config.clone()).unwrap();
    let params: usize = roomy
        .model()
        .module()
        .parameters()
        .iter()
        .map(|p| p.numel())
        .sum();
    drop(roomy);
    // What `headroom plan` says of a run that fits nothing.
    let advice = |config: &TrainConfig| -> String {
        let task = Task::from_config(&config.data, &config.model, config.seed).unwrap();
        let (budget, target, _) = run_device::planning(config).unwrap();
        let err = plan(config, &task, &budget, target).unwrap_err();
        advise(config, &task, &budget, target, err)
            .unwrap()
            .to_string()
    };
    // f32 AdamW: 16 bytes a parameter (weight, gradient, two moments), which leave one
    // sample's activations no room under the planner's margin; bf16: 8, which do. The run
    // points to the plan, which plans bf16 parameters and suggests them.
    config.batch.micro = None;
    config.memory.limit = Some((16 * params as u64).into());
    let err = Trainer::builder()
        .config(config.clone())
        .overwrite()
        .build()
        .err()
        .unwrap();
    assert!(err.to_string().contains("`headroom plan`"), "{err}");
    let text = advice(&config);
    assert!(
        text.contains("suggestion: --param-dtype bf16 (model.param_dtype = \"bf16\")"),
        "{text}"
    );
    // So far over that bf16 would not fit either: not suggested.
    config.memory.limit = Some((6 * params as u64).into());
    let text = advice(&config);
    assert!(!text.contains("suggestion: --param-dtype"), "{text}");
}
