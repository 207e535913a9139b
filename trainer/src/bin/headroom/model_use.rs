//! `headroom generate`, `headroom eval` and `headroom export`: a trained model used, judged
//! and handed to other tools.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use headroom_kernels::DType;
use headroom_nn::gguf::GgufQuant;
use headroom_nn::hf::{DEFAULT_SHARD_BYTES, GENERATION_CONFIG, LlamaExport};
use headroom_nn::lora::QuantizedBase;
use headroom_nn::{Family, Sampling};
use headroom_trainer::data::tokenizer::TextTokenizer;
use headroom_trainer::model::TrainModel;
use headroom_trainer::trained::{EvalData, evaluate_run};
use headroom_trainer::trained::{GenerateOptions, Stop, checked_prompt, generate};
use headroom_trainer::trained::{SavedRun, UseSettings, pretrained_model};
use headroom_trainer::trained::{carry_companions, identity_sources, special_tokens};
use headroom_trainer::{Error, Result};

use crate::say;

/// Where a saved model runs.
#[derive(Args)]
pub struct UseArgs {
    /// The model: a run directory (its checkpoint), or a Hugging Face model directory or Hub
    /// id in the local cache (HF_HUB_CACHE, HF_HOME, ~/.cache/huggingface/hub), or a GGUF
    /// file (its tokenizer from its metadata), as published.
    #[arg(long, value_name = "RUN_DIR|HF_DIR|HUB_ID|FILE.gguf")]
    checkpoint: PathBuf,
    /// The device: cpu, cuda or cuda:N (the run's, unless given).
    #[arg(long)]
    device: Option<String>,
    /// The most memory the model may use, e.g. 2GiB (the run's limit, unless given).
    #[arg(long)]
    memory_limit: Option<headroom_alloc::ByteSize>,
}

impl UseArgs {
    fn settings(&self) -> UseSettings {
        UseSettings {
            device: self.device.clone(),
            memory_limit: self.memory_limit.clone(),
        }
    }
}

/// `headroom generate`.
#[derive(Args)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: UseArgs,
    /// The text to continue (empty: from <|endoftext|>). A prompt longer than the model's
    /// context is refused before anything is printed (generation stops when the context is
    /// full: no sliding window); a character-level run refuses characters its text never held.
    #[arg(long, default_value = "", conflicts_with = "chat")]
    prompt: String,
    /// A user's message, rendered with the model's chat template with the assistant's turn
    /// opened; only the answer is printed, and it stops at the end of the turn.
    #[arg(long, value_name = "MESSAGE")]
    chat: Option<String>,
    /// With --chat: a system message before it.
    #[arg(long, requires = "chat")]
    system: Option<String>,
    /// With --chat: a chat template (Jinja) instead of the model's.
    #[arg(long, requires = "chat", value_name = "FILE.jinja")]
    chat_template: Option<PathBuf>,
    /// The most tokens to generate.
    #[arg(long, default_value_t = 200)]
    max_tokens: usize,
    /// Divides the logits: below 1 sharper, above 1 flatter; 0 is greedy.
    #[arg(long, default_value_t = 0.8, allow_negative_numbers = true)]
    temperature: f64,
    /// Draw from the k most likely tokens only.
    #[arg(long)]
    top_k: Option<usize>,
    /// Draw from the smallest set of most likely tokens whose probability reaches p.
    #[arg(long)]
    top_p: Option<f64>,
    /// Seeds the draws.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Also print the prompt's and the generated token ids, one line of JSON on standard error
    /// after the text ({"prompt": [...], "generated": [...]}), to compare with other tools.
    #[arg(long)]
    print_ids: bool,
    /// The tokenizer: a tokenizer.json or a GGUF file (the run directory's tokenizer.json,
    /// unless given: the data's, the pretrained model's, or a character-level run's characters).
    #[arg(long)]
    tokenizer: Option<PathBuf>,
}

/// `headroom eval`.
#[derive(Args)]
pub struct EvalArgs {
    #[command(flatten)]
    model: UseArgs,
    /// Token shards to judge on (`headroom prepare`'s directory; its held-out part), instead
    /// of the run's own held-out data.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Held-out samples at most.
    #[arg(long)]
    eval_size: Option<usize>,
    /// Tokens per held-out window, at most the model's context (default: the run's context,
    /// or a pretrained model's whole context); chat data holds one conversation a window.
    #[arg(long)]
    context: Option<usize>,
    /// Where to write the result as JSON (default: eval.json in the run directory; nowhere
    /// for a Hugging Face model).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// `headroom export`.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("format").required(true).args(["hf", "gguf"])))]
pub struct ExportArgs {
    /// Write a Hugging Face directory (config.json, the weights, and the base model's tokenizer
    /// and generation files: special tokens, chat template, generation defaults) that
    /// transformers' AutoModelForCausalLM.from_pretrained loads: GPT2LMHeadModel for a GPT-2,
    /// LlamaForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM for the Llama family.
    #[arg(long)]
    hf: bool,
    /// Write one GGUF file that llama.cpp and Ollama run (the Llama family: llama, qwen2 or
    /// qwen3), with the tokenizer and chat template; a LoRA run's adapters are merged first.
    #[arg(long, value_name = "OUT.gguf", conflicts_with_all = ["hf", "dtype", "shard_size", "out_dir"])]
    gguf: Option<PathBuf>,
    /// GGUF: the matrices' type, f32, f16, bf16, q8_0, q4_0 or q4_k (default: bf16 for bf16
    /// weights, f16 otherwise, as llama.cpp's converter); norms stay f32, and rows that are
    /// not whole blocks fall back as llama.cpp's tools do (q4_k to q5_0, then f16).
    #[arg(long, requires = "gguf", value_parser = parse_quant)]
    quant: Option<GgufQuant>,
    /// Llama family: the dtype of the weights written, f32, bf16 or f16 (default: the
    /// parameters').
    #[arg(long, value_parser = parse_dtype)]
    dtype: Option<DType>,
    /// Llama family: the largest weight file; a larger model is written in shards with a
    /// model.safetensors.index.json, e.g. 2GB (default: 5GB, as transformers).
    #[arg(long, value_parser = parse_shard_size)]
    shard_size: Option<u64>,
    /// Llama family: replace the weight files the directory already holds (or the GGUF file).
    #[arg(long)]
    overwrite: bool,
    /// A LoRA run: write the model with its adapters merged into the weights (a Hugging Face
    /// model directory) instead of the adapters alone (a PEFT adapter directory that
    /// peft.PeftModel.from_pretrained(base, DIR) loads).
    #[arg(long)]
    merge: bool,
    /// The run directory, or a Hugging Face model directory or Hub id in the local cache, or a
    /// GGUF file (written again: in another dtype, or in shards; a GGUF file as a Hugging Face
    /// directory, its tokenizer and chat template with it).
    #[arg(value_name = "RUN_DIR|HF_DIR|HUB_ID|FILE.gguf")]
    run_dir: PathBuf,
    /// The directory to write (--hf).
    #[arg(required_unless_present = "gguf")]
    out_dir: Option<PathBuf>,
}

/// Runs `headroom generate`, streaming the text to standard output.
pub fn generate_text(args: &GenerateArgs) -> Result<()> {
    let sampling = Sampling {
        temperature: args.temperature,
        top_k: args.top_k,
        top_p: args.top_p,
    };
    sampling.validate()?;
    let run = SavedRun::open(&args.model.checkpoint, &args.model.settings(), None)?;
    let tokenizer_path = args
        .tokenizer
        .clone()
        .unwrap_or_else(|| run.tokenizer_path());
    if !tokenizer_path.exists() {
        return Err(Error::Data {
            path: tokenizer_path,
            detail: "missing: the run kept no tokenizer (it trained on data without one, not on \
                     text or token shards); give --tokenizer"
                .into(),
        });
    }
    let tokenizer = TextTokenizer::load(&tokenizer_path)?;
    let TrainModel::Gpt(gpt) = &run.model else {
        return Err(Error::Config {
            problems: vec!["generate: the run's model is an MLP; only a GPT generates text".into()],
        });
    };
    let mut stops = model_stops(&run)?;
    let prompt_text = match &args.chat {
        Some(message) => {
            let mut sources = identity_sources(&run.run_dir, &run.config);
            sources.push(tokenizer_path.clone());
            let template = args.chat_template.as_deref();
            let (text, eos) =
                crate::chat::chat_prompt(&sources, template, args.system.as_deref(), message)?;
            stops.extend(eos.and_then(|eos| tokenizer.token_to_id(&eos)));
            text
        }
        None => args.prompt.clone(),
    };
    let rendered = args.chat.is_some();
    let options = GenerateOptions {
        prompt: prompt_text.clone(),
        max_tokens: args.max_tokens,
        sampling,
        seed: args.seed,
        precision: run.config.compute_precision(),
        stops,
        rendered,
    };
    // Checked before the prompt is echoed: a refused prompt prints nothing.
    let prompt = checked_prompt(gpt, &tokenizer, &prompt_text, rendered)?;
    let mut out = std::io::stdout().lock();
    let io = |source| Error::Io {
        path: "standard output".into(),
        source,
    };
    // A chat prints the answer alone.
    if !rendered {
        write!(out, "{}", args.prompt).map_err(io)?;
    }
    let generated = generate(gpt, &tokenizer, &options, &mut |text| {
        write!(out, "{text}").and_then(|()| out.flush()).map_err(io)
    })?;
    writeln!(out).map_err(io)?;
    drop(out);
    if args.print_ids {
        let ids = serde_json::json!({"prompt": prompt, "generated": generated.tokens});
        eprintln!("{ids}");
    }
    let why = match generated.stop {
        Stop::MaxTokens => "--max-tokens reached",
        Stop::EndOfText => "the model ended the text",
        Stop::Context => "the model's context is full",
    };
    let per_token = generated.seconds / generated.tokens.len().max(1) as f64;
    tracing::info!(
        "{} prompt tokens in {:.2} s, then {} tokens at {:.1} ms each ({why}); key/value cache \
         {}, peak {} of {} allowed",
        generated.prompt_tokens,
        generated.prompt_seconds,
        generated.tokens.len(),
        per_token * 1e3,
        headroom_alloc::format_bytes(generated.cache_bytes as u64),
        headroom_alloc::format_bytes(run.device.allocator().stats().peak_in_use),
        headroom_alloc::format_bytes(run.device.allocator().with(|a| a.limit())),
    );
    Ok(())
}

/// Runs `headroom eval`: prints the score and writes it as JSON.
pub fn evaluate(args: &EvalArgs) -> Result<()> {
    let data = EvalData {
        shards: args.data.clone(),
        eval_size: args.eval_size,
        context: args.context,
    };
    let report = evaluate_run(&args.model.checkpoint, &data, &args.model.settings())?;
    // A run directory keeps its score; a downloaded model's directory is left as it was.
    let path = match (&args.json, pretrained_model(&args.model.checkpoint)) {
        (Some(path), _) => path.clone(),
        (None, None) => args.model.checkpoint.join("eval.json"),
        (None, Some(_)) => return say(report),
    };
    let json = serde_json::to_string_pretty(&report).map_err(|err| Error::Data {
        path: path.clone(),
        detail: err.to_string(),
    })?;
    std::fs::write(&path, json + "\n").map_err(|source| Error::Io {
        path: path.clone(),
        source,
    })?;
    say(format_args!("{report}; written to {}", path.display()))
}

/// Runs `headroom export --hf` or `--gguf`.
pub fn export(args: &ExportArgs) -> Result<()> {
    if let Some(out) = &args.gguf {
        return crate::gguf_export::export_gguf(&args.run_dir, out, args.quant, args.overwrite);
    }
    let Some(out_dir) = &args.out_dir else {
        return Err(Error::Config {
            problems: vec!["export --hf: give the directory to write".into()],
        });
    };
    let settings = UseSettings {
        device: Some("cpu".into()),
        memory_limit: None,
    };
    let run = SavedRun::open(&args.run_dir, &settings, None)?;
    let TrainModel::Gpt(gpt) = &run.model else {
        return Err(Error::Config {
            problems: vec!["export --hf: the run's model is an MLP, not a GPT".into()],
        });
    };
    let sources = identity_sources(&run.run_dir, &run.config);
    let mut merged;
    let gpt = match (&run.config.model.lora, args.merge) {
        (Some(lora), false) => {
            // Where the base is, as an absolute path where it can be found.
            let base = run.config.model.init_from.as_ref().map(|p| {
                let found = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
                found.display().to_string()
            });
            headroom_nn::hf::export_peft(gpt, lora, out_dir, base.as_deref())?;
            let carried = carry_companions(&sources, out_dir)?;
            say(format_args!(
                "exported the LoRA adapters of {} as a PEFT adapter directory: {}{}",
                args.run_dir.display(),
                out_dir.display(),
                carried_note(&carried)
            ))?;
            if let Some(base) = lora.base {
                say(quantized_base_note(base))?;
            }
            return Ok(());
        }
        (Some(_), true) => {
            merged = gpt.as_ref().clone();
            headroom_nn::lora::merge(&mut merged)?;
            &merged
        }
        (None, true) => {
            return Err(Error::Config {
                problems: vec!["export --merge: the run trained no LoRA adapters".into()],
            });
        }
        (None, false) => gpt.as_ref(),
    };
    // The start and end of a text are the tokenizer's: a tokenizer trained by `headroom
    // tokenizer train` has <|endoftext|> first, not last as GPT-2's does.
    let tokenizer = run.tokenizer_path();
    let loaded = match tokenizer.exists() {
        true => Some(TextTokenizer::load(&tokenizer)?),
        false => None,
    };
    let end_of_text = loaded.as_ref().and_then(TextTokenizer::end_of_text);
    let family = match gpt.config().family {
        Family::Gpt2 => {
            headroom_nn::hf::export_gpt2(gpt, out_dir, end_of_text)?;
            "GPT-2"
        }
        Family::Llama(_) | Family::Gemma3(_) => {
            let begin = loaded.as_ref().and_then(TextTokenizer::begin_of_text);
            let options = LlamaExport {
                dtype: args.dtype,
                shard_bytes: args.shard_size.unwrap_or(DEFAULT_SHARD_BYTES),
                bos: begin.or(end_of_text).map(u64::from),
                eos: end_of_text.map(u64::from),
                overwrite: args.overwrite,
            };
            headroom_nn::hf::export_llama(gpt, out_dir, &options)?;
            gpt.config().family.name()
        }
    };
    let carried = carry_companions(&sources, out_dir)?;
    // The base's token ids over those the tokenizer suggests, in both files that hold them.
    let tokens = special_tokens(&sources)?;
    if !tokens.is_empty() {
        for name in [headroom_nn::hf::CONFIG_FILE, GENERATION_CONFIG] {
            let path = out_dir.join(name);
            if path.is_file() {
                tokens.write_into(&path)?;
            }
        }
    }
    say(format_args!(
        "exported {} as a Hugging Face {family} directory: {}{}",
        args.run_dir.display(),
        out_dir.display(),
        carried_note(&carried)
    ))
}

/// The end-of-sequence ids of the model `run` keeps the identity of (none where it names none).
fn model_stops(run: &SavedRun) -> Result<Vec<u32>> {
    let tokens = special_tokens(&identity_sources(&run.run_dir, &run.config))?;
    Ok(tokens
        .eos
        .iter()
        .filter_map(|&id| u32::try_from(id).ok())
        .collect())
}

/// What a QLoRA run's adapter export says: the adapters learned to correct a quantized base,
/// so over the full-precision base they give other logits, and what reproduces the training.
fn quantized_base_note(base: QuantizedBase) -> String {
    let quantized = match base {
        QuantizedBase::Nf4 => {
            ", or bring PEFT close to it by loading the base quantized as it trained: NF4 in \
             blocks of 64 with double quantization (transformers' \
             BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=\"nf4\", \
             bnb_4bit_use_double_quant=True))"
        }
        QuantizedBase::Int8 => {
            "; no published loader stores a base as Headroom's block-wise int8 does"
        }
    };
    format!(
        "note: these adapters trained over a {} base; loaded by PEFT over the full-precision \
         base they give other logits than the trained model (QLoRA's nature, not an error). To \
         reproduce the trained model, export it merged (`headroom export --hf --merge`){quantized}.",
        match base {
            QuantizedBase::Nf4 => "NF4-quantized",
            QuantizedBase::Int8 => "int8-quantized",
        }
    )
}

/// What an export says of the tokenizer and generation files it carried.
fn carried_note(carried: &[&str]) -> String {
    match carried {
        [] => String::new(),
        names => format!(", with {}", names.join(", ")),
    }
}

/// `--dtype`.
fn parse_dtype(text: &str) -> std::result::Result<DType, String> {
    match text {
        "f32" => Ok(DType::F32),
        "bf16" => Ok(DType::BF16),
        "f16" => Ok(DType::F16),
        other => Err(format!("{other} is not f32, bf16 or f16")),
    }
}

/// `--quant`.
fn parse_quant(text: &str) -> std::result::Result<GgufQuant, String> {
    text.parse()
}

/// `--shard-size`: a size such as 2GB or 500MiB.
fn parse_shard_size(text: &str) -> std::result::Result<u64, String> {
    headroom_alloc::parse_size(text).map_err(|err| err.to_string())
}
