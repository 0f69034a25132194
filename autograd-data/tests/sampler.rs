//! `DistributedSampler`: PyTorch's sharding, padding and `drop_last`
//! rules, and the loader reading a rank's shard.

use autograd_core::RefBackend;
use autograd_data::{DataLoader, DistributedSampler, TensorDataset};
use autograd_tensor::Tensor;

fn shards(len: usize, world: usize, epoch: usize, drop_last: bool) -> Vec<Vec<usize>> {
    (0..world).map(|r| DistributedSampler::new(world, r).unwrap().seed(11).drop_last(drop_last).indices(len, epoch)).collect()
}

#[test]
fn every_example_exactly_once_per_epoch_when_the_ranks_divide_it() {
    for world in [1, 2, 3, 4] {
        let len = 12 * world;
        for epoch in 0..3 {
            let mut all: Vec<usize> = shards(len, world, epoch, false).concat();
            assert_eq!(all.len(), len);
            all.sort();
            assert_eq!(all, (0..len).collect::<Vec<_>>(), "world {world}, epoch {epoch}");
        }
    }
}

#[test]
fn reshuffled_each_epoch_from_the_shared_seed() {
    let e0 = shards(100, 2, 0, false);
    let e1 = shards(100, 2, 1, false);
    assert_ne!(e0, e1, "a new order each epoch");
    assert_eq!(e0, shards(100, 2, 0, false), "the same seed and epoch give the same shards");
    let other_seed: Vec<usize> = DistributedSampler::new(2, 0).unwrap().seed(12).indices(100, 0);
    assert_ne!(e0[0], other_seed);
    // Rank r takes positions r, r + world, ... of one permutation shared by all ranks.
    let unsharded = DistributedSampler::new(1, 0).unwrap().seed(11).indices(100, 0);
    assert_eq!(e0[0], unsharded.iter().copied().step_by(2).collect::<Vec<_>>());
    assert_eq!(e0[1], unsharded.iter().copied().skip(1).step_by(2).collect::<Vec<_>>());
}

#[test]
fn pytorchs_padding_and_drop_last() {
    // torch.utils.data.DistributedSampler(range(10), num_replicas=3, rank=r, shuffle=False):
    // [0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]; with drop_last=True: [0, 3, 6], [1, 4, 7], [2, 5, 8].
    let plain = |r, drop| DistributedSampler::new(3, r).unwrap().shuffle(false).drop_last(drop).indices(10, 0);
    assert_eq!([plain(0, false), plain(1, false), plain(2, false)], [vec![0, 3, 6, 9], vec![1, 4, 7, 0], vec![2, 5, 8, 1]]);
    assert_eq!([plain(0, true), plain(1, true), plain(2, true)], [vec![0, 3, 6], vec![1, 4, 7], vec![2, 5, 8]]);
    // Fewer samples than ranks: padding cycles through the data set (PyTorch repeats the list).
    let tiny: Vec<Vec<usize>> = (0..5).map(|r| DistributedSampler::new(5, r).unwrap().shuffle(false).indices(2, 0)).collect();
    assert_eq!(tiny, vec![vec![0], vec![1], vec![0], vec![1], vec![0]]);
    assert!(DistributedSampler::new(5, 0).unwrap().drop_last(true).indices(2, 0).is_empty());
    assert!(DistributedSampler::new(2, 1).unwrap().indices(0, 0).is_empty());
    // Shuffled and padded: the padding repeats the start of the shuffled order.
    let s = shards(10, 3, 0, false);
    let order = DistributedSampler::new(1, 0).unwrap().seed(11).indices(10, 0);
    assert_eq!(s[1][3], order[0]);
    assert_eq!(s[2][3], order[1]);
}

#[test]
fn invalid_ranks_are_errors() {
    assert!(DistributedSampler::new(2, 2).unwrap_err().to_string().contains("invalid rank 2"));
    assert!(DistributedSampler::new(0, 0).is_err());
}

#[test]
fn the_loader_reads_the_shard_and_follows_its_epochs() {
    let data = || TensorDataset::new(vec![Tensor::<RefBackend>::arange(0.0, 9.0, 1.0)]).unwrap();
    let mut per_epoch = Vec::new();
    for epoch in 0..2 {
        let mut seen = Vec::new();
        for rank in 0..2 {
            let mut loader = DataLoader::new(data(), 2).sampler(DistributedSampler::new(2, rank).unwrap().seed(5));
            assert_eq!(loader.num_batches(), 3, "5 samples per rank (9 padded to 10), batch 2");
            let epochs: Vec<Vec<f32>> = (0..=epoch).map(|_| loader.epoch().flat_map(|b| b[0].to_vec::<f32>()).collect()).collect();
            let want: Vec<f32> = DistributedSampler::new(2, rank).unwrap().seed(5).indices(9, epoch).iter().map(|&i| i as f32).collect();
            assert_eq!(epochs[epoch], want, "the loader's epoch count is the sampler's epoch");
            seen.extend(epochs[epoch].clone());
        }
        seen.sort_by(f32::total_cmp);
        seen.dedup();
        assert_eq!(seen.len(), 9, "every sample seen in epoch {epoch}");
        per_epoch.push(seen);
    }
    // shuffle() after sampler() goes back to shuffling the whole set
    let mut l = DataLoader::new(data(), 4).sampler(DistributedSampler::new(2, 0).unwrap()).shuffle(1);
    assert_eq!(l.epoch().map(|b| b[0].dims()[0]).sum::<usize>(), 9);
}
