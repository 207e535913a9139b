//! Gemma 3 (`Gemma3ForCausalLM`): a tiny model made by transformers
//! (`scripts/hf/make_tiny_gemma3.py`: a sliding window of 4 on two layers of three, its own
//! rotary base there, a query scale apart from the head size) gives transformers' logits and
//! loss from both `config.json` layouts, exports and loads back bit for bit, generates with its
//! cache as it computes whole, and takes adapters on PEFT's module names.

mod common;

use std::path::Path;

use common::transformers_cases::{assert_transformers_cases, data, max_abs_diff};
use common::{TempDir, device, parameter_bytes};
use headroom_autograd::Tensor;
use headroom_kernels::{DType, Device};
use headroom_nn::hf::{self, Gemma3Config};
use headroom_nn::lora::{self, LoraConfig};
use headroom_nn::{Family, Gpt, Initializer, Module, Recompute};

const LAYOUTS: [&str; 2] = ["tiny-gemma3", "tiny-gemma3-published-layout"];

fn loaded(device: &Device, dir: &Path, dtype: DType) -> Gpt {
    let config = Gemma3Config::read(dir).unwrap();
    let mut init = Initializer::new(device, dtype, 7);
    let mut gpt = Gpt::new(&mut init, config.gpt_config(0.0)).unwrap();
    hf::load_llama(dir, &mut gpt).unwrap();
    gpt
}

fn check_against_transformers(name: &str, dir: &Path) {
    assert_transformers_cases(name, &loaded(&device(), dir, DType::F32));
}

#[test]
fn both_layouts_give_transformers_logits_and_loss() {
    for name in LAYOUTS {
        check_against_transformers(name, &data(name));
    }
}

#[test]
fn the_configuration_reads_as_the_model_it_describes() {
    let [v5, published] = LAYOUTS.map(|name| Gemma3Config::read(&data(name)).unwrap());
    assert_eq!(v5.options, published.options);
    let options = v5.options;
    assert_eq!(
        (options.sliding_window, options.sliding_window_pattern),
        (4, 3)
    );
    assert_eq!((options.rope_theta, options.rope_local_theta), (1e6, 1e4));
    assert_eq!((options.head_dim, options.query_pre_attn_scalar), (16, 24));
    assert!(v5.tie_word_embeddings && published.tie_word_embeddings);
    let gpt = loaded(&device(), &data(LAYOUTS[0]), DType::F32);
    let windows: Vec<_> = gpt.blocks.iter().map(|b| b.attn.window()).collect();
    assert_eq!(windows, [Some(4), Some(4), None]);
}

#[test]
fn an_export_loads_back_bit_for_bit_under_transformers_names() {
    let device = device();
    let name = LAYOUTS[0];
    let gpt = loaded(&device, &data(name), DType::F32);
    let out = TempDir::created("gemma3-export");
    let options = hf::LlamaExport {
        dtype: Some(DType::F32),
        bos: Some(2),
        eos: Some(1),
        ..Default::default()
    };
    hf::export_llama(&gpt, &out.0, &options).unwrap();
    if let Ok(keep) = std::env::var("HEADROOM_KEEP_HF_EXPORT") {
        let keep = Path::new(&keep).join(name);
        let options = hf::LlamaExport {
            overwrite: true,
            ..options.clone()
        };
        hf::export_llama(&gpt, &keep, &options).unwrap();
    }
    let again = loaded(&device, &out.0, DType::F32);
    assert_eq!(parameter_bytes(&again), parameter_bytes(&gpt));
    let names = |dir: &Path| {
        let bytes = std::fs::read(dir.join(hf::WEIGHTS_FILE)).unwrap();
        let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let mut names: Vec<(String, Vec<usize>)> = file
            .tensors()
            .into_iter()
            .map(|(n, v)| (n, v.shape().to_vec()))
            .collect();
        names.sort();
        names
    };
    assert_eq!(names(&out.0), names(&data(name)));
    let read = Gemma3Config::read(&out.0).unwrap();
    assert_eq!(
        read.options,
        Gemma3Config::read(&data(name)).unwrap().options
    );
    check_against_transformers(name, &out.0);
}

#[test]
fn cached_generation_and_materialized_attention_match_the_whole_pass() {
    let device = device();
    let mut gpt = loaded(&device, &data(LAYOUTS[0]), DType::F32);
    let ids: Vec<u32> = vec![0, 102, 199, 296, 73, 170, 267, 44, 141, 238, 15, 319];
    let len = ids.len();
    let whole = gpt
        .forward(&Tensor::from_host(&device, [1, len], &ids).unwrap())
        .unwrap()
        .to_f64()
        .unwrap();
    let vocab = whole.len() / len;
    // A prompt of 3, then one token at a time: past the window of 4, the cache must drop keys.
    let mut cache = gpt.kv_cache(1);
    let prompt = Tensor::from_host(&device, [1, 3], &ids[..3]).unwrap();
    let mut last = gpt.forward_cached(&prompt, &mut cache).unwrap();
    for t in 3..=len {
        let row = &whole[(t - 1) * vocab..t * vocab];
        let cached = last.to_f64().unwrap();
        assert!(max_abs_diff(&cached, row) < 1e-5, "position {}", t - 1);
        if t < len {
            let next = Tensor::from_host(&device, [1, 1], &ids[t..t + 1]).unwrap();
            last = gpt.forward_cached(&next, &mut cache).unwrap();
        }
    }
    gpt.set_materialized_attention(true);
    let materialized = gpt
        .forward(&Tensor::from_host(&device, [1, len], &ids).unwrap())
        .unwrap()
        .to_f64()
        .unwrap();
    assert!(max_abs_diff(&materialized, &whole) < 1e-5);
}

#[test]
fn adapters_go_on_peft_module_names_and_change_nothing_until_trained() {
    let device = device();
    let mut gpt = loaded(&device, &data(LAYOUTS[0]), DType::F32);
    assert!(matches!(gpt.config().family, Family::Gemma3(_)));
    let ids = Tensor::from_host(&device, [1, 5], &[0u32, 102, 199, 296, 73]).unwrap();
    let before = gpt.forward(&ids).unwrap().to_f64().unwrap();
    let config = LoraConfig::default();
    let attached = lora::attach(
        &mut gpt,
        &config,
        &mut Initializer::new(&device, DType::F32, 1),
    )
    .unwrap();
    // q, k, v, o, gate, up and down in each of the three layers.
    assert_eq!(attached.modules, 21);
    let after = gpt.forward(&ids).unwrap().to_f64().unwrap();
    assert_eq!(after, before);
    let out = TempDir::created("gemma3-peft");
    hf::export_peft(&gpt, &config, &out.0, None).unwrap();
    let bytes = std::fs::read(out.0.join(hf::ADAPTER_WEIGHTS)).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let names = file.names();
    for module in ["self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj"] {
        let name = format!("base_model.model.model.layers.2.{module}.lora_A.weight");
        assert!(names.iter().any(|n| **n == name), "{name} in {names:?}");
    }
}

#[test]
fn every_way_of_keeping_memory_gives_the_same_step() {
    let device = device();
    let ids: Vec<u32> = (0..2 * 12).map(|i| (i * 37 % 320) as u32).collect();
    let targets: Vec<u32> = ids.iter().map(|&i| (i + 1) % 320).collect();
    let ids = Tensor::from_host(&device, [2, 12], &ids).unwrap();
    let targets = Tensor::from_host(&device, [2, 12], &targets).unwrap();
    let run = |recompute: Recompute, stream: bool| {
        let mut gpt = loaded(&device, &data(LAYOUTS[0]), DType::F32);
        gpt.set_recompute(recompute);
        if stream {
            gpt.set_offload_weights(Some(device.clone())).unwrap();
        }
        let (loss, grads, _) =
            common::recorded_step(&gpt, &device, || gpt.loss(&ids, &targets, None));
        (loss, grads)
    };
    let reference = run(Recompute::None, false);
    for (recompute, stream) in [
        (Recompute::Cheap, false),
        (Recompute::CheapUp, false),
        (Recompute::Blocks, false),
        (Recompute::None, true),
    ] {
        let (loss, grads) = run(recompute, stream);
        assert_eq!(loss, reference.0, "{recompute:?}, streamed {stream}");
        assert!(
            grads == reference.1,
            "{recompute:?}, streamed {stream}: gradients differ"
        );
    }
    // Tiles sum the weights' gradients in another order: the same within rounding.
    let (loss, grads) = run(Recompute::BlocksTiledMlp { rows: 5 }, false);
    let close = |a: &[f64], b: &[f64]| {
        a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-5 * (1.0 + x.abs().max(y.abs())))
    };
    assert!(close(&loss, &reference.0));
    assert!(grads.iter().zip(&reference.1).all(|(t, g)| close(t, g)));
    // The norms' weights learn: Gemma's scale is one plus the weight.
    assert!(reference.1.iter().all(|g| g.iter().any(|v| *v != 0.0)));
}
