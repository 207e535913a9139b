//! Configuration: TOML with defaults, flags over the file, validation up front.

mod common;

use common::{TempDir, small_config, weights};
use headroom_alloc::Growth;
use headroom_trainer::Trainer;
use headroom_trainer::config::{
    DataKind, ModelKind, Overrides, PrecisionKind, Recompute, TrainConfig, Warmup,
};

#[test]
fn a_file_sets_what_it_names_and_flags_override_it() {
    let text = "seed = 7\nsteps = 20\n[batch]\nsize = 64\n[memory]\nlimit = \"32MiB\"\n";
    let mut config: TrainConfig = toml::from_str(text).unwrap();
    assert_eq!(
        (config.seed, config.steps, config.batch.size),
        (7, Some(20), 64)
    );
    assert_eq!(
        config.model,
        TrainConfig::default().model,
        "the rest keeps its defaults"
    );
    let flags = Overrides {
        batch_size: Some(32),
        precision: Some(PrecisionKind::Bf16),
        memory_fraction: Some(0.5),
        epochs: Some(2),
        ..Overrides::default()
    };
    flags.apply(&mut config);
    assert_eq!(config.batch.size, 32);
    assert_eq!(config.precision.dtype, PrecisionKind::Bf16);
    assert_eq!((config.steps, config.epochs), (None, Some(2)));
    assert_eq!(
        (config.memory.limit.as_ref(), config.memory.fraction),
        (None, Some(0.5))
    );
    config.validate().unwrap();
    let budget = config.memory.budget(None).unwrap();
    assert_eq!(budget.limit, 4 << 30, "half of the default 8 GiB device");
    let round_trip: TrainConfig = toml::from_str(&config.to_toml()).unwrap();
    assert_eq!(round_trip, config);
}

#[test]
fn validation_lists_every_problem_by_setting() {
    let mut config = TrainConfig::default();
    config.batch.size = 4;
    config.batch.micro = Some(8);
    config.model.dropout = 1.5;
    config.precision.dtype = PrecisionKind::F16;
    config.precision.backoff_factor = 2.0;
    config.memory.fraction = Some(0.5);
    config.memory.limit = Some(headroom_alloc::ByteSize::gib(1));
    config.steps = Some(10);
    config.epochs = Some(1);
    let err = config.validate().unwrap_err().to_string();
    for setting in [
        "batch.micro",
        "model.dropout",
        "precision",
        "memory: give a limit or a fraction",
        "`steps` or `epochs`",
    ] {
        assert!(err.contains(setting), "`{setting}` not in {err}");
    }
}

#[test]
fn expandable_segments_need_a_gpu_and_exclude_preallocation() {
    let mut config = TrainConfig::default();
    config.memory.expandable_segments = true;
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("memory.expandable_segments"), "{err}");
    config.device = "cuda:1".into();
    config.validate().unwrap();
    let budget = config.memory.budget_on(1 << 30).unwrap();
    assert_eq!(budget.growth, Growth::Expandable);
    config.memory.preallocate = true;
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("choose one"), "{err}");

    // A flag picks one policy over the file's.
    let text = "device = \"cuda\"\n[memory]\nexpandable_segments = true\n";
    let mut config: TrainConfig = toml::from_str(text).unwrap();
    let preallocate = Overrides {
        preallocate: true,
        ..Overrides::default()
    };
    preallocate.apply(&mut config);
    assert!(config.memory.preallocate && !config.memory.expandable_segments);
    let expandable = Overrides {
        expandable_segments: true,
        ..Overrides::default()
    };
    expandable.apply(&mut config);
    assert!(!config.memory.preallocate && config.memory.expandable_segments);
    let on_demand = Overrides {
        allow_growth: true,
        ..Overrides::default()
    };
    on_demand.apply(&mut config);
    assert_eq!(config.memory.budget(None).unwrap().growth, Growth::OnDemand);
}

#[test]
fn recomputation_is_a_gpt_setting_from_the_file_or_the_flag() {
    let mut config: TrainConfig = toml::from_str("[model]\nrecompute = true\n").unwrap();
    assert_eq!(config.model.recompute, Some(Recompute::Blocks));
    let cheap: TrainConfig = toml::from_str("[model]\nrecompute = \"cheap\"\n").unwrap();
    assert_eq!(cheap.model.recompute, Some(Recompute::Cheap));
    assert!(toml::from_str::<TrainConfig>("[model]\nrecompute = \"most\"\n").is_err());
    config.validate().unwrap();
    let mut flagged = TrainConfig::default();
    let recompute = Overrides {
        recompute: Some(Recompute::Blocks),
        ..Overrides::default()
    };
    recompute.apply(&mut flagged);
    assert_eq!(flagged.model, config.model);
    // An MLP has no blocks to run again.
    config.model.kind = ModelKind::Mlp;
    config.data.kind = DataKind::Csv;
    config.data.path = Some("points.csv".into());
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("model.recompute"), "{err}");
}

#[test]
fn the_old_name_of_the_device_capacity_still_reads() {
    let path = std::env::temp_dir().join(format!("headroom-old-key-{}.toml", std::process::id()));
    std::fs::write(&path, "[memory]\ndevice = \"1GiB\"\nfraction = 0.5\n").unwrap();
    let config = TrainConfig::from_toml_file(&path).unwrap();
    let budget = config.memory.budget(None).unwrap();
    assert_eq!((budget.capacity, budget.limit), (1 << 30, 1 << 29));
    assert!(
        config.to_toml().contains("capacity = \"1GiB\""),
        "written under its new name"
    );
    std::fs::write(&path, "[memory]\ndevice = \"1GiB\"\ncapacity = \"2GiB\"\n").unwrap();
    let both = TrainConfig::from_toml_file(&path).unwrap();
    let err = both.validate().unwrap_err().to_string();
    assert!(err.contains("old name of memory.capacity"), "{err}");
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_preset_sets_the_shape_and_the_file_and_flags_win_over_it() {
    use headroom_trainer::config::Preset;
    let file = TrainConfig::from_toml_over("[model]\npreset = \"gpt2-medium\"\nlayers = 2\n", None)
        .unwrap();
    let m = &file.model;
    assert_eq!(
        (m.width, m.heads, m.layers, m.tie_embeddings),
        (1024, 16, 2, true)
    );
    // A preset given from outside goes under the file.
    let under = TrainConfig::from_toml_over(
        "[model]\nwidth = 96\n",
        Some(Preset::named("gpt2").unwrap()),
    )
    .unwrap();
    let m = &under.model;
    assert_eq!((m.width, m.heads, m.layers), (96, 12, 12));
    assert_eq!(m.preset, Some(Preset::named("gpt2").unwrap()));
    // The flags over both.
    let flags = Overrides {
        preset: Some(Preset::named("gpt2-xl").unwrap()),
        context: Some(128),
        ..Overrides::default()
    };
    let config = flags.configure(None).unwrap();
    let m = &config.model;
    assert_eq!(
        (m.width, m.heads, m.layers, m.context),
        (1600, 25, 48, Some(128))
    );
    assert_eq!(Preset::named("gpt2-large").unwrap().shape().layers, 36);
    // Written out and read back, a preset's run keeps its shape.
    let back = TrainConfig::from_toml_over(&config.to_toml(), None).unwrap();
    assert_eq!(back, config);
}

#[test]
fn a_run_without_a_limit_may_use_the_whole_device_but_the_addition_task_keeps_its_own() {
    let addition = TrainConfig::default();
    let budget = headroom_trainer::planning::run_device::budget(&addition).unwrap();
    assert_eq!(budget.limit, 24 << 20, "the default task's tight limit");
    let mut tokens = TrainConfig::default();
    tokens.data.kind = DataKind::UniformTokens;
    let budget = headroom_trainer::planning::run_device::budget(&tokens).unwrap();
    assert_eq!(
        (budget.capacity, budget.limit),
        (8 << 30, 8 << 30),
        "the simulated device's whole memory"
    );
    let (planned, _, _) = headroom_trainer::planning::run_device::planning(&tokens).unwrap();
    assert_eq!(planned.limit, 8 << 30);
    // A limit the user names wins over either default.
    tokens.memory.limit = Some(headroom_alloc::ByteSize::gib(1));
    assert_eq!(
        headroom_trainer::planning::run_device::budget(&tokens)
            .unwrap()
            .limit,
        1 << 30
    );
}

#[test]
fn a_size_may_be_written_as_a_whole_number_of_bytes() {
    let text = "[memory]\nlimit = 25165824\ncapacity = 1073741824\n";
    let config: TrainConfig = toml::from_str(text).unwrap();
    config.validate().unwrap();
    let budget = config.memory.budget(None).unwrap();
    assert_eq!((budget.capacity, budget.limit), (1 << 30, 24 << 20));
    let round_trip: TrainConfig = toml::from_str(&config.to_toml()).unwrap();
    assert_eq!(round_trip, config);
    assert!(toml::from_str::<TrainConfig>("[memory]\nlimit = -1\n").is_err());
}

#[test]
fn a_size_a_run_writes_to_its_config_file_reads_back_as_the_user_wrote_it() {
    let dir = TempDir::new("size-as-written");
    let mut config = small_config(&dir);
    config.steps = Some(1);
    config.memory.limit = Some("24MiB".parse().unwrap());
    Trainer::new(config).unwrap().run(false).unwrap();
    let written = std::fs::read_to_string(dir.0.join("config.toml")).unwrap();
    assert!(written.contains("limit = \"24MiB\""), "{written}");
    let back = TrainConfig::from_toml_file(&dir.0.join("config.toml")).unwrap();
    let limit = back.memory.limit.unwrap();
    assert_eq!((limit.as_str(), limit.bytes()), ("24MiB", 24 << 20));
    let err = toml::from_str::<TrainConfig>("[memory]\nlimit = \"lots\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("limit") && err.contains("lots"), "{err}");
}

#[test]
fn messages_name_settings_as_they_are_written_not_as_rust_prints_them() {
    let mut config = TrainConfig::default();
    config.memory.limit = Some(1.into());
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("1 B of a 8.00 GiB device"), "{err}");
    config.memory.limit = None;
    config.memory.fraction = Some(1e-9);
    let err = config.validate().unwrap_err().to_string();
    assert!(
        err.contains("a fraction 0.000000001 of the capacity"),
        "{err}"
    );
    config.memory.fraction = None;
    config.model.kind = ModelKind::Mlp;
    config.data.kind = DataKind::TokenShards;
    config.optimizer.kind = headroom_trainer::config::OptimizerKind::Sgd;
    config.optimizer.state = Some(headroom_trainer::config::StateKind::Bf16);
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("not token-shards"), "{err}");
    assert!(err.contains("bf16 state is AdamW's"), "{err}");
    for debug in ["Bytes(", "Fraction(", "TokenShards", "Bf16", "Some("] {
        assert!(!err.contains(debug), "`{debug}` in {err}");
    }
}

#[test]
fn a_zero_learning_rate_is_a_sanity_run_that_leaves_the_weights_as_they_are() {
    let dir = TempDir::new("zero-lr");
    let mut config = small_config(&dir);
    config.optimizer.lr = 0.0;
    config.optimizer.weight_decay = 0.1;
    config.validate().unwrap();
    let mut trainer = Trainer::new(config.clone()).unwrap();
    let before = weights(&trainer);
    for _ in 0..2 {
        let record = trainer.train_step().unwrap();
        assert!(record.loss.is_finite(), "{}", record.loss);
    }
    assert!(weights(&trainer) == before, "lr = 0 changed the weights");

    for lr in [-1e-3, f64::NAN, f64::INFINITY] {
        config.optimizer.lr = lr;
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("optimizer.lr"), "{lr}: {err}");
    }
}

#[test]
fn a_short_run_warms_up_for_a_share_of_its_steps_not_all_of_them() {
    let dir = TempDir::new("short-warmup");
    let mut config = small_config(&dir);
    assert_eq!(config.steps, Some(3));
    config.optimizer.lr = 1e-4;
    Trainer::new(config.clone()).unwrap().run(false).unwrap();
    let rates: Vec<f64> = headroom_trainer::run_dir::read_all(&dir.0)
        .unwrap()
        .iter()
        .map(|record| record.lr)
        .collect();
    // 3% of three steps, rounded up: one step of warmup, then the cosine down from the peak.
    assert_eq!(rates[..2], [1e-4, 1e-4], "{rates:?}");
    assert!(rates[2] < 1e-4 && rates[2] > 1e-5, "{rates:?}");

    // A number of steps, as runs saved theirs, still reads and warms up over those steps.
    let saved = config.to_toml();
    assert!(saved.contains("warmup = 0.03"), "{saved}");
    let mut written: TrainConfig =
        toml::from_str(&saved.replace("warmup = 0.03", "warmup = 50")).unwrap();
    assert_eq!(written.optimizer.warmup, Warmup::Steps(50));
    written.steps = Some(3);
    std::fs::remove_dir_all(&dir.0).unwrap();
    Trainer::new(written).unwrap().run(false).unwrap();
    let rates: Vec<f64> = headroom_trainer::run_dir::read_all(&dir.0)
        .unwrap()
        .iter()
        .map(|record| record.lr)
        .collect();
    let warmed: Vec<f64> = [1.0 / 3.0, 2.0 / 3.0, 1.0]
        .iter()
        .map(|f| f * 1e-4)
        .collect();
    for (rate, want) in rates.iter().zip(&warmed) {
        assert!((rate - want).abs() < 1e-12, "{rates:?}");
    }
}

#[test]
fn sharded_parameters_refuse_what_they_do_not_compose_with_yet() {
    let mut config = TrainConfig::default();
    config.optimizer.shard_params = Some(true);
    config.optimizer.shard_state = true;
    config.optimizer.in_backward = Some(true);
    config.optimizer.clip = 0.0;
    config.optimizer.state = Some(headroom_trainer::config::StateKind::Int8);
    config.model.offload_weights = Some(true);
    let err = config.validate().unwrap_err().to_string();
    for setting in [
        "it keeps each rank's share of the state already",
        "not with optimizer.in_backward",
        "(model.offload_weights) are not sharded",
    ] {
        assert!(err.contains(setting), "`{setting}` not in {err}");
    }
    assert!(
        !err.contains("int8"),
        "int8 state is sharded with the chunks: {err}"
    );

    // `distributed.shard` names ZeRO's stage and sets the optimizer's settings for it; settings
    // that say another stage are refused, naming both.
    for (level, field) in [
        ("state", "shard_state = true"),
        ("grads", "shard_grads = true"),
        ("params", "shard_params = true"),
    ] {
        let text = format!("[distributed]\nshard = \"{level}\"\n");
        let read = TrainConfig::from_toml_over(&text, None).unwrap();
        assert!(
            read.to_toml().contains(field),
            "{level}: {}",
            read.to_toml()
        );
        read.validate().unwrap();
    }
    let text = "[distributed]\nshard = \"state\"\n[optimizer]\nshard_params = true\n";
    let err = TrainConfig::from_toml_over(text, None)
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("distributed.shard = \"state\", where the optimizer's settings shard params"),
        "{err}"
    );
    let mut kept = TrainConfig::default();
    kept.optimizer.shard_grads = true;
    kept.optimizer.shard_params = Some(false);
    let err = kept.validate().unwrap_err().to_string();
    assert!(err.contains("turn shard_params = false off"), "{err}");

    // Every rank runs its passes in step: three ranks cannot share a batch of 128 evenly.
    let mut config = TrainConfig::default();
    config.optimizer.shard_params = Some(true);
    let launch = headroom_trainer::data_parallel::Launch { rank: 0, size: 3 };
    let err = launch.prepare(config.clone()).unwrap_err().to_string();
    assert!(
        err.contains("128 samples do not divide among 3 ranks"),
        "{err}"
    );

    // The built-in MLP has no sharded passes.
    let dir = TempDir::new("zero3-mlp");
    let mut mlp = small_config(&dir);
    let rows: String = (0..32)
        .map(|i| format!("{}.5,{}.25,{}\n", i % 5, i % 3, i % 2))
        .collect();
    std::fs::write(dir.0.join("points.csv"), rows).unwrap();
    mlp.model.kind = ModelKind::Mlp;
    mlp.data.kind = DataKind::Csv;
    mlp.data.path = Some(dir.0.join("points.csv"));
    mlp.optimizer.shard_params = Some(true);
    let err = Trainer::new(mlp).err().expect("refused").to_string();
    assert!(err.contains("the built-in MLP is not sharded"), "{err}");
}
