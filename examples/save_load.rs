//! Weights in and out as safetensors: `cargo run --release --example save_load`.
//! Trains a small MLP on the delivery-time data, saves it, loads it into a
//! fresh model and compares predictions; then loads the PyTorch MLP shipped
//! in `examples/data` and prints its logits next to PyTorch's.

#![allow(clippy::print_stdout)] // printing is what an example is for

use autograd::nn::load_safetensors;
use autograd::prelude::*;
use autograd::tensor::functional::try_mse_loss;
use examples::bazarghar::load_problem;
use examples::data::data_dir;

fn main() -> Result<()> {
    let p = load_problem::<Cpu>()?;
    manual_seed(0);
    let model = MlpConfig::new(&[2, 16, 1]).with_dtype(DType::F64).init::<Cpu>();
    for step in 0..=200 {
        model.zero_grad(true);
        let loss = try_mse_loss(&model.forward(&p.x), &p.y, Reduction::Mean)?;
        if step % 50 == 0 {
            println!("step {step:>3}  loss {:.4}", loss.item());
        }
        loss.backward()?;
        no_grad(|| -> Result<()> {
            for w in model.parameters() {
                w.try_sub_(&(w.grad().expect("grad") * 0.1))?;
            }
            Ok(())
        })?;
    }
    let path = std::env::temp_dir().join("bazarghar_mlp.safetensors");
    model.save_safetensors(&path)?;
    let mut fresh = MlpConfig::new(&[2, 16, 1]).with_dtype(DType::F64).init::<Cpu>();
    fresh.load_safetensors(&path)?;
    let (a, b) = (model.forward(&p.x).to_vec_f64(), fresh.forward(&p.x).to_vec_f64());
    let max_diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    println!("saved to {} and reloaded: max |prediction difference| over 200 rows = {max_diff:e}", path.display());
    println!(
        "first predictions: {:.4} {:.4} {:.4} (targets {:.4} {:.4} {:.4})",
        a[0],
        a[1],
        a[2],
        p.y.to_vec_f64()[0],
        p.y.to_vec_f64()[1],
        p.y.to_vec_f64()[2]
    );

    // PyTorch's Sequential(Linear(4,8), ReLU(), Linear(8,8), Tanh(), Linear(8,3)), weights saved by PyTorch
    let mut torch_mlp = Sequential::<Cpu>::new().add(Linear::new(4, 8)).add(ReLU).add(Linear::new(8, 8)).add(Tanh).add(Linear::new(8, 3));
    torch_mlp.load_safetensors(data_dir().join("mlp_f32.safetensors"))?;
    let io = load_safetensors::<Cpu>(data_dir().join("mlp_f32_io.safetensors"))?;
    let ours = torch_mlp.forward(io.get("x").expect("x"));
    let theirs = io.get("logits").expect("logits");
    println!("PyTorch MLP logits (ours | PyTorch):");
    for (r, (o, t)) in ours.to_vec_f64().chunks(3).zip(theirs.to_vec_f64().chunks(3)).enumerate() {
        println!("  row {r}: {:>9.5} {:>9.5} {:>9.5} | {:>9.5} {:>9.5} {:>9.5}", o[0], o[1], o[2], t[0], t[1], t[2]);
    }
    Ok(())
}
