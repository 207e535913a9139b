//! Every command that uses a trained model works on every kind of run: `generate`, `eval`,
//! `export --hf` and, for adapters, `export --hf --merge`, after a full fine-tune, LoRA and
//! QLoRA (NF4 and int8 bases), with f32 and bf16 parameters, and with streamed weights. The
//! runs start from the tiny SmolLM2 made with transformers (nn/tests/data/tiny-smollm2).

mod common;

use common::tiny::{shards, tiny_smollm2, train_two_steps};
use common::{TempDir, assert_mentions, headroom, succeeds, text};
use headroom_kernels::DType;
use headroom_kernels::ops::gemm::cpu_multiplies;
use headroom_trainer::data::tokenizer::TextTokenizer;

/// A kind of run: its name and the flags that make it.
const KINDS: &[(&str, &[&str])] = &[
    ("full-f32", &[]),
    ("full-bf16", &["--param-dtype", "bf16"]),
    ("lora-f32", &["--lora"]),
    ("lora-bf16", &["--lora", "--param-dtype", "bf16"]),
    ("qlora-nf4-f32", &["--base", "nf4"]),
    (
        "qlora-nf4-bf16",
        &["--base", "nf4", "--param-dtype", "bf16"],
    ),
    (
        "qlora-int8-bf16",
        &["--base", "int8", "--param-dtype", "bf16"],
    ),
    (
        "full-streamed",
        &["--offload-weights", "--recompute", "blocks"],
    ),
    (
        "lora-bf16-streamed",
        &[
            "--lora",
            "--param-dtype",
            "bf16",
            "--offload-weights",
            "--recompute",
            "blocks",
        ],
    ),
];

#[test]
fn every_command_works_on_every_kind_of_run() {
    let dir = TempDir::new("every-run-kind");
    let tokenizer = TextTokenizer::load(&tiny_smollm2()).unwrap();
    let corpus = common::tiny::corpus(&dir.0, "corpus", 3);
    let shards = shards(&tokenizer, &corpus, dir.0.join("shards"));
    for (kind, flags) in KINDS {
        let run = dir.0.join(kind);
        let logged = train_two_steps(&tiny_smollm2(), &shards, &run, flags);
        // bf16 on a CPU without bf16 instructions is warned of once, with what the same run
        // would take in f32.
        let bf16 = flags.contains(&"bf16") && !cpu_multiplies(DType::BF16);
        assert_eq!(
            logged.matches("widen").count(),
            usize::from(bf16),
            "{kind}: {logged}"
        );
        if bf16 {
            assert_mentions(&logged, &["in f32 (--param-dtype f32", "a step"]);
        }
        let checkpoint = ["--checkpoint", text(&run)];
        let generating = headroom(
            &[
                &["generate", "--prompt", "The", "--temperature", "0"][..],
                &["--max-tokens", "6"],
                &checkpoint,
            ]
            .concat(),
        );
        // A token's products read bf16 weights as stored: generation warns of nothing.
        let warned = String::from_utf8_lossy(&generating.stderr).contains("widen");
        assert!(!warned, "{kind}: generation's warning");
        let generated = succeeds(&generating);
        assert!(
            generated.starts_with("The"),
            "{kind}: generate printed {generated:?}"
        );
        let evaluated = succeeds(&headroom(&[&["eval"][..], &checkpoint].concat()));
        assert!(evaluated.contains("held-out loss"), "{kind}: {evaluated}");
        let exported = dir.0.join(format!("{kind}-hf"));
        succeeds(&headroom(&["export", "--hf", text(&run), text(&exported)]));
        assert!(
            exported.join("config.json").is_file()
                || exported.join("adapter_config.json").is_file(),
            "{kind}: the export wrote neither a model nor adapters"
        );
        if flags.iter().any(|f| ["--lora", "--base"].contains(f)) {
            let merged = dir.0.join(format!("{kind}-merged"));
            succeeds(&headroom(&[
                "export",
                "--hf",
                "--merge",
                text(&run),
                text(&merged),
            ]));
            assert!(
                merged.join("config.json").is_file(),
                "{kind}: no merged model"
            );
        }
    }
}
