//! The kinds of layer a model's activations are counted by: each kind's forward pass runs under
//! its own allocator tag (`activations/attention`, `activations/mlp`, ...), so that memory
//! statistics, OOM reports and the planner's table say which layers hold the activations.

use std::sync::OnceLock;

use headroom_alloc::Tag;
use headroom_kernels::{Device, TagScope};

/// A kind of layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    /// Token and position embeddings.
    Embedding,
    /// Layer normalizations.
    Norm,
    /// Attention, its projections and its residual sum.
    Attention,
    /// The MLP and its residual sum.
    Mlp,
    /// The head and the loss.
    Head,
}

impl LayerKind {
    /// Every kind.
    pub const ALL: [LayerKind; 5] = [
        LayerKind::Embedding,
        LayerKind::Norm,
        LayerKind::Attention,
        LayerKind::Mlp,
        LayerKind::Head,
    ];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            LayerKind::Embedding => "embedding",
            LayerKind::Norm => "norm",
            LayerKind::Attention => "attention",
            LayerKind::Mlp => "mlp",
            LayerKind::Head => "head",
        }
    }

    /// The tag its activations are allocated under ([`Tag::activations_of`]).
    pub fn tag(self) -> Tag {
        static TAGS: OnceLock<[Tag; 5]> = OnceLock::new();
        let tags = TAGS.get_or_init(|| LayerKind::ALL.map(|k| Tag::activations_of(k.name())));
        tags[self as usize]
    }

    /// Allocations on `device` carry this kind's tag until the scope drops.
    pub fn scope(self, device: &Device) -> TagScope<'_> {
        device.scoped_tag(self.tag())
    }
}
