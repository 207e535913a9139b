//! Every backward rule against central finite differences: in f64 tightly and in f32 more
//! loosely, on random inputs with broadcasting and 1-sized dimensions.

mod common;

use common::{Input, gradcheck_f64_f32, input, ranged};
use headroom_autograd::{Result, Tensor};
use headroom_kernels::ops::attention::{Attention, AttentionDropout};
use headroom_kernels::ops::reduce::ReduceOp;
use headroom_kernels::ops::rotary::{Llama3Scaling, inv_freq};
use headroom_kernels::{Array, DType};

/// Checks `f` on `inputs`.
fn check(name: &str, inputs: &[Input], f: impl Fn(&[Tensor]) -> Result<Tensor>) {
    gradcheck_f64_f32(name, inputs, &f);
}

#[test]
fn arithmetic_with_broadcasting() {
    let pairs: [(&'static [usize], &'static [usize]); 5] = [
        (&[3, 4], &[4]),
        (&[2, 1, 3], &[4, 1]),
        (&[1], &[5]),
        (&[3, 1], &[1, 4]),
        (&[2, 3], &[2, 3]),
    ];
    for (a, b) in pairs {
        check("add", &[input(a), input(b)], |x| x[0].add(&x[1]));
        check("sub", &[input(a), input(b)], |x| x[0].sub(&x[1]));
        check("mul", &[input(a), input(b)], |x| x[0].mul(&x[1]));
        check("div", &[input(a), ranged(b, 0.5, 2.0)], |x| x[0].div(&x[1]));
    }
    // A tensor used twice: its gradients add up.
    check("x * x + x", &[input(&[2, 3])], |x| {
        x[0].mul(&x[0])?.add(&x[0])
    });
    // Each addition hands one gradient array to both its inputs, so summing must not write
    // into an array another gradient still holds.
    check("x + x + x", &[input(&[2, 3])], |x| {
        x[0].add(&x[0])?.add(&x[0])
    });
}

#[test]
fn functions_of_one_tensor() {
    let shape: &'static [usize] = &[2, 1, 5];
    check("neg", &[input(shape)], |x| x[0].neg());
    check("scale", &[input(shape)], |x| x[0].scale(-1.5));
    check("exp", &[input(shape)], |x| x[0].exp());
    check("log", &[ranged(shape, 0.5, 3.0)], |x| x[0].log());
    check("sqrt", &[ranged(shape, 0.5, 3.0)], |x| x[0].sqrt());
    check("powf", &[ranged(shape, 0.5, 3.0)], |x| x[0].powf(1.7));
    check("relu", &[input(shape)], |x| x[0].relu());
    check("gelu", &[ranged(shape, -3.0, 3.0)], |x| x[0].gelu());
    check("tanh", &[input(shape)], |x| x[0].tanh());
}

#[test]
fn matrix_products_batched_shared_and_transposed() {
    let cases: [(&'static [usize], &'static [usize], bool, bool); 9] = [
        (&[3, 4], &[4, 5], false, false),
        (&[1, 4], &[4, 1], false, false),
        (&[2, 3, 4], &[2, 4, 5], false, false),
        (&[2, 3, 4], &[4, 5], false, false),
        (&[3, 4], &[2, 4, 5], false, false),
        (&[4, 3], &[4, 5], true, false),
        (&[3, 4], &[5, 4], false, true),
        (&[2, 4, 3], &[5, 4], true, true),
        (&[2, 4, 3], &[4, 5], true, false),
    ];
    for (a, b, ta, tb) in cases {
        let name = format!("matmul {a:?} {b:?} {ta} {tb}");
        check(&name, &[input(a), input(b)], |x| {
            x[0].matmul_t(&x[1], ta, tb)
        });
    }
}

#[test]
fn reductions_over_axes_and_everything() {
    let x: &'static [usize] = &[2, 3, 4];
    for axis in 0..3 {
        for op in [
            ReduceOp::Sum,
            ReduceOp::Mean,
            ReduceOp::Max,
            ReduceOp::SumSquares,
        ] {
            for keep in [false, true] {
                let name = format!("{op:?} axis {axis} keep {keep}");
                check(&name, &[input(x)], |t| t[0].reduce(op, axis, keep));
            }
        }
    }
    check("sum_all", &[input(&[3, 1, 2])], |t| t[0].sum_all());
    check("mean_all", &[input(&[3, 1, 2])], |t| t[0].mean_all());
}

#[test]
fn softmax_log_softmax_and_layer_norm() {
    check("softmax", &[input(&[3, 5])], |x| x[0].softmax());
    check("softmax of one", &[input(&[2, 1])], |x| x[0].softmax());
    check("log_softmax", &[input(&[2, 1, 4])], |x| x[0].log_softmax());
    check(
        "layer_norm",
        &[input(&[3, 6]), input(&[6]), input(&[6])],
        |x| x[0].layer_norm(&x[1], &x[2], 1e-5),
    );
    check(
        "layer_norm batched",
        &[input(&[2, 2, 5]), input(&[5]), input(&[5])],
        |x| x[0].layer_norm(&x[1], &x[2], 1e-5),
    );
}

/// The rotary frequencies of a head of `head` features for `x`'s device, in f64 (cast by the
/// op to f32 for an f32 input).
fn frequencies(x: &Tensor, head: usize, theta: f64, scaling: Option<Llama3Scaling>) -> Array {
    let freqs = inv_freq(head, theta, scaling).unwrap();
    Array::from_f64(x.array().device(), [head / 2], DType::F64, &freqs).unwrap()
}

#[test]
fn rotary_turns_its_gradient_back() {
    check("rotary", &[input(&[2, 5, 6])], |x| {
        x[0].rotary(&frequencies(&x[0], 6, 10_000.0, None), 3)
    });
    let llama3 = Llama3Scaling {
        factor: 32.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 8192,
    };
    check(
        "rotary with llama3 scaling",
        &[input(&[2, 1, 3, 64])],
        |x| x[0].rotary(&frequencies(&x[0], 64, 500_000.0, Some(llama3)), 4001),
    );
    // Between two products, as queries and keys are: the gradient arriving varies per element.
    check(
        "rotary between products",
        &[input(&[3, 4]), input(&[4, 8]), input(&[8, 2])],
        |x| {
            let h = x[0].matmul(&x[1])?.reshape([1, 3, 8])?;
            let turned = h.rotary(&frequencies(&x[0], 8, 10_000.0, None), 1)?;
            turned.reshape([3, 8])?.matmul(&x[2])
        },
    );
}

#[test]
fn rms_norm_and_swiglu() {
    check("rms_norm", &[input(&[3, 6]), input(&[6])], |x| {
        x[0].rms_norm(&x[1], 1e-6)
    });
    check("rms_norm batched", &[input(&[2, 2, 5]), input(&[5])], |x| {
        x[0].rms_norm(&x[1], 1e-6)
    });
    // Rows of one element: x / sqrt(x^2 + eps), flat but for eps, which a large eps makes
    // big enough for finite differences to see.
    check("rms_norm of one", &[input(&[4, 1]), input(&[1])], |x| {
        x[0].rms_norm(&x[1], 0.5)
    });
    check(
        "swiglu",
        &[ranged(&[3, 4], -4.0, 4.0), input(&[3, 4])],
        |x| x[0].swiglu(&x[1]),
    );
    // One tensor as both gate and up: its two gradients add up.
    check("swiglu of x with itself", &[input(&[2, 3])], |x| {
        x[0].swiglu(&x[0])
    });
}

#[test]
fn embedding_cross_entropy_and_causal_mask() {
    let device = common::shared_device();
    let ids = Tensor::from_host(&device, [2, 3], &[4u32, 0, 4, 1, 1, 2]).unwrap();
    check("embedding", &[input(&[5, 3])], |x| x[0].embedding(&ids));
    let targets = Tensor::from_host(&device, [4], &[2u32, 99, 0, 4]).unwrap();
    check("cross_entropy", &[input(&[4, 5])], |x| {
        x[0].cross_entropy(&targets, Some(99))
    });
    check("causal_mask then softmax", &[input(&[2, 3, 3])], |x| {
        x[0].causal_mask(f64::NEG_INFINITY)?.softmax()
    });
    check("causal_mask", &[input(&[1, 4, 4])], |x| {
        x[0].causal_mask(-3.0)
    });
}

#[test]
fn dropout_regenerates_its_mask() {
    check("dropout", &[input(&[4, 6])], |x| x[0].dropout(0.3, 7));
}

#[test]
fn layout_ops() {
    check("reshape", &[input(&[2, 6])], |x| x[0].reshape([3, 4]));
    check("permute", &[input(&[2, 3, 4])], |x| {
        x[0].permute(&[2, 0, 1])
    });
    check("transpose", &[input(&[2, 3, 4])], |x| x[0].transpose(0, 2));
    check("broadcast_to", &[input(&[3, 1])], |x| {
        x[0].broadcast_to([2, 3, 4])
    });
    check("split, one piece unused", &[input(&[4, 6])], |x| {
        let pieces = x[0].split(1, &[1, 2, 3])?;
        Tensor::concat(&[&pieces[2], &pieces[0]], 1)
    });
    check("concat", &[input(&[2, 3]), input(&[1, 3])], |x| {
        Tensor::concat(&[&x[0], &x[1]], 0)
    });
    check("narrow", &[input(&[3, 5])], |x| x[0].narrow(1, 1, 3));
}

#[test]
fn a_causal_attention_head() {
    // softmax(mask(q k^T / sqrt(d))) v with q, k, v from one input through three weights.
    check(
        "attention",
        &[
            input(&[2, 4, 3]),
            input(&[3, 3]),
            input(&[3, 3]),
            input(&[3, 3]),
        ],
        |x| {
            let q = x[0].matmul(&x[1])?;
            let k = x[0].matmul(&x[2])?;
            let v = x[0].matmul(&x[3])?;
            let scores = q.matmul_t(&k, false, true)?.scale(1.0 / 3f64.sqrt())?;
            scores.causal_mask(f64::NEG_INFINITY)?.softmax()?.matmul(&v)
        },
    );
}

#[test]
fn grouped_query_attention_gives_gradients_of_the_grouped_shapes() {
    // Four query heads over two key/value heads (groups of 2), and over one (multi-query); the
    // check fails unless the keys' and values' gradients have their operands' shapes.
    let groups: [&'static [usize]; 2] = [&[2, 2, 5, 3], &[2, 1, 5, 3]];
    for kv in groups {
        for dropout in [None, Some(AttentionDropout { p: 0.25, seed: 11 })] {
            let how = Attention {
                scale: 0.6,
                causal: true,
                window: None,
                dropout,
            };
            check(
                "grouped attention",
                &[input(&[2, 4, 5, 3]), input(kv), input(kv)],
                |x| x[0].scaled_dot_product_attention(&x[1], &x[2], how),
            );
        }
    }
}

#[test]
fn sliding_window_attention_over_grouped_heads() {
    // Windows of 2 and 3 over 7 positions: the first rows see fewer keys, the later ones only
    // the last 2 or 3; with dropout and without. (A window of 1 has no gradient for the queries
    // and keys: each weight is 1.)
    for window in [2, 3] {
        for dropout in [None, Some(AttentionDropout { p: 0.25, seed: 7 })] {
            let how = Attention {
                scale: 0.6,
                causal: true,
                window: Some(window),
                dropout,
            };
            check(
                "sliding-window attention",
                &[
                    input(&[2, 4, 7, 3]),
                    input(&[2, 2, 7, 3]),
                    input(&[2, 2, 7, 3]),
                ],
                |x| x[0].scaled_dot_product_attention(&x[1], &x[2], how),
            );
        }
    }
}

/// Document starts of two rows of 7 positions for `x`'s device: documents of 3, 1 and 3, and
/// of 2 and 5.
fn starts(x: &Tensor) -> Array {
    let starts = [0u32, 0, 0, 3, 4, 4, 4, 0, 0, 2, 2, 2, 2, 2];
    Array::from_host(x.array().device(), [2, 7], &starts).unwrap()
}

#[test]
fn attention_and_rotary_in_packed_documents() {
    for (window, dropout) in [
        (None, None),
        (Some(2), Some(AttentionDropout { p: 0.25, seed: 7 })),
    ] {
        let how = Attention {
            scale: 0.6,
            causal: true,
            window,
            dropout,
        };
        check(
            "attention in documents",
            &[
                input(&[2, 4, 7, 4]),
                input(&[2, 2, 7, 4]),
                input(&[2, 2, 7, 4]),
            ],
            |x| {
                let starts = starts(&x[0]);
                let freq = frequencies(&x[0], 4, 10_000.0, None);
                let q = x[0].rotary_in_documents(&freq, &starts)?;
                let k = x[1].rotary_in_documents(&freq, &starts)?;
                q.scaled_dot_product_attention_in_documents(&k, &x[2], how, Some(&starts))
            },
        );
    }
}

#[test]
fn linear_layers() {
    check(
        "linear",
        &[input(&[3, 4]), input(&[5, 4]), input(&[5])],
        |x| x[0].linear(&x[1], Some(&x[2])),
    );
    check(
        "linear batched, no bias",
        &[input(&[2, 3, 4]), input(&[5, 4])],
        |x| x[0].linear(&x[1], None),
    );
}

#[test]
fn products_that_recompute_their_cheap_operand() {
    check(
        "rms_norm_linear",
        &[
            input(&[2, 3, 6]),
            ranged(&[6], 0.5, 1.5),
            input(&[4, 6]),
            input(&[4]),
        ],
        |x| x[0].rms_norm_linear((&x[1], 1e-6), &x[2], Some(&x[3])),
    );
    check(
        "rms_norm_linear, no bias",
        &[input(&[3, 5]), input(&[5]), input(&[2, 5])],
        |x| x[0].rms_norm_linear((&x[1], 1e-6), &x[2], None),
    );
    check(
        "swiglu_linear",
        &[
            ranged(&[2, 3, 4], -4.0, 4.0),
            input(&[2, 3, 4]),
            input(&[5, 4]),
            input(&[5]),
        ],
        |x| x[0].swiglu_linear(&x[1], &x[2], Some(&x[3])),
    );
    // One tensor as both gate and up: its two gradients add up.
    check(
        "swiglu_linear of x with itself, no bias",
        &[input(&[3, 4]), input(&[2, 4])],
        |x| x[0].swiglu_linear(&x[0], &x[1], None),
    );
    check(
        "layer_norm_linear",
        &[
            input(&[3, 6]),
            ranged(&[6], 0.5, 1.5),
            input(&[6]),
            input(&[4, 6]),
            input(&[4]),
        ],
        |x| x[0].layer_norm_linear((&x[1], &x[2], 1e-5), &x[3], Some(&x[4])),
    );
    check(
        "gelu_linear",
        &[ranged(&[2, 3, 5], -3.0, 3.0), input(&[4, 5]), input(&[4])],
        |x| x[0].gelu_linear(&x[1], Some(&x[2])),
    );
}
