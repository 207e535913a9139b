//! Loading a Hugging Face GPT-2 directory into a [`Gpt`].

use std::borrow::Cow;
use std::collections::HashSet;
use std::path::Path;

use headroom_kernels::{DType, Shape};
use safetensors::tensor::{SafeTensors, TensorView};

use crate::decoder::Gpt;
use crate::error::{Error, Result};
use crate::hf::finite::non_finite;
use crate::hf::safetensors_file::{WEIGHTS_FILE, float_dtype};
use crate::json_fields::CONFIG_FILE;
use crate::models::gpt2::Gpt2Config;
use crate::models::gpt2::names::{
    LM_HEAD, Layout, PREFIX, WTE, hf_name, is_buffer, stored_dims, transpose_bytes,
};
use crate::overwrite::{base_shapes, fill_base};

/// One parameter of the model and the tensor of the file that fills it.
struct Source<'a> {
    /// The tensor's name in the file.
    key: String,
    layout: Layout,
    view: TensorView<'a>,
    dtype: DType,
    /// The parameter's shape.
    shape: Shape,
}

/// Fills every parameter of `gpt` from the Hugging Face GPT-2 directory `dir`: its
/// `config.json` (see [`Gpt2Config::read`]) and its `model.safetensors`.
///
/// - Both spellings of the names are read: with the `transformer.` prefix that
///   `save_pretrained` writes (`transformer.h.0.attn.c_attn.weight`) and without it, as in the
///   original `gpt2` upload (`h.0.attn.c_attn.weight`). The attention buffers
///   `h.{i}.attn.bias` and `h.{i}.attn.masked_bias` are skipped.
/// - `Conv1D` weights (`c_attn`, `c_proj`, `c_fc`), stored `[in, out]`, are transposed.
/// - A tied model takes its head from `wte`; a `lm_head.weight` in the file must then equal
///   `wte.weight`. An untied model needs `lm_head.weight`.
/// - f32, f64, f16 and bf16 tensors are cast to each parameter's dtype.
/// - A context smaller than `n_positions` takes the first rows of the position table (as
///   nanoGPT's `crop_block_size`).
/// - The layer norms take the file's `layer_norm_epsilon`; `n_head` must be the model's.
///
/// Every name and shape is checked before anything changes, and nothing changes on an error:
/// a tensor the model needs that is missing or of the wrong shape (both shapes in the message),
/// that holds a NaN or an infinity (the first one's index in the stored shape in the message),
/// or a tensor the model has no place for, is an [`Error::Checkpoint`] naming the first one; a
/// file that is not a complete safetensors file is [`Error::CorruptCheckpoint`]; a missing file
/// is [`Error::Io`].
pub fn load_gpt2(dir: &Path, gpt: &mut Gpt) -> Result<()> {
    if crate::module::Module::quantized_count(gpt) > 0 {
        return Err(Error::config(
            "gpt-2 import",
            "the model stores weights quantized, which the GPT-2 loader does not fill \
             (Llama-family models load quantized)"
                .to_owned(),
        ));
    }
    let config = Gpt2Config::read(dir)?;
    if config.n_head != gpt.config().heads {
        return Err(Error::Checkpoint {
            path: dir.join(CONFIG_FILE),
            key: "n_head".into(),
            detail: format!(
                "{} heads, where the model has {}",
                config.n_head,
                gpt.config().heads
            ),
        });
    }
    let path = dir.join(WEIGHTS_FILE);
    let bytes = super::safetensors_file::read(&path)?;
    let file = super::safetensors_file::parse(&path, &bytes)?;
    let checker = Checker {
        path: &path,
        file: &file,
        context: gpt.config().context,
    };
    let sources = checker.sources(gpt)?;
    checker.check_rest(&sources, gpt.head.is_none())?;
    let mut sources = sources.iter();
    fill_base(gpt, |name, _, write| {
        let source = sources.next().ok_or_else(|| Error::Checkpoint {
            path: path.clone(),
            key: name.to_owned(),
            detail: "the model changed while loading".into(),
        })?;
        write(source.dtype, &checker.bytes(source)?)
    })?;
    let eps = config.layer_norm_epsilon;
    for block in &mut gpt.blocks {
        block.ln1.set_eps(eps);
        block.ln2.set_eps(eps);
    }
    gpt.ln_f.set_eps(eps);
    Ok(())
}

/// Matches a model's parameters with the tensors of one file.
struct Checker<'a> {
    path: &'a Path,
    file: &'a SafeTensors<'a>,
    context: usize,
}

impl<'a> Checker<'a> {
    fn error(&self, key: &str, detail: impl Into<String>) -> Error {
        Error::Checkpoint {
            path: self.path.to_owned(),
            key: key.to_owned(),
            detail: detail.into(),
        }
    }

    /// The prefix the file's transformer tensors carry: `transformer.` when any name starts
    /// with it, none otherwise.
    fn prefix(&self) -> &'static str {
        match self.file.names().iter().any(|n| n.starts_with(PREFIX)) {
            true => PREFIX,
            false => "",
        }
    }

    /// The tensor of the file for each of the model's parameters, in visiting order, each
    /// checked for its name, dtype and shape.
    fn sources(&self, gpt: &Gpt) -> Result<Vec<Source<'a>>> {
        let prefix = self.prefix();
        base_shapes(gpt)
            .into_iter()
            .map(|(name, shape)| {
                let (hf, layout) = hf_name(&name).ok_or_else(|| {
                    self.error(&name, "a parameter GPT-2 has no tensor for".to_owned())
                })?;
                let key = match hf.as_str() {
                    LM_HEAD => hf,
                    _ => format!("{prefix}{hf}"),
                };
                let view = self.file.tensor(&key).map_err(|_| {
                    self.error(
                        &key,
                        format!("missing: the model's `{name}` needs it, of shape {shape}"),
                    )
                })?;
                let dtype = float_dtype(view.dtype()).ok_or_else(|| {
                    self.error(
                        &key,
                        format!("holds {:?}, not floating point", view.dtype()),
                    )
                })?;
                self.check_shape(&key, &view, shape.dims(), layout)?;
                if let Some(found) = non_finite(view.data(), dtype, view.shape()) {
                    return Err(self.error(&key, found.describe()));
                }
                Ok(Source {
                    key,
                    layout,
                    view,
                    dtype,
                    shape,
                })
            })
            .collect()
    }

    /// Checks that the file's tensor `key` fits a parameter of `dims` in `layout`.
    fn check_shape(
        &self,
        key: &str,
        view: &TensorView,
        dims: &[usize],
        layout: Layout,
    ) -> Result<()> {
        let stored = view.shape();
        let fits = match layout {
            Layout::Positions => matches!(
                (stored, dims),
                (&[rows, width], &[context, want]) if width == want && rows >= context
            ),
            Layout::Same | Layout::Transposed => stored == stored_dims(dims, layout).as_slice(),
        };
        if fits {
            return Ok(());
        }
        let want = Shape::new(&stored_dims(dims, layout));
        let mut detail = format!("holds {}, the model needs {want}", Shape::new(stored));
        match layout {
            Layout::Transposed => detail.push_str(" (a Conv1D weight, stored [in, out])"),
            Layout::Positions => {
                detail.push_str(&format!(" or more rows (a context of {})", self.context))
            }
            Layout::Same => {}
        }
        Err(self.error(key, detail))
    }

    /// Checks the tensors no parameter takes: a tied head equal to the token embedding, the
    /// attention buffers, and nothing else.
    fn check_rest(&self, sources: &[Source], tied: bool) -> Result<()> {
        let used: HashSet<&str> = sources.iter().map(|s| s.key.as_str()).collect();
        let mut rest: Vec<&str> = self
            .file
            .names()
            .into_iter()
            .filter(|name| !used.contains(name) && !is_buffer(name))
            .collect();
        rest.sort();
        if tied && let Some(at) = rest.iter().position(|name| *name == LM_HEAD) {
            rest.remove(at);
            self.check_tied_head()?;
        }
        match rest.first() {
            Some(name) => Err(self.error(
                name,
                "the model has no parameter for this tensor (another architecture or size?)",
            )),
            None => Ok(()),
        }
    }

    /// Checks that `lm_head.weight` holds the token embedding, as a tied model needs.
    fn check_tied_head(&self) -> Result<()> {
        let wte = format!("{}{WTE}", self.prefix());
        let head = self
            .file
            .tensor(LM_HEAD)
            .map_err(|err| self.error(LM_HEAD, err.to_string()))?;
        let same = self.file.tensor(&wte).is_ok_and(|wte| {
            wte.shape() == head.shape() && wte.dtype() == head.dtype() && wte.data() == head.data()
        });
        match same {
            true => Ok(()),
            false => Err(self.error(
                LM_HEAD,
                format!(
                    "differs from `{wte}`, and the model ties its head to the token embedding \
                     (build it with tie_embeddings false)"
                ),
            )),
        }
    }

    /// The bytes of the parameter `source` fills, in its file's dtype, laid out as the
    /// parameter is.
    fn bytes<'b>(&self, source: &'b Source) -> Result<Cow<'b, [u8]>> {
        let element = source.dtype.size();
        let data = source.view.data();
        let dims = source.shape.dims();
        Ok(match (source.layout, source.view.shape()) {
            (Layout::Transposed, &[rows, cols]) => {
                Cow::Owned(transpose_bytes(data, rows, cols, element))
            }
            (Layout::Positions, _) => {
                let len = dims.iter().product::<usize>() * element;
                Cow::Borrowed(
                    data.get(..len)
                        .ok_or_else(|| self.error(&source.key, "shorter than its shape"))?,
                )
            }
            _ => Cow::Borrowed(data),
        })
    }
}
