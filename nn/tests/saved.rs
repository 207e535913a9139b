//! The tape's account of what it saved, against the allocator: after a GPT's forward pass,
//! the activations the tape says its ops hold are exactly the activations still allocated,
//! whatever the recomputation and precision.

mod common;

use common::device;
use headroom_autograd::{SavedReport, Tape, Tensor, autocast};
use headroom_kernels::{DType, Device};
use headroom_nn::{Family, Gpt, GptConfig, Initializer, Recompute};

/// Bytes of activations live on `device`.
fn live_activations(device: &Device) -> u64 {
    let tags = device.allocator().stats().tags;
    tags.iter()
        .filter(|usage| usage.tag.is_activations())
        .map(|usage| usage.live)
        .sum()
}

/// The tape's account after a forward pass and the loss, and the activation bytes allocated
/// then beyond the loss and the targets: what the pass left, and the ids (which the embedding
/// keeps). The fused head and loss keeps the gradients it formed, not its operands.
fn forward(gpt: &Gpt, ids: &Tensor, targets: &Tensor) -> (SavedReport, u64) {
    let device = ids.device().clone();
    let tape = Tape::new();
    let loss = tape.record(|| gpt.loss(ids, targets, None)).unwrap();
    let outside = [&loss, targets].map(|t| t.array().buffer().reserved_bytes() as u64);
    let left = live_activations(&device) - outside.iter().sum::<u64>();
    (tape.saved(), left)
}

#[test]
fn the_tape_accounts_for_every_activation_the_forward_pass_keeps() {
    let device = device();
    let config = GptConfig {
        vocab: 37,
        context: 24,
        width: 32,
        heads: 4,
        layers: 2,
        dropout: 0.1,
        tie_embeddings: true,
        family: Family::Gpt2,
    };
    let (b, t) = (3, 21);
    let ids: Vec<u32> = (0..b * t).map(|i| (i * 7 % 37) as u32).collect();
    let targets: Vec<u32> = ids.iter().map(|&i| (i + 5) % 37).collect();
    let ids = Tensor::from_host(&device, [b, t], &ids).unwrap();
    let targets = Tensor::from_host(&device, [b, t], &targets).unwrap();
    let mut gpt = Gpt::new(&mut Initializer::new(&device, DType::F32, 3), config).unwrap();
    for policy in [None, Some(DType::BF16)] {
        let _policy = policy.map(autocast);
        let mut kept = Vec::new();
        let tiled = Recompute::BlocksTiledMlp { rows: 16 };
        for mode in [Recompute::None, Recompute::Cheap, Recompute::Blocks, tiled] {
            gpt.set_recompute(mode);
            let (saved, left) = forward(&gpt, &ids, &targets);
            assert_eq!(
                saved.activation_bytes() as u64,
                left,
                "{policy:?}, {mode:?}: the tape accounts for {} of {left} bytes\n{saved}",
                saved.activation_bytes()
            );
            let ops: Vec<&str> = saved
                .activation_bytes_by_op()
                .iter()
                .map(|(op, _)| *op)
                .collect();
            match mode {
                Recompute::None => assert!(ops.contains(&"gelu") && ops.contains(&"layer_norm")),
                // A GPT-2 block has no SwiGLU MLP: cheap-up recomputes as cheap.
                Recompute::Cheap | Recompute::CheapUp => {
                    assert!(!ops.contains(&"gelu"), "{policy:?}: {ops:?}");
                    assert!(ops.contains(&"gelu_linear") && ops.contains(&"layer_norm_linear"));
                }
                Recompute::Blocks | Recompute::BlocksTiledMlp { .. } => {
                    assert!(ops.contains(&"recompute"), "{ops:?}")
                }
            }
            // Every block's saved activations are its layers' kinds, named.
            let tags: Vec<&str> = saved
                .bytes_by_tag()
                .iter()
                .filter(|(tag, _)| tag.is_activations())
                .map(|(tag, _)| tag.name())
                .collect();
            assert!(
                tags.iter().all(|t| t.starts_with("activations")),
                "{tags:?}"
            );
            kept.push(left);
        }
        assert!(
            kept[0] > kept[1] && kept[1] > kept[2],
            "{policy:?}: none, cheap and blocks keep {kept:?}"
        );
        // Tiles keep nothing past their block: the blocks' inputs alone, as untiled (chunks
        // padded otherwise may differ by a granule or two).
        assert!(kept[3] <= kept[2], "{policy:?}: {kept:?}");
    }
}
