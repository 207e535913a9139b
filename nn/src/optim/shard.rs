//! Which rank keeps each parameter's optimizer state when a data-parallel run shards it (ZeRO
//! stage 1, Rajbhandari et al. 2020). Every parameter's state goes whole to one rank, as
//! PyTorch's `ZeroRedundancyOptimizer` partitions it: the largest parameters first, each to the
//! rank that keeps the fewest elements so far (the lowest rank on ties). The rank that keeps a
//! parameter's state updates it and sends the new weights to the others.

use crate::error::{Error, Result};
use crate::module::Module;

/// The owner of each parameter's state, and the rank this process is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateShard {
    /// This process's rank, below `ranks`.
    rank: usize,
    /// The number of ranks sharing the state, at least 1.
    ranks: usize,
    /// The rank that keeps each parameter's state, in the model's visiting order; each below
    /// `ranks`.
    owners: Vec<usize>,
}

impl StateShard {
    /// One process keeps the state of every parameter of `model`.
    pub fn whole(model: &dyn Module) -> Self {
        Self {
            rank: 0,
            ranks: 1,
            owners: vec![0; model.parameters().len()],
        }
    }

    /// The share of `rank` among `ranks`, balanced by elements (each buffer of a parameter
    /// holds as many as the parameter, whatever its precision).
    pub fn balanced(model: &dyn Module, rank: usize, ranks: usize) -> Result<Self> {
        if rank >= ranks {
            return Err(Error::config(
                "optimizer state shard",
                format!("rank {rank} is not one of {ranks} ranks"),
            ));
        }
        let sizes: Vec<usize> = model.parameters().iter().map(|p| p.numel()).collect();
        let mut order: Vec<usize> = (0..sizes.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
        let mut kept = vec![0usize; ranks];
        let mut owners = vec![0; sizes.len()];
        for i in order {
            let least = (0..ranks).min_by_key(|&r| kept[r]).unwrap_or(0);
            owners[i] = least;
            kept[least] += sizes[i];
        }
        Ok(Self {
            rank,
            ranks,
            owners,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks sharing the state.
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// The rank that keeps the state of parameter number `index` (none past the model's
    /// parameters).
    pub fn owner(&self, index: usize) -> Option<usize> {
        self.owners.get(index).copied()
    }

    /// Whether this process keeps the state of parameter number `index`.
    pub fn keeps(&self, index: usize) -> bool {
        self.owner(index) == Some(self.rank)
    }

    /// The rank that keeps the most elements of `model`'s parameters (the lowest of equals).
    pub fn fullest(&self, model: &dyn Module) -> usize {
        let mut kept = vec![0usize; self.ranks];
        for (owner, param) in self.owners.iter().zip(model.parameters()) {
            kept[*owner] += param.numel();
        }
        let most = kept.iter().copied().max().unwrap_or(0);
        kept.iter().position(|&k| k == most).unwrap_or(0)
    }

    /// The number of parameters it assigns.
    pub fn len(&self) -> usize {
        self.owners.len()
    }

    /// Whether it assigns no parameter.
    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Initializer, Linear};
    use headroom_autograd::Tensor;
    use headroom_kernels::{DType, Device, DeviceConfig};

    /// A model of parameters of these sizes (a linear layer each, `n x 1` without bias).
    struct Sizes(Vec<Linear>);

    impl Module for Sizes {
        fn forward(&self, x: &Tensor) -> Result<Tensor> {
            Ok(x.clone())
        }

        fn visit(&self, f: &mut dyn FnMut(&str, &Tensor)) {
            for (i, layer) in self.0.iter().enumerate() {
                layer.visit(&mut |name, t| f(&format!("{i}.{name}"), t));
            }
        }

        fn visit_mut(&mut self, f: &mut dyn FnMut(&str, &mut Tensor) -> Result<()>) -> Result<()> {
            for (i, layer) in self.0.iter_mut().enumerate() {
                layer.visit_mut(&mut |name, t| f(&format!("{i}.{name}"), t))?;
            }
            Ok(())
        }
    }

    fn model(sizes: &[usize]) -> Sizes {
        let device = Device::meta(DeviceConfig::new(1 << 20)).unwrap();
        let mut init = Initializer::new(&device, DType::F32, 0);
        Sizes(
            sizes
                .iter()
                .map(|&n| Linear::new(&mut init, 1, n, false).unwrap())
                .collect(),
        )
    }

    #[test]
    fn each_parameter_has_one_owner_and_the_shares_are_balanced() {
        let sizes = [50, 10, 40, 30, 20, 10, 40];
        let m = model(&sizes);
        for ranks in 1..=4 {
            let shards: Vec<_> = (0..ranks)
                .map(|r| StateShard::balanced(&m, r, ranks).unwrap())
                .collect();
            let mut kept = vec![0; ranks];
            for (i, &size) in sizes.iter().enumerate() {
                let keepers: Vec<usize> = (0..ranks).filter(|&r| shards[r].keeps(i)).collect();
                assert_eq!(keepers.len(), 1, "parameter {i} over {ranks} ranks");
                assert_eq!(shards[0].owner(i), Some(keepers[0]), "every rank agrees");
                kept[keepers[0]] += size;
            }
            let (most, least) = (kept.iter().max().unwrap(), kept.iter().min().unwrap());
            assert!(most - least <= 50, "{ranks} ranks keep {kept:?}");
        }
        // Largest first, each to the emptiest rank: 50 and 40 apart, the other 40 beside 40, 30
        // beside 50, and so on.
        let two = StateShard::balanced(&m, 0, 2).unwrap();
        let owners: Vec<_> = (0..sizes.len()).map(|i| two.owner(i).unwrap()).collect();
        assert_eq!(owners, [0, 1, 1, 0, 0, 1, 1]);
        assert_eq!(two.fullest(&m), 0, "100 elements each: the lowest rank");
        let three = StateShard::balanced(&m, 0, 3).unwrap();
        // 50 | 40 | 40, then 30 to rank 1, 20 to rank 2, 10 to rank 0 and 10 to rank 0 again:
        // 70, 70 and 60 elements.
        assert_eq!(three.fullest(&m), 0);
        let four = StateShard::balanced(&m, 0, 4).unwrap();
        // 50 | 40 | 40 | 30, then 20 to rank 3, 10 to rank 1, 10 to rank 2: 50, 50, 50, 50.
        assert_eq!(four.fullest(&m), 0);
        let big_last = model(&[10, 10, 100]);
        // 100 to rank 0, then 10 to rank 1 and 10 to rank 1 again.
        assert_eq!(
            StateShard::balanced(&big_last, 0, 2).unwrap().owner(0),
            Some(1)
        );
        let uneven = model(&[30, 20, 20]);
        // 30 to rank 0, then both 20s to rank 1: 40 elements against 30.
        assert_eq!(
            StateShard::balanced(&uneven, 0, 2)
                .unwrap()
                .fullest(&uneven),
            1
        );
    }

    #[test]
    fn a_rank_outside_the_world_is_refused() {
        let err = StateShard::balanced(&model(&[4]), 2, 2).unwrap_err();
        assert!(
            err.to_string().contains("rank 2 is not one of 2 ranks"),
            "{err}"
        );
        assert!(StateShard::whole(&model(&[4, 4])).keeps(1));
    }
}
