//! `model.param_dtype`: the dtype a GPT keeps its parameters in.

use headroom_kernels::DType;
use serde::{Deserialize, Serialize};

use super::{PrecisionKind, Problems, TrainConfig};

/// The dtype of a GPT's parameters, and so of their gradients and of an optimizer state kept
/// in the parameter's dtype. bf16 halves the weights, the gradients and such a state, as
/// torchtune trains: every product runs in bf16 whatever `precision` says (under bf16
/// autocast, which keeps the norms and the loss in f32), micro-batch gradients are summed in
/// bf16, and each update is rounded to bf16 stochastically so that steps under half of bf16's
/// spacing still move the weights on average. The memory policy never chooses it: the user
/// does, or a plan that fits nothing else names it as a remedy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ParamDtype {
    /// f32 master weights (the default).
    #[default]
    F32,
    /// bf16 weights, updated with stochastic rounding.
    Bf16,
}

impl ParamDtype {
    /// The parameters' dtype.
    pub fn dtype(self) -> DType {
        match self {
            Self::F32 => DType::F32,
            Self::Bf16 => DType::BF16,
        }
    }

    /// Its name, as the configuration writes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
        }
    }

    /// True for the default, f32 (which a written configuration leaves out).
    pub fn is_f32(&self) -> bool {
        *self == Self::F32
    }
}

impl TrainConfig {
    /// The precision a step runs under: `precision`, but bf16 for bf16 parameters, whose
    /// products are bf16 whatever it says, so that autocast keeps the norms and the loss in
    /// f32 as it does for f32 parameters.
    pub fn compute_precision(&self) -> PrecisionKind {
        match (self.model.param_dtype, self.precision.dtype) {
            (ParamDtype::Bf16, PrecisionKind::F32) => PrecisionKind::Bf16,
            (_, precision) => precision,
        }
    }

    /// The problems of bf16 parameters with the rest of the configuration.
    pub(super) fn check_param_dtype(&self, problems: &mut Problems) {
        if self.model.param_dtype.is_f32() {
            return;
        }
        problems.check(
            self.model.kind == super::ModelKind::Gpt,
            "model.param_dtype: bf16 parameters are a GPT's; an MLP reads f32 features with \
             no mixed-precision path for bf16 weights"
                .into(),
        );
        problems.check(
            self.precision.dtype != PrecisionKind::F16,
            "model.param_dtype: bf16 parameters with precision f16 would round every weight \
             to f16 for its products and scale a bf16 loss meant for f32 master weights; use \
             precision bf16 or f32 (the products run in bf16 either way)"
                .into(),
        );
    }
}
