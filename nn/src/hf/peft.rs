//! PEFT's LoRA adapter directories, as `PeftModel.save_pretrained` writes them and
//! `PeftModel.from_pretrained(base, DIR)` reads them: `adapter_config.json` (`peft_type`
//! `LORA`, `r`, `lora_alpha`, `lora_dropout`, `use_rslora`, `target_modules`, the base's
//! `base_model_name_or_path`) and `adapter_model.safetensors`, whose tensors are named
//! `base_model.model.{module}.lora_A.weight` and `lora_B.weight` after transformers' module
//! paths (`model.layers.0.self_attn.q_proj`), `A` of `[r, in]` and `B` of `[out, r]`.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use headroom_alloc::Tag;
use headroom_autograd::Tensor;
use headroom_kernels::{Array, DType, DeviceKind};
use serde_json::{Value, json};

use crate::decoder::Gpt;
use crate::error::{Error, Result};
use crate::hf::safetensors_file;
use crate::hf::safetensors_file::float_dtype;
use crate::init::Initializer;
use crate::lora::{Attached, LoraConfig, LoraTargets, attach};
use crate::module::Module;

/// The adapter's configuration file.
pub const ADAPTER_CONFIG: &str = "adapter_config.json";
/// The adapter's weights.
pub const ADAPTER_WEIGHTS: &str = "adapter_model.safetensors";
/// What PEFT puts before a module's path in the weights' names.
const KEY_PREFIX: &str = "base_model.model.";

/// An adapter directory's configuration, as far as Headroom's adapters can follow it.
#[derive(Debug, Clone, PartialEq)]
pub struct PeftAdapter {
    /// Rank, alpha, dropout, rsLoRA and the targeted modules.
    pub lora: LoraConfig,
    /// `base_model_name_or_path`: the base model's directory (or Hub name) as written.
    pub base: Option<String>,
}

impl PeftAdapter {
    /// True when `dir` holds an adapter's configuration.
    pub fn is_adapter_dir(dir: &Path) -> bool {
        dir.join(ADAPTER_CONFIG).is_file()
    }

    /// Reads `dir/adapter_config.json`. A LoRA that Headroom's adapters do not follow (DoRA,
    /// bias training, modules saved whole, per-module ranks, a regular expression of
    /// targets) is an error naming the field.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(ADAPTER_CONFIG);
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        let bad = |key: &str, detail: String| Error::Checkpoint {
            path: path.clone(),
            key: key.to_owned(),
            detail,
        };
        let value: Value = serde_json::from_str(&text)
            .map_err(|err| bad("adapter_config.json", err.to_string()))?;
        let field = |key: &str| value.get(key).filter(|v| !v.is_null());
        match field("peft_type").and_then(Value::as_str) {
            Some("LORA") => {}
            other => return Err(bad("peft_type", format!("{other:?}: only LORA is read"))),
        }
        for (key, unsupported) in [
            (
                "use_dora",
                field("use_dora").and_then(Value::as_bool) == Some(true),
            ),
            ("bias", field("bias").is_some_and(|b| b != "none")),
            (
                "modules_to_save",
                field("modules_to_save").is_some_and(|m| m != &json!([])),
            ),
            (
                "rank_pattern",
                field("rank_pattern").is_some_and(|m| m != &json!({})),
            ),
            (
                "alpha_pattern",
                field("alpha_pattern").is_some_and(|m| m != &json!({})),
            ),
            (
                "layers_to_transform",
                field("layers_to_transform").is_some(),
            ),
        ] {
            if unsupported {
                return Err(bad(
                    key,
                    "set, where Headroom's adapters need it unset".into(),
                ));
            }
        }
        let number = |key: &str| {
            field(key)
                .and_then(Value::as_f64)
                .ok_or_else(|| bad(key, "missing or not a number".into()))
        };
        let targets = match field("target_modules") {
            Some(Value::String(all)) if all == "all-linear" => LoraTargets::default(),
            Some(Value::Array(names)) => LoraTargets::Names(
                names
                    .iter()
                    .map(|n| n.as_str().map(str::to_owned))
                    .collect::<Option<_>>()
                    .ok_or_else(|| bad("target_modules", "a name is not a string".into()))?,
            ),
            other => {
                return Err(bad(
                    "target_modules",
                    format!("{other:?}: a list of module names or \"all-linear\" is read"),
                ));
            }
        };
        let rank = number("r")?;
        let lora = LoraConfig {
            rank: rank as usize,
            alpha: number("lora_alpha")?,
            dropout: field("lora_dropout").and_then(Value::as_f64).unwrap_or(0.0),
            rslora: field("use_rslora")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            targets,
            base: None,
        };
        if rank.fract() != 0.0 || rank < 1.0 {
            return Err(bad("r", format!("{rank}: a whole number of at least 1")));
        }
        lora.validate()?;
        let base = field("base_model_name_or_path")
            .and_then(Value::as_str)
            .map(str::to_owned);
        Ok(Self { lora, base })
    }

    /// The base model's directory: `base_model_name_or_path` as a path, a relative one taken
    /// from the adapter's directory first, then from the working directory (as PEFT takes
    /// it); none when it is not a directory here.
    pub fn base_dir(&self, dir: &Path) -> Option<PathBuf> {
        let base = Path::new(self.base.as_deref()?);
        [dir.join(base), base.to_owned()]
            .into_iter()
            .find(|path| path.is_dir())
    }
}

/// Gives `gpt` the trained adapters of the PEFT directory `dir`: onto the adapters it has
/// (which must be the directory's: the same modules, shapes and scale), or, where it has
/// none, onto adapters attached as the directory's configuration says (freezing the rest).
/// Every adapter must be in the file, of its shape, and the file must hold nothing else; the
/// values must be finite. Nothing changes on an error. A decoder sharded over ranks takes them
/// before it is cut.
pub fn load_peft(dir: &Path, gpt: &mut Gpt) -> Result<Attached> {
    if gpt.param_shards().is_some() {
        return Err(Error::config(
            "PEFT adapters",
            "the decoder is sharded over ranks already: load the adapters before cutting it"
                .to_owned(),
        ));
    }
    let adapter = PeftAdapter::read(dir)?;
    let path = dir.join(ADAPTER_WEIGHTS);
    let bytes = safetensors_file::read(&path)?;
    let file = safetensors_file::parse(&path, &bytes)?;
    let bad = |key: &str, detail: String| Error::Checkpoint {
        path: path.clone(),
        key: key.to_owned(),
        detail,
    };
    let device = gpt.tok_emb.weight.device().clone();
    let mut probe = gpt.clone();
    let attached = match adapter_tensors(&probe).is_empty() {
        true => {
            let init = &mut Initializer::new(&device, DType::F32, 0);
            attach(&mut probe, &adapter.lora, init)?
        }
        false => attached_as(&mut probe, &adapter.lora, &path)?,
    };
    // Every value read and checked before the model changes.
    let mut values: HashMap<String, Array> = HashMap::new();
    for (module, name, shape) in adapter_tensors(&probe) {
        let key = format!("{KEY_PREFIX}{module}.{name}");
        let view = file
            .tensor(&key)
            .map_err(|_| bad(&key, format!("missing: the adapter of `{module}` needs it")))?;
        if view.shape() != shape.as_slice() {
            return Err(bad(
                &key,
                format!("shape {:?}, where {shape:?} is needed", view.shape()),
            ));
        }
        let dtype = float_dtype(view.dtype())
            .ok_or_else(|| bad(&key, format!("{:?} is not a float dtype", view.dtype())))?;
        let _weights = device.scoped_tag(Tag::WEIGHTS);
        let array =
            Array::from_bytes(&device, shape.clone(), dtype, view.data())?.cast(DType::F32)?;
        if device.kind() == DeviceKind::Meta || array.to_f64()?.iter().all(|v| v.is_finite()) {
            values.insert(key, array);
        } else {
            return Err(bad(&key, "holds a NaN or an infinity".into()));
        }
    }
    if let Some(extra) = file.names().into_iter().find(|k| !values.contains_key(*k)) {
        return Err(bad(
            extra,
            "an adapter tensor the configuration has no module for".into(),
        ));
    }
    let mut fill = |module: &str, name: &str, t: &mut Tensor| {
        if let Some(array) = values.remove(&format!("{KEY_PREFIX}{module}.{name}")) {
            *t = Tensor::variable(array);
        }
    };
    for_each_part(&mut probe, &mut |module, a, b| {
        fill(module, "lora_A.weight", a);
        fill(module, "lora_B.weight", b);
    });
    *gpt = probe;
    Ok(attached)
}

/// What `gpt`'s own adapters are, checked to scale as `lora` says.
fn attached_as(gpt: &mut Gpt, lora: &LoraConfig, path: &Path) -> Result<Attached> {
    let mut modules = 0;
    for layer in crate::lora::adaptable_layers(gpt) {
        if let Some(adapter) = &layer.adapter {
            if (adapter.scale() - lora.scale()).abs() > 1e-12 * lora.scale() {
                return Err(Error::Checkpoint {
                    path: path.with_file_name(ADAPTER_CONFIG),
                    key: "lora_alpha".into(),
                    detail: format!(
                        "the adapters scale by {}, the model's by {}: alpha or rsLoRA differ",
                        lora.scale(),
                        adapter.scale()
                    ),
                });
            }
            modules += adapter.parts().len();
        }
    }
    Ok(Attached {
        modules,
        trainable: gpt.parameter_count(),
        frozen: gpt.frozen_count(),
    })
}

/// Writes `gpt`'s adapters to `dir` as PEFT writes them (f32), with `lora`'s settings and
/// `base` as `base_model_name_or_path`. Each file is written atomically, the weights first.
pub fn export_peft(gpt: &Gpt, lora: &LoraConfig, dir: &Path, base: Option<&str>) -> Result<()> {
    let mut gpt = gpt.clone();
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let mut modules = BTreeSet::new();
    let mut failed = None;
    for_each_part(&mut gpt, &mut |module, a, b| {
        modules.insert(module.to_owned());
        for (name, t) in [("lora_A.weight", &*a), ("lora_B.weight", &*b)] {
            let bytes = t.array().cast(DType::F32).and_then(|a| a.to_bytes());
            match bytes {
                Ok(bytes) => tensors.push((
                    format!("{KEY_PREFIX}{module}.{name}"),
                    t.dims().to_vec(),
                    bytes,
                )),
                Err(err) => failed = failed.take().or(Some(err)),
            }
        }
    });
    if let Some(err) = failed {
        return Err(err.into());
    }
    if modules.is_empty() {
        return Err(Error::config(
            "peft export",
            "the model has no adapters".to_owned(),
        ));
    }
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_owned(),
        source,
    })?;
    safetensors_file::write_f32(&dir.join(ADAPTER_WEIGHTS), &tensors)?;
    let config = json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_dropout": lora.dropout,
        "use_rslora": lora.rslora,
        "target_modules": modules.into_iter().collect::<Vec<_>>(),
        "bias": "none",
        "fan_in_fan_out": false,
        "inference_mode": true,
        "init_lora_weights": true,
        "modules_to_save": null,
        "layers_to_transform": null,
        "rank_pattern": {},
        "alpha_pattern": {},
        "use_dora": false,
    });
    let text = serde_json::to_string_pretty(&config)
        .map_err(|err| Error::config("peft export", err.to_string()))?;
    crate::checkpoint::write_atomically(&dir.join(ADAPTER_CONFIG), format!("{text}\n").as_bytes())
}

/// Calls `f` with each adapted module's path and its `A` and `B`, in visiting order.
fn for_each_part(gpt: &mut Gpt, f: &mut dyn FnMut(&str, &mut Tensor, &mut Tensor)) {
    for entry in crate::lora::adaptable_layers(gpt) {
        if let Some(adapter) = entry.adapter.as_mut() {
            for part in adapter.parts_mut() {
                f(&part.module, &mut part.a, &mut part.b);
            }
        }
    }
}

/// Each adapter tensor of `gpt`: its module, its name under the module and its shape.
fn adapter_tensors(gpt: &Gpt) -> Vec<(String, &'static str, Vec<usize>)> {
    let mut gpt = gpt.clone();
    let mut out = Vec::new();
    for_each_part(&mut gpt, &mut |module, a, b| {
        out.push((module.to_owned(), "lora_A.weight", a.dims().to_vec()));
        out.push((module.to_owned(), "lora_B.weight", b.dims().to_vec()));
    });
    out
}
