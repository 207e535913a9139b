//! GGUF exports of the tiny Llama-family models of tests/data read back with the GGUF reader:
//! every key as written, every tensor under llama.cpp's name, shape and type (the fallbacks of
//! rows that are not whole blocks included), its bytes those of the quantizer over the model's
//! values (the `llama` file's query and key rows permuted), and the Llama layout reading the
//! same configuration and, from an f32 file, the very parameters.
//!
//! Set `HEADROOM_KEEP_GGUF_EXPORT=DIR` to keep the tiny SmolLM2's exports as `DIR/{quant}.gguf`.

mod common;

use std::path::{Path, PathBuf};

use common::{TempDir, device, parameter_bytes};
use headroom_kernels::DType;
use headroom_nn::gguf::{
    GgufExport, GgufFile, GgufQuant, GgufTokenizer, GgufType, LlamaLayout, SpecialIds, Value,
    export_llama_gguf, permute_rows, quantize,
};
use headroom_nn::hf::{self, LlamaConfig};
use headroom_nn::{Error, Gpt, Initializer};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// The tiny model `name` loaded in f32.
fn loaded(name: &str) -> Gpt {
    let config = LlamaConfig::read(&data(name)).unwrap();
    let mut gpt = Gpt::new(
        &mut Initializer::new(&device(), DType::F32, 7),
        config.gpt_config(0.0),
    )
    .unwrap();
    hf::load_llama(&data(name), &mut gpt).unwrap();
    gpt
}

/// The tokenizer metadata of `dir`'s tokenizer for a model of 320 tokens.
fn tokenizer(dir: &Path) -> GgufTokenizer {
    let ids = SpecialIds {
        bos: Some(0),
        eos: Some(0),
        pad: None,
    };
    GgufTokenizer::read(&[dir.to_owned()], 320, &ids).unwrap()
}

fn export(gpt: &Gpt, path: &Path, quant: GgufQuant, tokenizer: &GgufTokenizer) -> Vec<String> {
    let options = GgufExport {
        quant,
        name: "tiny".into(),
        tokenizer: tokenizer.metadata.clone(),
        overwrite: false,
    };
    let exported = export_llama_gguf(gpt, path, &options).unwrap();
    assert_eq!(exported.bytes, std::fs::metadata(path).unwrap().len());
    exported
        .tensors
        .iter()
        .map(|t| t.name().to_owned())
        .collect()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

/// The expected config of a model read back from its GGUF file.
fn read_back_config(name: &str) -> LlamaConfig {
    let mut config = LlamaConfig::read(&data(name)).unwrap();
    config.torch_dtype = None;
    if config.architecture == hf::Architecture::Mistral {
        config.architecture = hf::Architecture::Llama;
    }
    config
}

#[test]
fn every_quantization_reads_back_as_written() {
    let gpt = loaded("tiny-smollm2");
    let vocab = tokenizer(&data("tiny-smollm2"));
    let dir = TempDir::created("gguf-export");
    let keep = std::env::var_os("HEADROOM_KEEP_GGUF_EXPORT").map(PathBuf::from);
    let params: std::collections::HashMap<String, Vec<f32>> = parameter_bytes(&gpt)
        .into_iter()
        .map(|(n, b)| (n, f32s(&b)))
        .collect();
    for quant in GgufQuant::ALL {
        let path = dir.0.join(format!("{quant}.gguf"));
        let names = export(&gpt, &path, quant, &vocab);
        let file = GgufFile::open(&path).unwrap();
        assert_eq!(file.version(), 3);
        assert_eq!(file.alignment(), 32);
        // The keys llama.cpp reads.
        let u = |key: &str| file.get_u64(key).unwrap();
        assert_eq!(file.get_str("general.architecture").unwrap(), "llama");
        assert_eq!(file.get_str("general.name").unwrap(), "tiny");
        assert_eq!(u("general.file_type"), u64::from(quant.file_type()));
        assert_eq!(u("general.quantization_version"), 2);
        for (key, want) in [
            ("llama.block_count", 2),
            ("llama.context_length", 64),
            ("llama.embedding_length", 32),
            ("llama.feed_forward_length", 48),
            ("llama.attention.head_count", 4),
            ("llama.attention.head_count_kv", 2),
            ("llama.attention.key_length", 8),
            ("llama.attention.value_length", 8),
            ("llama.rope.dimension_count", 8),
            ("llama.vocab_size", 320),
            ("tokenizer.ggml.bos_token_id", 0),
            ("tokenizer.ggml.eos_token_id", 0),
        ] {
            assert_eq!(u(key), want, "{quant}: {key}");
        }
        assert_eq!(file.get("llama.rope.freq_base"), Some(&Value::F32(1e5)));
        let eps = file.get("llama.attention.layer_norm_rms_epsilon");
        assert_eq!(eps, Some(&Value::F32(1e-5)));
        assert_eq!(file.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
        assert_eq!(file.get_str("tokenizer.ggml.pre").unwrap(), "smollm");
        assert!(!file.get_bool("tokenizer.ggml.add_bos_token").unwrap());
        let tokens = file.get_array("tokenizer.ggml.tokens").unwrap();
        assert_eq!(tokens.len(), 320);
        assert_eq!(tokens[2], Value::String("<|im_end|>".into()));
        let types = file.get_array("tokenizer.ggml.token_type").unwrap();
        let control = types.iter().filter(|t| **t == Value::I32(3)).count();
        assert_eq!((control, types[5].clone()), (3, Value::I32(1)));
        assert_eq!(
            file.get_array("tokenizer.ggml.merges").unwrap()[0],
            Value::String("Ġ t".into())
        );
        // llama.cpp's names; the head is tied, so no output.weight.
        let mut expected = vec!["token_embd.weight".to_owned()];
        for i in 0..2 {
            for part in [
                "attn_norm",
                "attn_q",
                "attn_k",
                "attn_v",
                "attn_output",
                "ffn_norm",
                "ffn_gate",
                "ffn_up",
                "ffn_down",
            ] {
                expected.push(format!("blk.{i}.{part}.weight"));
            }
        }
        expected.push("output_norm.weight".into());
        let mut sorted = names.clone();
        sorted.sort();
        expected.sort();
        assert_eq!(sorted, expected, "{quant}");
        // Types: norms f32; rows of 32 in the type asked (Q4_K falls back to Q5_0); the
        // ffn_down rows of 48 to F16.
        let matrix = match quant {
            GgufQuant::Q4_K => GgufType::Q5_0,
            other => other.matrix_type(),
        };
        let odd = match quant {
            GgufQuant::F32 | GgufQuant::F16 | GgufQuant::BF16 => quant.matrix_type(),
            _ => GgufType::F16,
        };
        let layout = LlamaLayout::read(&file).unwrap();
        assert_eq!(layout.config, read_back_config("tiny-smollm2"), "{quant}");
        for name in &names {
            let info = file.tensor(name).unwrap();
            let want_ty = match name.as_str() {
                n if n.ends_with("norm.weight") => GgufType::F32,
                n if n.contains("ffn_down") => odd,
                _ => matrix,
            };
            assert_eq!(info.ty(), want_ty, "{quant}: {name}");
            // The stored bytes are the quantizer's over the model's values, llama.cpp's
            // converter's permutation applied to the queries and keys.
            let (param, rows) = match name.split('.').collect::<Vec<_>>().as_slice() {
                ["blk", i, part, "weight"] => {
                    let (ours, rows) = match *part {
                        "attn_q" => ("attn.qkv", 0..32),
                        "attn_k" => ("attn.qkv", 32..48),
                        "attn_v" => ("attn.qkv", 48..64),
                        "attn_norm" => ("ln1", 0..1),
                        "ffn_norm" => ("ln2", 0..1),
                        "attn_output" => ("attn.proj", 0..32),
                        "ffn_gate" => ("mlp.gate", 0..48),
                        "ffn_up" => ("mlp.up", 0..48),
                        _ => ("mlp.down", 0..32),
                    };
                    (format!("blocks.{i}.{ours}.weight"), rows)
                }
                ["token_embd", _] => ("tok_emb.weight".into(), 0..320),
                _ => ("ln_f.weight".into(), 0..1),
            };
            let all = &params[&param];
            let row_len = info.row_len();
            let mut values = match info.shape().len() {
                1 => all.clone(),
                _ => all[rows.start * row_len..rows.end * row_len].to_vec(),
            };
            if name.contains("attn_q") {
                values = permute_rows(&values, 4, row_len).unwrap();
            } else if name.contains("attn_k") {
                values = permute_rows(&values, 2, row_len).unwrap();
            }
            let stored = file.tensor_bytes(name).unwrap();
            assert_eq!(
                stored,
                quantize(info.ty(), &values).unwrap(),
                "{quant}: {name}"
            );
            let back = file.read_f32(name).unwrap();
            let rounded: Vec<f32> = match info.ty() {
                GgufType::F32 => values.clone(),
                GgufType::F16 => values
                    .iter()
                    .map(|&v| half::f16::from_f32(v).to_f32())
                    .collect(),
                GgufType::BF16 => values
                    .iter()
                    .map(|&v| half::bf16::from_f32(v).to_f32())
                    .collect(),
                _ => back.clone(),
            };
            assert_eq!(bits(&back), bits(&rounded), "{quant}: {name}");
            let amax = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let worst = values
                .iter()
                .zip(&back)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(
                worst <= amax * 0.15,
                "{quant}: {name} off by {worst} of {amax}"
            );
        }
        // Through the layout: the same parameters, bit for bit from f32.
        for (name, want) in &params {
            let mut values = vec![f32::NAN; want.len()];
            layout.read_parameter(&file, name, &mut values).unwrap();
            if quant == GgufQuant::F32 {
                assert_eq!(bits(&values), bits(want), "{name}");
            }
        }
        if let Some(keep) = &keep {
            std::fs::create_dir_all(keep).unwrap();
            std::fs::copy(&path, keep.join(format!("{quant}.gguf"))).unwrap();
        }
    }
}

#[test]
fn every_architecture_reads_back_bit_for_bit_from_f32() {
    let dir = TempDir::created("gguf-export-arch");
    for (name, arch) in [
        ("tiny-llama3", "llama"),
        ("tiny-qwen2", "qwen2"),
        ("tiny-qwen3", "qwen3"),
        ("tiny-mistral", "llama"),
    ] {
        let gpt = loaded(name);
        let own = data(name).join("tokenizer.json").is_file();
        let config = LlamaConfig::read(&data(name)).unwrap();
        let ids = SpecialIds {
            bos: config.bos_token_id,
            eos: config.eos_token_ids.first().copied(),
            pad: None,
        };
        let tokenizer_dir = data(if own { name } else { "tiny-smollm2" });
        let vocab = GgufTokenizer::read(&[tokenizer_dir], 320, &ids).unwrap();
        let path = dir.0.join(format!("{name}.gguf"));
        export(&gpt, &path, GgufQuant::F32, &vocab);
        let file = GgufFile::open(&path).unwrap();
        assert_eq!(file.get_str("general.architecture").unwrap(), arch);
        let layout = LlamaLayout::read(&file).unwrap();
        if own {
            // Llama 3's tokenizer puts <|begin_of_text|> first.
            assert_eq!(file.get_str("tokenizer.ggml.pre").unwrap(), "llama-bpe");
            assert!(file.get_bool("tokenizer.ggml.add_bos_token").unwrap());
        }
        assert_eq!(layout.config, read_back_config(name), "{name}");
        assert_eq!(layout.permuted, arch == "llama");
        for (param, bytes) in parameter_bytes(&gpt) {
            let want = f32s(&bytes);
            let mut values = vec![f32::NAN; want.len()];
            layout.read_parameter(&file, &param, &mut values).unwrap();
            assert_eq!(bits(&values), bits(&want), "{name}: {param}");
        }
    }
}

#[test]
fn what_cannot_be_written_is_refused_before_writing() {
    let dir = TempDir::created("gguf-export-refused");
    let gpt = loaded("tiny-smollm2");
    let vocab = tokenizer(&data("tiny-smollm2"));
    let path = dir.0.join("model.gguf");
    let mut options = GgufExport {
        quant: GgufQuant::Q8_0,
        name: "tiny".into(),
        tokenizer: vocab.metadata.clone(),
        overwrite: false,
    };
    let config_error = |r: Result<_, Error>| match r {
        Err(Error::Config { detail, .. }) => detail,
        other => panic!("{other:?}"),
    };
    export_llama_gguf(&gpt, &path, &options).unwrap();
    let detail = config_error(export_llama_gguf(&gpt, &path, &options));
    assert!(detail.contains("already exists: set overwrite"), "{detail}");
    options.overwrite = true;
    export_llama_gguf(&gpt, &path, &options).unwrap();
    options
        .tokenizer
        .retain(|(k, _)| k != "tokenizer.ggml.tokens");
    let detail = config_error(export_llama_gguf(&gpt, &path, &options));
    assert!(
        detail.contains("the tokenizer lists no tokens, where the model has 320"),
        "{detail}"
    );
    let gemma = {
        let config = hf::Gemma3Config::read(&data("tiny-gemma3")).unwrap();
        Gpt::new(
            &mut Initializer::new(&device(), DType::F32, 7),
            config.gpt_config(0.0),
        )
        .unwrap()
    };
    let detail = config_error(export_llama_gguf(&gemma, &dir.0.join("g.gguf"), &options));
    assert!(
        detail.contains("Gemma 3 is not written as GGUF here yet"),
        "{detail}"
    );
    assert!(!dir.0.join("g.gguf").exists());
}

#[test]
fn the_tokenizer_files_give_the_special_tokens_and_chat_template() {
    let dir = TempDir::created("gguf-tokenizer");
    std::fs::copy(
        data("tiny-llama3").join("tokenizer.json"),
        dir.0.join("tokenizer.json"),
    )
    .unwrap();
    let config = serde_json::json!({
        "eos_token": "<|end_of_text|>",
        "pad_token": {"content": "<|end_of_text|>"},
        "chat_template": [
            {"name": "default", "template": "{{ messages }}"},
            {"name": "tool use", "template": "{{ tools }}"},
        ],
    });
    std::fs::write(dir.0.join("tokenizer_config.json"), config.to_string()).unwrap();
    let read =
        GgufTokenizer::read(std::slice::from_ref(&dir.0), 320, &SpecialIds::default()).unwrap();
    let get = |key: &str| {
        read.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(read.pre, "llama-bpe");
    assert_eq!(get("tokenizer.ggml.bos_token_id"), Some(Value::U32(318)));
    assert_eq!(get("tokenizer.ggml.eos_token_id"), Some(Value::U32(319)));
    assert_eq!(
        get("tokenizer.ggml.padding_token_id"),
        Some(Value::U32(319))
    );
    assert_eq!(get("tokenizer.ggml.add_bos_token"), Some(Value::Bool(true)));
    assert_eq!(
        get("tokenizer.ggml.add_eos_token"),
        Some(Value::Bool(false))
    );
    assert_eq!(
        get("tokenizer.chat_template"),
        Some(Value::String("{{ messages }}".into()))
    );
    assert_eq!(
        get("tokenizer.chat_template.tool_use"),
        Some(Value::String("{{ tools }}".into()))
    );
    assert!(read.chat_template);
    // A template of its own file, where tokenizer_config.json has none; a larger model's ids
    // past the tokenizer's are unused padding.
    std::fs::write(dir.0.join("tokenizer_config.json"), "{}").unwrap();
    std::fs::write(
        dir.0.join("chat_template.jinja"),
        "{% for m in messages %}{% endfor %}",
    )
    .unwrap();
    let read =
        GgufTokenizer::read(std::slice::from_ref(&dir.0), 324, &SpecialIds::default()).unwrap();
    let get = |key: &str| {
        read.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(
        get("tokenizer.chat_template"),
        Some(Value::String("{% for m in messages %}{% endfor %}".into()))
    );
    let Some(Value::Array(_, tokens)) = get("tokenizer.ggml.tokens") else {
        panic!("no tokens")
    };
    assert_eq!(tokens[323], Value::String("[PAD323]".into()));
    let Some(Value::Array(_, types)) = get("tokenizer.ggml.token_type") else {
        panic!("no types")
    };
    assert_eq!(
        (types[319].clone(), types[323].clone()),
        (Value::I32(3), Value::I32(5))
    );
    // A smaller model than the tokenizer, and a character-level tokenizer, are refused.
    let err =
        GgufTokenizer::read(std::slice::from_ref(&dir.0), 300, &SpecialIds::default()).unwrap_err();
    assert!(
        err.to_string().contains("past the model's 300 tokens"),
        "{err}"
    );
    let words = serde_json::json!({"model": {"type": "WordLevel", "vocab": {"a": 0}}});
    std::fs::write(dir.0.join("tokenizer.json"), words.to_string()).unwrap();
    let err =
        GgufTokenizer::read(std::slice::from_ref(&dir.0), 320, &SpecialIds::default()).unwrap_err();
    assert!(
        err.to_string().contains("only byte-level BPE tokenizers"),
        "{err}"
    );
    let err = GgufTokenizer::read(&[dir.0.join("none")], 320, &SpecialIds::default()).unwrap_err();
    assert!(err.to_string().contains("no tokenizer.json in"), "{err}");
}
