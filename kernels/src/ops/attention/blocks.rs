//! The products of the CPU's attention blocks, on one thread: widened to the compute type
//! through the `gemm` crate ([`Widened`]), or bf16 operands multiplied as they are with f32
//! sums ([`Bf16Units`]), on the kernel a bf16 linear layer's products run on.
//! A block of weights (or their gradient) enters a bf16 product rounded to bf16 once.

use std::marker::PhantomData;

use gemm::Parallelism;
use half::bf16;

use crate::dtype::{Element, Float};
use crate::ops::gemm::bf16 as bf16_products;
use crate::ops::gemm::{GemmSpec, one_product};

/// A block operand stored row-major and contiguous, read as stored or transposed.
#[derive(Clone, Copy)]
pub(super) struct Mat<'a, X> {
    pub(super) data: &'a [X],
    pub(super) transposed: bool,
}

/// `m x k` by `k x n`: a block product's shape.
pub(super) type Shape = (usize, usize, usize);

/// One product of `shape` over `a` and `b`, into what `c` holds when `add`.
fn spec_of<X>((m, n, k): Shape, (a, b): (&Mat<'_, X>, &Mat<'_, X>), add: bool) -> GemmSpec {
    GemmSpec {
        batch: 1,
        m,
        n,
        k,
        trans_a: a.transposed,
        trans_b: b.transposed,
        a_batch_stride: 0,
        b_batch_stride: 0,
        accumulate: add,
    }
}

/// How the blocks of an attention over `T` multiply: their operands' element `X`, their sums
/// in `T`'s compute type.
pub(super) trait Blocks<T: Float>: Default {
    /// An operand's element.
    type X: Copy + Send + Sync;
    /// A stored element as an operand.
    fn operand(x: T) -> Self::X;
    /// A block of weights or gradients, computed in `T::C`, as an operand (in `buffer` where
    /// it must be rounded).
    fn rounded<'a>(c: &'a [T::C], buffer: &'a mut Vec<Self::X>) -> &'a [Self::X];
    /// `c (+)= op(a) op(b)` (`add`: into what `c` holds), `c` holding `m x n` contiguous.
    fn product(
        &mut self,
        shape: Shape,
        a: Mat<'_, Self::X>,
        b: Mat<'_, Self::X>,
        c: &mut [T::C],
        add: bool,
    );
}

/// Products in the compute type through the `gemm` crate.
pub(super) struct Widened<T>(PhantomData<T>);

impl<T> Default for Widened<T> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T: Float> Blocks<T> for Widened<T>
where
    T::C: Element,
{
    type X = T::C;

    #[inline(always)]
    fn operand(x: T) -> T::C {
        x.load()
    }

    fn rounded<'a>(c: &'a [T::C], _: &'a mut Vec<T::C>) -> &'a [T::C] {
        c
    }

    fn product(
        &mut self,
        shape: Shape,
        a: Mat<'_, T::C>,
        b: Mat<'_, T::C>,
        c: &mut [T::C],
        add: bool,
    ) {
        let spec = spec_of(shape, (&a, &b), add);
        one_product(&spec, (a.data, b.data), c, Parallelism::None);
    }
}

/// bf16 operands multiplied as they are ([`bf16_products::available`]), with the scratch their
/// packing takes.
#[derive(Default)]
pub(super) struct Bf16Units {
    scratch: Vec<u32>,
}

impl Blocks<bf16> for Bf16Units {
    type X = bf16;

    #[inline(always)]
    fn operand(x: bf16) -> bf16 {
        x
    }

    fn rounded<'a>(c: &'a [f32], buffer: &'a mut Vec<bf16>) -> &'a [bf16] {
        buffer.clear();
        buffer.extend(c.iter().map(|&x| bf16::store(x)));
        buffer
    }

    fn product(
        &mut self,
        shape: Shape,
        a: Mat<'_, bf16>,
        b: Mat<'_, bf16>,
        c: &mut [f32],
        add: bool,
    ) {
        let spec = spec_of(shape, (&a, &b), add);
        self.scratch.resize(bf16_products::scratch_words(&spec), 0);
        let c = &mut c[..spec.m * spec.n];
        let operands = (a.data, b.data);
        bf16_products::product(&spec, operands, c, &mut self.scratch, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values bf16 holds exactly, small enough that every sum is exact in f32.
    fn values(len: usize, seed: usize) -> Vec<bf16> {
        (0..len)
            .map(|i| bf16::from_f32(((i * 5 + seed * 11) % 17) as f32 / 4.0 - 2.0))
            .collect()
    }

    #[test]
    fn bf16_blocks_multiply_every_layout_as_the_widened_ones() {
        if !bf16_products::available() {
            return;
        }
        // A full block, and a cut one whose rows and pairs miss whole tiles.
        for (m, n, k) in [(64, 64, 64), (33, 17, 45)] {
            for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
                let (a, b) = (values(m * k, 1), values(k * n, 2));
                let held: Vec<f32> = values(m * n, 3).iter().map(|x| x.to_f32()).collect();
                let wide = |x: &[bf16]| x.iter().map(|v| v.to_f32()).collect::<Vec<_>>();
                for add in [false, true] {
                    let (mut want, mut got) = (held.clone(), held.clone());
                    let (aw, bw) = (wide(&a), wide(&b));
                    let shape = (m, n, k);
                    Widened::<bf16>::default().product(
                        shape,
                        Mat {
                            data: &aw,
                            transposed: ta,
                        },
                        Mat {
                            data: &bw,
                            transposed: tb,
                        },
                        &mut want,
                        add,
                    );
                    let (a, b) = (
                        Mat {
                            data: &a,
                            transposed: ta,
                        },
                        Mat {
                            data: &b,
                            transposed: tb,
                        },
                    );
                    Bf16Units::default().product(shape, a, b, &mut got, add);
                    assert_eq!(got, want, "{m}x{n}x{k} {ta} {tb} {add}");
                }
            }
        }
    }

    #[test]
    fn a_block_of_weights_enters_bf16_products_rounded_to_nearest() {
        let weights = [1.0 + 1.0 / 256.0 + 1.0 / 1024.0, -3.0, 1.0 / 3.0];
        let mut buffer = vec![bf16::ONE; 7];
        let rounded = Bf16Units::rounded(&weights, &mut buffer);
        let want: Vec<bf16> = weights.iter().map(|&x| bf16::from_f32(x)).collect();
        assert_eq!(rounded, want);
    }
}
