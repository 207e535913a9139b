//! Block-wise quantization of frozen weights, on the host: the formats a weight is stored in
//! before the products read it back (QLoRA's NF4). Each format quantizes exactly as
//! bitsandbytes does, so that a weight quantized here equals one quantized there, to the bit.

pub mod nf4;
