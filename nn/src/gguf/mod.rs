//! GGUF files, llama.cpp's format for models: a header of typed metadata (`general.*`,
//! `{architecture}.*`, `tokenizer.*`) and tensor entries, then the tensors' data, plain or in
//! ggml's quantized blocks.
//!
//! [`GgufFile::open`] maps a file and reads its header, checking it whole: the magic, the
//! version (2 or 3), every metadata value of every GGUF type (nested arrays included), every
//! tensor's entry, the data section's alignment (`general.alignment`, 32 by default) and that
//! every tensor's data lies within the file. A file that is not GGUF, is truncated or corrupt
//! is [`Error::Gguf`](crate::Error::Gguf) naming the file and the key or tensor at fault; no
//! count or length read from the file is allocated before the file is known to hold it.
//!
//! Tensors are read one at a time, or a range of their rows at a time, as f32
//! ([`GgufFile::read_f32`], [`GgufFile::read_rows_into`]): F32, F16, BF16, Q4_0, Q4_1, Q5_0,
//! Q5_1, Q8_0 and the K-quants Q2_K to Q6_K, each dequantized as ggml's reference does, to the
//! bit. A [`TensorInfo`]'s shape is row-major (`[rows, cols]`), the reverse of GGUF's
//! innermost-first dimensions.
//!
//! [`LlamaLayout`] reads a file of llama.cpp's `llama`, `mistral`, `qwen2` or `qwen3`
//! architecture as Headroom's Llama family: the [`LlamaConfig`](crate::hf::LlamaConfig) its
//! `{arch}.*` keys describe, and each parameter of the [`Gpt`](crate::Gpt) it makes read from
//! the tensors that hold it (the query, key and value rows stacked into the fused `attn.qkv`,
//! the rows llama.cpp's converter permuted put back, [`unpermute_rows`]).
//!
//! [`GgufWriter`] writes a file (version 3, alignment 32): metadata of every type, tensor
//! entries, then each tensor's values asked for one at a time and stored as F32, F16, BF16,
//! Q8_0, Q4_0, Q5_0 or Q4_K ([`quantize`], ggml's reference quantizers to the bit), the whole
//! file written atomically.
//!
//! ```
//! use headroom_nn::gguf::GgufFile;
//! let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/gguf/types.gguf");
//! let file = GgufFile::open(&path)?;
//! assert_eq!(file.get_str("general.architecture")?, "gguf-test");
//! let info = file.tensor("q4_k").expect("the test file has it");
//! assert_eq!(info.shape(), [4, 256]);
//! let values = file.read_f32("q4_k")?;
//! assert_eq!(values.len(), 4 * 256);
//! # Ok::<(), headroom_nn::Error>(())
//! ```

mod cursor;
mod dequant;
mod encode;
mod export_types;
mod file;
mod ggml_type;
mod llama_export;
mod llama_layout;
mod load;
mod model_tensors;
mod quantize;
mod tensor_info;
#[cfg(test)]
mod test_writer;
mod tokenizer_out;
mod value;
mod vocab_out;
mod writer;

pub use export_types::GgufQuant;
pub use file::{ALIGNMENT_KEY, GgufFile, is_gguf};
pub use ggml_type::GgufType;
pub use llama_export::{GgufExport, GgufExported, architecture, export_llama_gguf};
pub use llama_layout::{ARCHITECTURE_KEY, LlamaLayout, ROPE_FREQS, permute_rows, unpermute_rows};
pub use load::{check_gguf, load_gguf};
pub use quantize::quantize;
pub use tensor_info::TensorInfo;
pub use tokenizer_out::{GgufTokenizer, SpecialIds};
pub use value::{Value, ValueType};
pub use writer::{GgufWriter, TensorEntry};
