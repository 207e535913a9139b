//! What a resumed run may change. Settings that decide the trajectory (the seed, the model,
//! the data, the optimizer, the precision) must stay as the checkpoint's run had them: a resume
//! that changes one is refused, naming it. Settings that only decide how long, how often or in
//! how much memory the run trains may change, and the log says what changed.

use crate::config::TrainConfig;
use crate::error::{Error, Result};

/// Settings a resumed run may change, by dotted name or section prefix.
const MAY_CHANGE: [&str; 14] = [
    "steps",
    "epochs",
    "run_dir",
    "device",
    "eval_every",
    "max_nonfinite_steps",
    "batch.",
    "memory.",
    "checkpoint.",
    "model.recompute",
    "data.prefetch",
    "precision.loss_scale",
    "optimizer.shard_state",
    "optimizer.in_backward",
];

/// Compares the configuration the checkpoint's run had with the one resuming it. Returns the
/// settings that changed and may (as `name: old -> new`), or the error listing those that may
/// not.
pub fn changes(saved: &TrainConfig, now: &TrainConfig) -> Result<Vec<String>> {
    let (saved, now) = (flatten(saved), flatten(now));
    let mut allowed = Vec::new();
    let mut refused = Vec::new();
    let names = saved.iter().chain(&now).map(|(name, _)| name.as_str());
    let mut names: Vec<&str> = names.collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        let value = |list: &[(String, String)]| {
            list.iter()
                .find(|(n, _)| n == name)
                .map_or_else(|| "unset".to_owned(), |(_, v)| v.clone())
        };
        let (old, new) = (value(&saved), value(&now));
        if old == new {
            continue;
        }
        let change = format!("{name}: {old} -> {new}");
        if MAY_CHANGE
            .iter()
            .any(|m| name == *m || (m.ends_with('.') && name.starts_with(m)))
        {
            allowed.push(change);
        } else {
            refused.push(format!(
                "--resume: {change}; the checkpoint's run was trained with {name} = {old}, and a \
                 resumed run must keep it (start a new run to change it)"
            ));
        }
    }
    if refused.is_empty() {
        Ok(allowed)
    } else {
        Err(Error::Config { problems: refused })
    }
}

/// Every setting of `config` as (dotted name, value as TOML writes it).
fn flatten(config: &TrainConfig) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Ok(toml::Value::Table(table)) = toml::Value::try_from(config) {
        walk("", &table, &mut out);
    }
    out
}

fn walk(prefix: &str, table: &toml::Table, out: &mut Vec<(String, String)>) {
    for (key, value) in table {
        let name = format!("{prefix}{key}");
        match value {
            toml::Value::Table(inner) => walk(&format!("{name}."), inner, out),
            other => out.push((name, other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trajectory_settings_are_refused_and_the_others_listed() {
        let saved = TrainConfig::default();
        let mut now = saved.clone();
        now.steps = Some(3000);
        now.batch.size = 64;
        now.memory.limit = Some(headroom_alloc::ByteSize::mib(48));
        now.checkpoint.every = 100;
        let allowed = changes(&saved, &now).unwrap();
        assert_eq!(
            allowed,
            [
                "batch.size: 128 -> 64",
                "checkpoint.every: 500 -> 100",
                "memory.limit: unset -> \"48MiB\"",
                "steps: unset -> 3000",
            ]
        );
        now.seed = 1;
        now.model.width = 64;
        now.precision.dtype = crate::config::PrecisionKind::Bf16;
        now.optimizer.lr = 1e-4;
        now.data.digits = 3;
        let err = changes(&saved, &now).unwrap_err().to_string();
        for name in [
            "seed",
            "model.width",
            "precision.dtype",
            "optimizer.lr",
            "data.digits",
        ] {
            assert!(err.contains(&format!("--resume: {name}:")), "{name}: {err}");
        }
        assert!(!err.contains("batch.size"), "{err}");
    }
}
