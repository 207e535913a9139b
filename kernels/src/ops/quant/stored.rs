//! One matrix stored quantized on a device.

use std::fmt;

use super::dequantize;
use super::kernels::{Codes, GatherOperands, GatherSpec};
use crate::array::Array;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::memory::DeviceKind;
use crate::quantize::double::{DoubleQuantized, SCALE_BLOCK};
use crate::quantize::dynamic::dynamic_map;
use crate::quantize::int8::Int8;
use crate::shape::Shape;

mod chunk;

use chunk::own_part;

/// How a frozen weight is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantFormat {
    /// QLoRA's: NF4 in blocks of 64, the blocks' scales quantized again in blocks of 256 on the
    /// 8-bit dynamic map (4.13 bits a value).
    Nf4,
    /// Block-wise absmax int8 in blocks of 64 (8.5 bits a value).
    Int8,
}

impl QuantFormat {
    /// Values per block.
    pub const BLOCK: usize = 64;

    /// Its name in configurations: `nf4` or `int8`.
    pub fn name(self) -> &'static str {
        match self {
            QuantFormat::Nf4 => "nf4",
            QuantFormat::Int8 => "int8",
        }
    }
}

impl fmt::Display for QuantFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The blocks' scales, which also say the format: f32 (int8), or quantized again (NF4's double
/// quantization).
#[derive(Debug, Clone)]
enum Scales {
    /// One f32 a block.
    Plain(Array),
    /// One dynamic-map code a block, in blocks of [`SCALE_BLOCK`] with an f32 scale each, plus
    /// the scales' mean.
    Double {
        codes: Array,
        absmax: Array,
        map: Array,
        offset: f32,
    },
}

/// A matrix (or any array) stored as codes and block scales on its device. Its values come back
/// by [`dequantize`](Self::dequantize), equal to the host's [`DoubleQuantized`] or [`Int8`]
/// values of the same input, to the bit.
#[derive(Debug, Clone)]
pub struct Quantized {
    shape: Shape,
    /// The dtype its values come back in unless asked otherwise (the model's).
    dtype: DType,
    /// Invariant: u8, as many as the format needs for `shape`, or one rank's chunk of them.
    codes: Array,
    /// Invariant: the blocks' scales (or their codes) cut as `codes` is; the rest whole.
    scales: Scales,
    /// `(rank, ranks)` where this is chunk `rank` of `ranks`, of whole blocks
    /// ([`chunk`](Self::chunk)); none where it holds the whole weight.
    cut: Option<(usize, usize)>,
}

impl Quantized {
    /// `values` (of `shape`, finite) quantized on the host and uploaded, coming back in `dtype`.
    /// On a meta device, which holds no values, `values` may be empty: only the sizes count.
    pub fn quantize(
        device: &Device,
        shape: impl Into<Shape>,
        values: &[f32],
        format: QuantFormat,
        dtype: DType,
    ) -> Result<Self> {
        let mut stored = Self::zeros(device, shape, format, dtype)?;
        if device.kind() != DeviceKind::Meta || !values.is_empty() {
            stored.write(values)?;
        }
        Ok(stored)
    }

    /// Storage for `shape` of zeros, to be written by [`write`](Self::write).
    pub fn zeros(
        device: &Device,
        shape: impl Into<Shape>,
        format: QuantFormat,
        dtype: DType,
    ) -> Result<Self> {
        let shape = shape.into();
        if !dtype.is_float() {
            return Err(Error::DType {
                op: "quantize",
                expected: "a float dtype to dequantize to".into(),
                got: dtype,
            });
        }
        let len = shape.numel();
        let blocks = len.div_ceil(QuantFormat::BLOCK);
        let (codes, scales) = match format {
            QuantFormat::Nf4 => (
                Array::zeros(device, [len.div_ceil(2)], DType::U8)?,
                Scales::Double {
                    codes: Array::zeros(device, [blocks], DType::U8)?,
                    absmax: Array::zeros(device, [blocks.div_ceil(SCALE_BLOCK)], DType::F32)?,
                    map: Array::from_host(device, [256], &dynamic_map())?,
                    offset: 0.0,
                },
            ),
            QuantFormat::Int8 => (
                Array::zeros(device, [len], DType::U8)?,
                Scales::Plain(Array::zeros(device, [blocks], DType::F32)?),
            ),
        };
        Ok(Self {
            shape,
            dtype,
            codes,
            scales,
            cut: None,
        })
    }

    /// Quantizes `values` (as many as the shape holds, finite) into this storage, in place:
    /// nothing is allocated on the device. A chunk takes its share of the codes alone, the
    /// same as the whole weight's cut ([`chunk`](Self::chunk)).
    pub fn write(&mut self, values: &[f32]) -> Result<()> {
        if values.len() != self.shape.numel() {
            return Err(Error::HostLength {
                op: "quantize",
                expected: self.shape.numel(),
                got: values.len(),
                shape: self.shape.clone(),
            });
        }
        let (cut, blocks) = (self.cut, self.blocks_kept());
        match &mut self.scales {
            Scales::Double {
                codes,
                absmax,
                offset,
                ..
            } => {
                let q = DoubleQuantized::quantize(values, QuantFormat::BLOCK)?;
                let packed = own_part(&q.packed, cut, blocks * QuantFormat::BLOCK / 2);
                self.codes.write_host(&packed)?;
                codes.write_host(&own_part(&q.scales.codes, cut, blocks))?;
                absmax.write_host(&q.scales.absmax)?;
                *offset = q.offset;
            }
            Scales::Plain(scales) => {
                let q = Int8::quantize(values, QuantFormat::BLOCK)?;
                let q_codes = bytemuck::cast_slice::<i8, u8>(&q.codes);
                let q_codes = own_part(q_codes, cut, blocks * QuantFormat::BLOCK);
                self.codes.write_host(&q_codes)?;
                scales.write_host(&own_part(&q.absmax, cut, blocks))?;
            }
        }
        Ok(())
    }

    /// The values, in `dtype`: a new array of the shape, computed from the codes.
    pub fn dequantize(&self, dtype: DType) -> Result<Array> {
        let codes = match self.scales {
            Scales::Plain(_) => Codes::Int8,
            Scales::Double { .. } => Codes::Nf4,
        };
        let block = QuantFormat::BLOCK;
        let scales = self.block_scales()?;
        let shape = self.shape.clone();
        dequantize(&self.codes, &scales, None, codes, block, shape, dtype)
    }

    /// Each block's scale in f32 (NF4's double quantization undone).
    pub(super) fn block_scales(&self) -> Result<Array> {
        self.check_whole("dequantize")?;
        match &self.scales {
            Scales::Plain(scales) => Ok(scales.clone()),
            Scales::Double {
                codes,
                absmax,
                map,
                offset,
            } => {
                let offset = Codes::Dynamic { offset: *offset };
                let blocks = codes.numel();
                dequantize(
                    codes,
                    absmax,
                    Some(map),
                    offset,
                    SCALE_BLOCK,
                    [blocks],
                    DType::F32,
                )
            }
        }
    }

    /// The codes, u8.
    pub(super) fn codes(&self) -> &Array {
        &self.codes
    }

    /// The rows of this `[rows, width]` table that `ids` (u32, any shape) name, in `dtype`:
    /// `ids.shape + [width]`, each value as [`dequantize`](Self::dequantize) gives it. An id
    /// out of range is an [`Error::Argument`].
    pub fn gather_rows(&self, ids: &Array, dtype: DType) -> Result<Array> {
        const OP: &str = "gather_rows";
        self.check_whole(OP)?;
        ids.check_indices(OP)?;
        self.device().check_same(ids.device(), OP)?;
        let &[rows, width] = self.shape.dims() else {
            return Err(Error::Shape {
                op: OP,
                detail: format!("the table {} must be [rows, width]", self.shape),
            });
        };
        if !dtype.is_float() {
            return Err(Error::DType {
                op: OP,
                expected: "a float dtype".into(),
                got: dtype,
            });
        }
        let mut dims = ids.shape().dims().to_vec();
        dims.push(width);
        let mut out = Array::uninit(self.device(), Shape::new(&dims), dtype, OP)?;
        let (codes, scales, scale_codes, map, offset) = match &self.scales {
            Scales::Plain(scales) => (Codes::Int8, scales, None, None, 0.0),
            Scales::Double {
                codes,
                absmax,
                map,
                offset,
            } => (
                Codes::Nf4,
                absmax,
                Some(codes.buffer()),
                Some(map.buffer()),
                *offset,
            ),
        };
        let spec = GatherSpec {
            codes,
            count: ids.numel(),
            rows,
            width,
            block: QuantFormat::BLOCK,
            scale_block: SCALE_BLOCK,
            offset,
        };
        let operands = GatherOperands {
            codes: self.codes.buffer(),
            scales: scales.buffer(),
            scale_codes,
            map,
            ids: ids.buffer(),
            out: out.buffer_mut(OP)?,
        };
        self.device().backend().gather_rows(&spec, operands)?;
        Ok(out)
    }

    /// The shape of the values (the whole weight's, where this is a chunk of it).
    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    /// The dims of the values.
    pub fn dims(&self) -> &[usize] {
        self.shape.dims()
    }

    /// How many values.
    pub fn numel(&self) -> usize {
        self.shape.numel()
    }

    /// The dtype its values come back in by default.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// How it is stored.
    pub fn format(&self) -> QuantFormat {
        match self.scales {
            Scales::Plain(_) => QuantFormat::Int8,
            Scales::Double { .. } => QuantFormat::Nf4,
        }
    }

    /// Its device.
    pub fn device(&self) -> &Device {
        self.codes.device()
    }

    /// A copy on `target`, the host tier of its device or the device of its host tier (the
    /// routes of [`Array::to_device`]): the same codes and scales, so the same values.
    pub fn to_device(&self, target: &Device) -> Result<Quantized> {
        self.map(|a| a.to_device(target))
    }

    /// [`Quantized::to_device`] from the host tier to a GPU, fetched ahead
    /// ([`Array::to_device_ahead`]): the device's kernels wait for the copies once
    /// [`ArrivingQuantized::arrived`] hands them over.
    pub fn to_device_ahead(&self, target: &Device) -> Result<ArrivingQuantized> {
        let copies = self.map(|a| Ok(a.to_device_ahead(target)?.into_pending()))?;
        Ok(ArrivingQuantized(copies))
    }

    /// The same weight with each of its arrays replaced by `f` of it.
    fn map(&self, mut f: impl FnMut(&Array) -> Result<Array>) -> Result<Quantized> {
        let scales = match &self.scales {
            Scales::Plain(scales) => Scales::Plain(f(scales)?),
            Scales::Double {
                codes,
                absmax,
                map,
                offset,
            } => Scales::Double {
                codes: f(codes)?,
                absmax: f(absmax)?,
                map: f(map)?,
                offset: *offset,
            },
        };
        Ok(Self {
            shape: self.shape.clone(),
            dtype: self.dtype,
            codes: f(&self.codes)?,
            scales,
            cut: self.cut,
        })
    }

    /// The arrays it holds on its device.
    pub fn arrays(&self) -> Vec<&Array> {
        let mut arrays = vec![&self.codes];
        match &self.scales {
            Scales::Plain(scales) => arrays.push(scales),
            Scales::Double {
                codes, absmax, map, ..
            } => arrays.extend([codes, absmax, map]),
        }
        arrays
    }

    /// Bytes it holds on its device (the allocator's reservations).
    pub fn bytes(&self) -> usize {
        self.arrays()
            .iter()
            .map(|a| a.buffer().reserved_bytes())
            .sum()
    }
}

/// A weight stored quantized whose copies to a GPU may still be running
/// ([`Quantized::to_device_ahead`]).
#[derive(Debug)]
pub struct ArrivingQuantized(Quantized);

impl ArrivingQuantized {
    /// The weight, once the device's kernels queued from now on wait for its copies (the host
    /// does not wait).
    pub fn arrived(self) -> Result<Quantized> {
        for array in self.0.arrays() {
            array.buffer().settle()?;
        }
        Ok(self.0)
    }
}
