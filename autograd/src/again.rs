//! Values a backward rule forms again instead of holding: a weight gathered from the ranks
//! that shard it is gathered again when a rule needs it (FSDP's reshard after forward), so the
//! tape holds no whole weight between the passes.

use std::fmt;
use std::sync::Arc;

use headroom_kernels::Array;

use crate::error::Result;

/// How to form a tensor's values again.
#[derive(Clone)]
pub struct Again(Arc<dyn Fn() -> Result<Array> + Send + Sync>);

impl Again {
    /// Values formed by `form`, each time they are asked for.
    pub fn new(form: impl Fn() -> Result<Array> + Send + Sync + 'static) -> Self {
        Self(Arc::new(form))
    }

    /// The values, formed now.
    pub fn form(&self) -> Result<Array> {
        (self.0)()
    }
}

impl fmt::Debug for Again {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Again")
    }
}
