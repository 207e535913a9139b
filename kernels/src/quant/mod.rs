//! Block-wise quantization of frozen weights, on the host: the formats a weight is stored in
//! before the products read it back: QLoRA's NF4 (`nf4`), with its scales quantized again
//! (`double`, on bitsandbytes' 8-bit dynamic map, `dynamic`), and block-wise absmax int8
//! (`int8`). Each quantizes as bitsandbytes does, so that a weight quantized here equals one
//! quantized there, to the bit (the tests say where bitsandbytes' CPU path rounds otherwise).

pub mod double;
pub mod dynamic;
pub mod int8;
pub mod nf4;
