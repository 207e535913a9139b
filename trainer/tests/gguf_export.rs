//! `headroom export --gguf`: a fine-tuned Llama-family model (a LoRA run merged first) as one
//! GGUF file that the GGUF reader reads back as the model it is, with the base's tokenizer,
//! special tokens and chat template; what has no GGUF form here is refused with a message.

mod common;

use std::path::{Path, PathBuf};

use common::tiny::{shards, tiny, tiny_smollm2, train_two_steps};
use common::{TempDir, assert_mentions, fails, headroom, succeeds, text};
use headroom_nn::gguf::{GgufFile, LlamaLayout, Value};
use headroom_nn::lora;
use headroom_trainer::data::tokenizer::TextTokenizer;
use headroom_trainer::model::TrainModel;
use headroom_trainer::trained::{SavedRun, UseSettings};

/// A chat template as transformers saves it beside a model.
const CHAT_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] \
    + '\n' + message['content'] + '<|im_end|>\n' }}{% endfor %}";

/// The tiny SmolLM2 in `dir/base` as a published instruct model is: `<|im_start|>` and
/// `<|im_end|>` as its beginning and end tokens, and a chat template.
fn instruct_base(dir: &Path) -> PathBuf {
    let base = dir.join("base");
    std::fs::create_dir_all(&base).unwrap();
    for file in ["model.safetensors", "tokenizer.json", "config.json"] {
        std::fs::copy(tiny_smollm2().join(file), base.join(file)).unwrap();
    }
    let config = r#"{"bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
        "pad_token": "<|im_end|>", "tokenizer_class": "GPT2Tokenizer"}"#;
    std::fs::write(base.join("tokenizer_config.json"), config).unwrap();
    std::fs::write(base.join("chat_template.jinja"), CHAT_TEMPLATE).unwrap();
    base
}

/// The parameters of the model `run` holds (its adapters merged), as f32 bits.
fn merged_parameters(run: &Path) -> Vec<(String, Vec<u32>)> {
    let settings = UseSettings {
        device: Some("cpu".into()),
        memory_limit: None,
    };
    let saved = SavedRun::open(run, &settings, None).unwrap();
    let TrainModel::Gpt(gpt) = &saved.model else {
        panic!("a GPT")
    };
    let mut gpt = gpt.as_ref().clone();
    lora::merge(&mut gpt).unwrap();
    lora::base_tensors(&gpt)
        .into_iter()
        .map(|(name, t)| {
            let values = t.array().cast(headroom_kernels::DType::F32).unwrap();
            let values = values.to_host::<f32>().unwrap();
            (name, values.iter().map(|v| v.to_bits()).collect())
        })
        .collect()
}

#[test]
fn a_fine_tuned_run_and_a_lora_run_export_as_the_model_they_hold() {
    let dir = TempDir::new("gguf-export");
    let tokenizer = TextTokenizer::load(&tiny_smollm2()).unwrap();
    let corpus = common::tiny::corpus(&dir.0, "corpus", 3);
    let shards = shards(&tokenizer, &corpus, dir.0.join("shards"));
    let base = instruct_base(&dir.0);
    for (kind, flags) in [("full", &[][..]), ("lora", &["--lora"][..])] {
        let run = dir.0.join(kind);
        train_two_steps(&base, &shards, &run, flags);
        for quant in ["f32", "q8_0"] {
            let out = dir.0.join(format!("{kind}-{quant}.gguf"));
            let said = succeeds(&headroom(&[
                "export",
                text(&run),
                "--gguf",
                text(&out),
                "--quant",
                quant,
            ]));
            assert_mentions(
                &said,
                &["llama architecture", quant, "pre-tokenizer smollm"],
            );
            assert_mentions(&said, &["and its chat template"]);
            if kind == "lora" {
                assert_mentions(&said, &["its LoRA adapters merged"]);
            }
            let file = GgufFile::open(&out).unwrap();
            let get = |key: &str| file.get(key).cloned();
            assert_eq!(get("tokenizer.ggml.bos_token_id"), Some(Value::U32(1)));
            assert_eq!(get("tokenizer.ggml.eos_token_id"), Some(Value::U32(2)));
            assert_eq!(get("tokenizer.ggml.padding_token_id"), Some(Value::U32(2)));
            assert_eq!(
                get("tokenizer.ggml.add_bos_token"),
                Some(Value::Bool(false))
            );
            assert_eq!(
                get("tokenizer.chat_template"),
                Some(Value::String(CHAT_TEMPLATE.into()))
            );
            assert_eq!(file.get_str("general.name").unwrap(), kind);
            let layout = LlamaLayout::read(&file).unwrap();
            assert_eq!(layout.config.vocab_size, 320);
            if quant == "f32" {
                // The very parameters the run holds, its adapters merged.
                for (name, want) in merged_parameters(&run) {
                    let mut values = vec![f32::NAN; want.len()];
                    layout.read_parameter(&file, &name, &mut values).unwrap();
                    let bits: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
                    assert_eq!(bits, want, "{kind}: {name}");
                }
            }
        }
    }
    // Again without --overwrite is refused; with it, replaced.
    let out = dir.0.join("full-f32.gguf");
    let full = dir.0.join("full");
    let args = ["export", text(&full), "--gguf", text(&out)];
    assert_mentions(&fails(&headroom(&args)), &["already exists", "overwrite"]);
    let mut again = args.to_vec();
    again.push("--overwrite");
    assert_mentions(&succeeds(&headroom(&again)), &["(llama architecture, f16)"]);
}

#[test]
fn a_published_model_exports_directly_and_gpt2_is_refused() {
    let dir = TempDir::new("gguf-export-direct");
    let out = dir.0.join("smollm2.gguf");
    let said = succeeds(&headroom(&[
        "export",
        text(&tiny_smollm2()),
        "--gguf",
        text(&out),
        "--quant",
        "q4_k",
    ]));
    // Rows of 32 and 48 are not whole Q4_K blocks: Q5_0, and F16 for rows of 48.
    assert_mentions(&said, &["q4_k", "13 Q5_0", "2 F16", "5 F32"]);
    assert_eq!(
        LlamaLayout::read(&GgufFile::open(&out).unwrap())
            .unwrap()
            .config
            .num_hidden_layers,
        2
    );
    let refused = fails(&headroom(&[
        "export",
        text(&tiny()),
        "--gguf",
        text(&dir.0.join("gpt2.gguf")),
    ]));
    assert_mentions(&refused, &["GPT-2", "--hf", "convert_hf_to_gguf.py"]);
    assert!(!dir.0.join("gpt2.gguf").exists());
    let refused = fails(&headroom(&[
        "export",
        text(&tiny_smollm2()),
        "--gguf",
        text(&out),
        "--quant",
        "q4_k_m",
    ]));
    assert_mentions(
        &refused,
        &["q4_k_m is not one of f32, f16, bf16, q8_0, q4_0, q4_k"],
    );
    let refused = fails(&headroom(&["export", text(&tiny_smollm2())]));
    assert_mentions(&refused, &["--hf", "--gguf"]);
}
