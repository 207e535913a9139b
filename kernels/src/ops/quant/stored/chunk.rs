//! One rank's chunk of a weight stored quantized (a frozen base sharded over ranks): whole
//! blocks of its codes and of their scales, gathered back into the whole weight where it runs.

use std::borrow::Cow;

use super::{QuantFormat, Quantized, Scales};
use crate::array::Array;
use crate::error::{Error, Result};
use crate::ops::data::{host_window, window};

impl Quantized {
    /// Chunk `rank` of `ranks` of this weight: its share of the blocks (`blocks.div_ceil(ranks)`
    /// a rank, the last chunks padded with zero codes), the codes and each block's scale (or
    /// scale code) cut alike; NF4's second-level scales and map, a few bytes, kept whole. It
    /// holds no values until [`gathered`](Self::gathered).
    pub fn chunk(&self, rank: usize, ranks: usize) -> Result<Quantized> {
        self.check_whole("chunk")?;
        if rank >= ranks {
            return Err(Error::Argument {
                op: "chunk",
                detail: format!("rank {rank} of {ranks}"),
            });
        }
        let blocks = chunk_blocks(self.numel(), ranks);
        let mut cut =
            self.map_cut(|a, per_block| window(a, rank * blocks * per_block, blocks * per_block))?;
        cut.cut = Some((rank, ranks));
        Ok(cut)
    }

    /// The whole weight from this chunk, `every_rank` giving each cut array's chunks from every
    /// rank, flat in rank order (an all-gather): the same codes and scales as the weight cut.
    /// A weight held whole is itself.
    pub fn gathered<E: From<Error>>(
        &self,
        mut every_rank: impl FnMut(&Array) -> Result<Array, E>,
    ) -> Result<Quantized, E> {
        let Some((_, ranks)) = self.cut else {
            return Ok(self.clone());
        };
        let numel = self.numel();
        let mut whole = self.map_cut(|mine, per_block| {
            let all = every_rank(mine)?;
            if all.numel() != mine.numel() * ranks {
                return Err(E::from(Error::Argument {
                    op: "gathered",
                    detail: format!(
                        "{} elements gathered from {ranks} chunks of {}",
                        all.numel(),
                        mine.numel()
                    ),
                }));
            }
            Ok(window(
                &all,
                0,
                (numel * per_block).div_ceil(QuantFormat::BLOCK),
            )?)
        })?;
        whole.cut = None;
        Ok(whole)
    }

    /// Whether this is one rank's chunk of the weight ([`chunk`](Self::chunk)).
    pub fn is_chunk(&self) -> bool {
        self.cut.is_some()
    }

    /// The blocks this storage holds: the whole weight's, or a chunk's share of them.
    pub(super) fn blocks_kept(&self) -> usize {
        chunk_blocks(self.numel(), self.cut.map_or(1, |(_, ranks)| ranks))
    }

    /// An [`Error::Argument`] for `op` where this is a chunk, which holds no values.
    pub(super) fn check_whole(&self, op: &'static str) -> Result<()> {
        match self.cut {
            Some((_, ranks)) => Err(Error::Argument {
                op,
                detail: format!(
                    "the weight {} is one chunk of {ranks}: gather it first",
                    self.shape()
                ),
            }),
            None => Ok(()),
        }
    }

    /// The same weight with each array cut by blocks (the codes and the blocks' scales)
    /// replaced by `f` of it and its elements a block; the others shared.
    fn map_cut<E>(
        &self,
        mut f: impl FnMut(&Array, usize) -> Result<Array, E>,
    ) -> Result<Quantized, E> {
        let (codes, scales) = match &self.scales {
            Scales::Plain(scales) => (
                f(&self.codes, QuantFormat::BLOCK)?,
                Scales::Plain(f(scales, 1)?),
            ),
            Scales::Double {
                codes,
                absmax,
                map,
                offset,
            } => (
                f(&self.codes, QuantFormat::BLOCK / 2)?,
                Scales::Double {
                    codes: f(codes, 1)?,
                    absmax: absmax.clone(),
                    map: map.clone(),
                    offset: *offset,
                },
            ),
        };
        Ok(Self {
            codes,
            scales,
            ..self.clone()
        })
    }
}

/// The blocks of a weight of `numel` values that each of `ranks` ranks keeps.
fn chunk_blocks(numel: usize, ranks: usize) -> usize {
    numel.div_ceil(QuantFormat::BLOCK).div_ceil(ranks)
}

/// The part of `whole` (a whole weight's codes or scales, on the host) that storage cut as
/// `cut` keeps, `len` of them from its rank's first block, zeros past the end of `whole`.
pub(super) fn own_part<T: Copy + Default>(
    whole: &[T],
    cut: Option<(usize, usize)>,
    len: usize,
) -> Cow<'_, [T]> {
    match cut {
        Some((rank, _)) => host_window(whole, rank * len, len),
        None => Cow::Borrowed(whole),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Device, DeviceConfig};

    /// The whole weight from `chunks`, each cut array concatenated in rank order as an
    /// all-gather gives it: the cut arrays come first in [`Quantized::arrays`], in that order.
    fn gather_all(chunks: &[Quantized]) -> Result<Quantized> {
        let mut next = 0;
        chunks[0].gathered(|mine| {
            let mut parts = Vec::new();
            for chunk in chunks {
                parts.extend(chunk.arrays()[next].to_f64()?);
            }
            next += 1;
            Array::from_f64(mine.device(), [parts.len()], mine.dtype(), &parts)
        })
    }

    #[test]
    fn chunks_gathered_give_the_weight_back_to_the_bit() -> Result<()> {
        let cpu = Device::cpu(DeviceConfig::new(1 << 24))?;
        // 1000 values: 16 blocks, the last partial; over 3 ranks, 6 blocks a rank, 2 padded.
        let values: Vec<f32> = (0..1000)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        for format in [QuantFormat::Nf4, QuantFormat::Int8] {
            let whole = Quantized::quantize(&cpu, [40, 25], &values, format, DType::F32)?;
            let chunks: Vec<Quantized> =
                (0..3).map(|r| whole.chunk(r, 3)).collect::<Result<_>>()?;
            assert!(chunks.iter().all(Quantized::is_chunk));
            assert!(chunks[0].bytes() < whole.bytes());
            let back = gather_all(&chunks)?;
            assert!(!back.is_chunk());
            for (a, b) in back.arrays().iter().zip(whole.arrays()) {
                assert_eq!(a.to_f64()?, b.to_f64()?, "{format}");
            }
            assert_eq!(
                back.dequantize(DType::F32)?.to_f64()?,
                whole.dequantize(DType::F32)?.to_f64()?
            );
        }
        Ok(())
    }

    #[test]
    fn a_chunk_written_from_the_whole_values_is_the_whole_weights_chunk() -> Result<()> {
        let cpu = Device::cpu(DeviceConfig::new(1 << 24))?;
        let values: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.37).sin()).collect();
        for format in [QuantFormat::Nf4, QuantFormat::Int8] {
            let whole = Quantized::quantize(&cpu, [40, 25], &values, format, DType::F32)?;
            for rank in 0..3 {
                let mut written =
                    Quantized::zeros(&cpu, [40, 25], format, DType::F32)?.chunk(rank, 3)?;
                written.write(&values)?;
                let cut = whole.chunk(rank, 3)?;
                for (a, b) in written.arrays().iter().zip(cut.arrays()) {
                    assert_eq!(a.to_f64()?, b.to_f64()?, "{format} rank {rank}");
                }
            }
        }
        Ok(())
    }

    #[test]
    fn a_chunk_holds_no_values_until_gathered() -> Result<()> {
        let cpu = Device::cpu(DeviceConfig::new(1 << 20))?;
        let whole = Quantized::quantize(&cpu, [8, 16], &[0.5; 128], QuantFormat::Nf4, DType::F32)?;
        let chunk = whole.chunk(1, 2)?;
        let err = chunk.dequantize(DType::F32).unwrap_err().to_string();
        assert!(err.contains("one chunk of 2: gather it first"), "{err}");
        assert!(chunk.chunk(0, 2).is_err());
        assert!(whole.chunk(2, 2).is_err());
        Ok(())
    }
}
