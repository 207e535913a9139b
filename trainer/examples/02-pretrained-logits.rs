//! The logits a pretrained model (a Hugging Face directory or a GGUF file) gives a prompt, at
//! every position, as one line of JSON, to compare with other tools:
//! `cargo run --release -p headroom-trainer --example 02-pretrained-logits -- MODEL "PROMPT"`.

use std::path::PathBuf;

use headroom_autograd::Tensor;
use headroom_nn::Module;
use headroom_trainer::data::tokenizer::TextTokenizer;
use headroom_trainer::model::TrainModel;
use headroom_trainer::trained::{SavedRun, UseSettings};
use headroom_trainer::{Error, Result};

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(model), Some(prompt)) = (args.next(), args.next()) else {
        return Err(Error::config("usage: 02-pretrained-logits MODEL PROMPT"));
    };
    let model = PathBuf::from(model);
    let settings = UseSettings {
        device: Some("cpu".into()),
        memory_limit: None,
    };
    let run = SavedRun::open(&model, &settings, None)?;
    let tokenizer = TextTokenizer::load(&run.tokenizer_path())?;
    let TrainModel::Gpt(gpt) = &run.model else {
        return Err(Error::config("not a GPT: no logits of text"));
    };
    let ids = tokenizer.encode_document(&prompt)?;
    let input = Tensor::from_host(&run.device, [1, ids.len()], &ids)?;
    let logits = gpt.forward(&input)?.to_f64()?;
    let rows: Vec<&[f64]> = logits.chunks(gpt.config().vocab).collect();
    println!("{}", serde_json::json!({"ids": ids, "logits": rows}));
    Ok(())
}
