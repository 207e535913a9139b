//! Packed documents: several sequences in one row of a batch, each attending only to itself
//! and with positions that restart at 0, as transformers' packing with position ids and
//! FlashAttention's variable lengths give them. The layout is the rows' document starts
//! ([`headroom_kernels::ops::documents`]).

use headroom_autograd::Tensor;
use headroom_kernels::DType;
use headroom_kernels::ops::index::document_positions;

use super::Gpt;
use crate::error::{Error, Result};
use crate::module::Module;

impl Gpt {
    /// [`Gpt::loss`] over a packed batch: `starts` (`[B, T]`, U32, on the ids' device) gives
    /// each row's document starts (`starts[b][i]` is the index of the first token of position
    /// `i`'s document), so that each position attends only within its document and its
    /// position (learned or rotary) is `i - starts[b][i]`. The mean runs over every scored
    /// token of the batch, as if the documents ran one at a time and their losses were
    /// weighted by their scored tokens. Starts that are no layout of documents are refused
    /// (read back to the host on CUDA), their shape, dtype or device too.
    pub fn loss_in_documents(
        &self,
        ids: &Tensor,
        targets: &Tensor,
        ignore: Option<u32>,
        starts: &Tensor,
    ) -> Result<Tensor> {
        let h = self.hidden_in_documents(ids, starts)?;
        self.loss_of(h, targets, ignore)
    }

    /// [`Gpt::hidden`] over a packed batch whose rows' document starts are `starts` (as
    /// [`Gpt::loss_in_documents`] takes them).
    pub fn hidden_in_documents(&self, ids: &Tensor, starts: &Tensor) -> Result<Tensor> {
        let positions = self.positions_in_documents(ids, starts)?;
        self.hidden_in(ids, Some((starts.array(), &positions)))
    }

    /// Each token's position within its document (`[B, T]`, U32), after checking `starts`
    /// against `ids`: the same shape, U32, on one device, a layout of documents.
    fn positions_in_documents(&self, ids: &Tensor, starts: &Tensor) -> Result<Tensor> {
        const WHAT: &str = "gpt documents";
        if starts.dims() != ids.dims() || starts.dtype() != DType::U32 {
            let detail = format!(
                "document starts {} of {} for ids {}: they must be u32 of the ids' shape",
                starts.shape(),
                starts.dtype(),
                ids.shape()
            );
            return Err(Error::config(WHAT, detail));
        }
        if !ids.device().same(starts.device()) {
            let detail = format!(
                "document starts on {} for ids on {}",
                starts.device(),
                ids.device()
            );
            return Err(Error::config(WHAT, detail));
        }
        Ok(Tensor::new(document_positions(starts.array())?))
    }

    /// The embeddings of `ids` (`[B, T]`) with the learned positions (where the family has
    /// them) gathered at each token's position within its document (`positions`, `[B, T]`).
    pub(super) fn embedded_in_documents(&self, ids: &Tensor, positions: &Tensor) -> Result<Tensor> {
        let x = self.token_embedded(ids)?;
        match &self.pos_emb {
            Some(pos_emb) => Ok(x.add(&self.whole(pos_emb, "pos_emb")?.forward(positions)?)?),
            None => Ok(x),
        }
    }
}
