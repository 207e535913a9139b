//! The CUDA C sources of the kernels, one file per op family in its folder under `ops/`
//! (`ops/norm/norm.cu`), and their compilation by NVRTC.

use std::collections::BTreeMap;
use std::sync::Arc;

use cudarc::nvrtc::{CompileError, CompileOptions, Ptx, compile_ptx_with_opts};
use parking_lot::Mutex;

use super::driver::require_nvrtc;
use super::ptx_cache;
use crate::error::{Error, Result};

/// What every family's source starts with: storage types, conversions, reductions.
const PRELUDE: &str = include_str!("prelude.cuh");

/// A family of kernels: one `.cu` file in the family's folder under `ops/`, compiled and loaded
/// as one module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// Fills and casts (`data.cu`).
    Data,
    /// Unary and binary maps (`elementwise.cu`).
    Elementwise,
    /// Reductions over one axis (`reduce.cu`).
    Reduce,
    /// Softmax and log-softmax (`softmax.cu`).
    Softmax,
    /// Layer normalization (`norm.cu`).
    Norm,
    /// Embedding and the causal mask (`index.cu`).
    Index,
    /// The cross-entropy loss (`loss.cu`).
    Loss,
    /// Strided gathers and concatenation (`layout.cu`).
    Layout,
    /// Optimizer updates (`optim.cu`).
    Optim,
    /// Dropout (`random.cu`).
    Random,
    /// Memory-efficient attention (`attention.cu`).
    Attention,
    /// Rotary position embeddings (`rotary.cu`).
    Rotary,
    /// Dequantization of quantized weights (`quant.cu`).
    Quant,
}

impl Family {
    /// Every family.
    pub const ALL: [Family; 13] = [
        Family::Data,
        Family::Elementwise,
        Family::Reduce,
        Family::Softmax,
        Family::Norm,
        Family::Index,
        Family::Loss,
        Family::Layout,
        Family::Optim,
        Family::Random,
        Family::Attention,
        Family::Rotary,
        Family::Quant,
    ];

    /// The source file's name (in `ops/<family>/`).
    pub fn file(self) -> &'static str {
        match self {
            Family::Data => "data.cu",
            Family::Elementwise => "elementwise.cu",
            Family::Reduce => "reduce.cu",
            Family::Softmax => "softmax.cu",
            Family::Norm => "norm.cu",
            Family::Index => "index.cu",
            Family::Loss => "loss.cu",
            Family::Layout => "layout.cu",
            Family::Optim => "optim.cu",
            Family::Random => "random.cu",
            Family::Attention => "attention.cu",
            Family::Rotary => "rotary.cu",
            Family::Quant => "quant.cu",
        }
    }

    /// The file's own source, without the prelude.
    pub(crate) const fn body(self) -> &'static str {
        match self {
            Family::Data => include_str!("../ops/data/data.cu"),
            Family::Elementwise => include_str!("../ops/elementwise/elementwise.cu"),
            Family::Reduce => include_str!("../ops/reduce/reduce.cu"),
            Family::Softmax => include_str!("../ops/softmax/softmax.cu"),
            Family::Norm => include_str!("../ops/norm/norm.cu"),
            Family::Index => include_str!("../ops/index/index.cu"),
            Family::Loss => include_str!("../ops/loss/loss.cu"),
            Family::Layout => include_str!("../ops/layout/layout.cu"),
            Family::Optim => include_str!("../ops/optim/optim.cu"),
            Family::Random => include_str!("../ops/random/random.cu"),
            Family::Attention => include_str!("../ops/attention/attention.cu"),
            Family::Rotary => include_str!("../ops/rotary/rotary.cu"),
            Family::Quant => include_str!("../ops/quant/quant.cu"),
        }
    }

    /// The whole source NVRTC compiles: the prelude, then the file.
    pub fn source(self) -> String {
        format!("{PRELUDE}\n{}", self.body())
    }
}

/// Compiles a family to PTX for a virtual architecture such as `compute_90`, with NVRTC loaded
/// at run time. A kernel that does not compile fails with [`Error::Cuda`] carrying NVRTC's log.
pub fn compile_ptx(family: Family, arch: &str) -> Result<String> {
    Ok(compile(family, arch)?.to_src())
}

/// Compiles a family to machine code for a real architecture such as `sm_90`, as the driver
/// does when it loads the PTX, and fails on any warning of the assembler and on any use of
/// local memory (registers spilled, arrays on the stack): every kernel must fit the registers
/// of that architecture. A check for tests and CI; the backend itself loads PTX.
pub fn check_machine_code(family: Family, arch: &str) -> Result<()> {
    let strict = [
        "--ptxas-options=--warn-on-spills",
        "--ptxas-options=--warn-on-local-memory-usage",
        "--ptxas-options=--warning-as-error",
    ];
    compile_with(family, &family.source(), options(arch, &strict)).map(drop)
}

/// [`compile_ptx`], as the module the driver loads. Each family is compiled once per
/// architecture in a process (every device of that architecture loads the same PTX), and once
/// per machine where the PTX cache on disk is on (`ptx_cache`).
pub(crate) fn compile(family: Family, arch: &str) -> Result<Ptx> {
    static COMPILED: Mutex<BTreeMap<(Family, String), Arc<str>>> = Mutex::new(BTreeMap::new());
    let key = (family, arch.to_owned());
    if let Some(ptx) = COMPILED.lock().get(&key) {
        return Ok(Ptx::from_src(ptx.as_ref()));
    }
    let ptx: Arc<str> = cached_or_compiled(family, arch)?.into();
    COMPILED.lock().insert(key, Arc::clone(&ptx));
    Ok(Ptx::from_src(ptx.as_ref()))
}

/// The family's PTX for `arch` from the cache on disk, or compiled (and then cached).
fn cached_or_compiled(family: Family, arch: &str) -> Result<String> {
    let (source, options) = (family.source(), options(arch, &[]));
    let Some(folder) = ptx_cache::folder(|name| std::env::var_os(name)) else {
        return Ok(compile_with(family, &source, options)?.to_src());
    };
    require_nvrtc()?;
    let entry = ptx_cache::entry(&folder, family.file(), &source, &options, nvrtc_version());
    if let Some(ptx) = ptx_cache::load(&entry) {
        return Ok(ptx);
    }
    let ptx = compile_with(family, &source, options)?.to_src();
    ptx_cache::store(&entry, &ptx);
    Ok(ptx)
}

/// NVRTC's version, `(0, 0)` where it does not say.
fn nvrtc_version() -> (i32, i32) {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: NVRTC is loaded (`require_nvrtc`); the call writes two ints through pointers to
    // these locals and keeps neither.
    let status = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if status == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        (major, minor)
    } else {
        (0, 0)
    }
}

/// NVRTC's options for `arch`, then `extra`.
fn options(arch: &str, extra: &[&str]) -> Vec<String> {
    let mut options = vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()];
    options.extend(extra.iter().map(|option| option.to_string()));
    options
}

/// NVRTC's PTX of `source`, the family's whole source, with `options`.
fn compile_with(family: Family, source: &str, options: Vec<String>) -> Result<Ptx> {
    require_nvrtc()?;
    let options = CompileOptions {
        options,
        name: Some(family.file().into()),
        ..Default::default()
    };
    compile_ptx_with_opts(source, options).map_err(|err| {
        let (name, detail) = match err {
            CompileError::CompileError { nvrtc, log, .. } => {
                (format!("{nvrtc:?}"), log.to_string_lossy().into_owned())
            }
            other => (format!("{other:?}"), other.to_string()),
        };
        Error::Cuda {
            op: family.file(),
            call: "nvrtcCompileProgram",
            name,
            detail,
        }
    })
}
