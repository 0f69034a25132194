//! The data loader: every sample once per epoch, seeded shuffles, paired
//! tensors, `drop_last`, views without copies, and refused datasets.

use autograd_core::DType;
use autograd_cpu::Cpu;
use autograd_data::{DataLoader, TensorDataset};
use autograd_tensor::Tensor;

#[test]
fn data_loader_covers_each_sample_once_per_epoch_and_is_seeded() {
    let x = Tensor::<Cpu>::arange_dtype(0.0, 23.0, 1.0, DType::F64).reshape(&[23, 1]);
    let y = Tensor::<Cpu>::from_vec((0..23i64).map(|i| i * 10).collect::<Vec<_>>(), [23]);
    let ds = TensorDataset::new(vec![x.clone(), y]).unwrap();
    let mut a = DataLoader::new(ds.clone(), 5).shuffle(42);
    let mut b = DataLoader::new(ds.clone(), 5).shuffle(42);
    assert_eq!(a.num_batches(), 5);
    let mut epochs = vec![];
    for _ in 0..2 {
        let ea: Vec<Vec<f64>> = a.epoch().map(|bt| bt[0].to_vec_f64()).collect();
        let eb: Vec<Vec<f64>> = b.epoch().map(|bt| bt[0].to_vec_f64()).collect();
        assert_eq!(ea, eb, "same seed, same batches");
        assert_eq!(ea.iter().map(Vec::len).collect::<Vec<_>>(), vec![5, 5, 5, 5, 3]);
        let mut all: Vec<f64> = ea.concat();
        all.sort_by(f64::total_cmp);
        assert_eq!(all, (0..23).map(f64::from).collect::<Vec<_>>(), "every sample exactly once");
        epochs.push(ea);
    }
    assert_ne!(epochs[0], epochs[1], "a new order each epoch");
    assert_ne!(epochs[0].concat(), (0..23).map(f64::from).collect::<Vec<_>>(), "shuffled");
    // Inputs and targets stay paired.
    for bt in a.epoch() {
        let (xs, ys) = (bt[0].to_vec_f64(), bt[1].to_vec::<i64>());
        assert!(xs.iter().zip(&ys).all(|(x, y)| (*x as i64) * 10 == *y));
    }
    // drop_last, and unshuffled batches are views of the data (no copy).
    let mut c = DataLoader::new(ds, 5).drop_last(true);
    let batches: Vec<_> = c.epoch().collect();
    assert_eq!(batches.len(), 4);
    assert!(batches.iter().all(|bt| bt[0].shares_storage(&x)));
    assert!(TensorDataset::new(vec![x.clone(), Tensor::<Cpu>::zeros_dtype([22], DType::F64)]).is_err());
}

/// A batch size of 0 was clamped to 1; PyTorch raises "batch_size should be
/// a positive integer value". Now an `Err` from `try_new`, a panic at the
/// caller's line from `new`.
#[test]
fn a_batch_size_of_zero_is_refused() {
    let ds = TensorDataset::new(vec![Tensor::<Cpu>::arange(0.0, 4.0, 1.0)]).unwrap();
    let e = DataLoader::try_new(ds.clone(), 0).unwrap_err().to_string();
    assert!(e.contains("batch_size should be a positive integer value") && e.contains(file!()), "{e}");
    let p = std::panic::catch_unwind(|| DataLoader::new(ds, 0)).unwrap_err();
    let msg = p.downcast_ref::<String>().unwrap();
    assert!(msg.contains("batch_size"), "{msg}");
}
