//! Every golden case of the ops in the foundation issue, against PyTorch's
//! float64 values: in f64 at the case's tolerance (rtol 1e-10), and in f32
//! at a tolerance suited to f32, on both backends.

mod common;

use autograd_core::{Backend, DType, RefBackend};
use autograd_cpu::Cpu;
use autograd_tensor::Tensor;
use common::{assert_close_to, load_family, Family};
use serde_json::Value;

fn dims(v: &Value) -> Vec<isize> {
    match v {
        Value::Array(a) => a.iter().map(|x| x.as_i64().unwrap() as isize).collect(),
        Value::Number(n) => vec![n.as_i64().unwrap() as isize],
        _ => panic!("bad dims {v}"),
    }
}

/// `dim` from the args, or parsed from the call (`conventions` cases leave args empty).
fn dim_arg(case: &Value) -> Option<Value> {
    if let Some(d) = case["args"].get("dim") {
        return Some(d.clone());
    }
    let call = case["call"].as_str().unwrap();
    let i = call.find("dim=")?;
    let n: String = call[i + 4..].chars().take_while(|c| c.is_ascii_digit() || *c == '-').collect();
    Some(Value::from(n.parse::<i64>().ok()?))
}

fn int(args: &Value, k: &str) -> isize {
    args[k].as_i64().unwrap_or_else(|| panic!("arg {k} missing in {args}")) as isize
}

/// Evaluates a case's call with our ops; `None` for ops outside this issue.
fn eval<B: Backend>(case: &Value, x: &[Tensor<B>]) -> Option<Tensor<B>> {
    let op = case["op"].as_str().unwrap();
    let id = case["case_id"].as_str().unwrap();
    let a = &case["args"];
    let keepdim = a["keepdim"].as_bool().unwrap_or(false);
    Some(match op {
        "add" | "sub" | "mul" | "div" if x.len() == 2 => match op {
            "add" => &x[0] + &x[1],
            "sub" => &x[0] - &x[1],
            "mul" => &x[0] * &x[1],
            _ => &x[0] / &x[1],
        },
        "add" | "sub" | "mul" | "div" => {
            if let Some(c) = a["other"].as_f64() {
                match op {
                    "add" => &x[0] + c,
                    "sub" => &x[0] - c,
                    "mul" => &x[0] * c,
                    _ => &x[0] / c,
                }
            } else {
                let c = a["self_scalar"].as_f64().unwrap();
                match op {
                    "sub" => c - &x[0],
                    "div" => c / &x[0],
                    "add" => c + &x[0],
                    _ => c * &x[0],
                }
            }
        }
        "pow" if x.len() == 2 => x[0].pow(&x[1]),
        "pow" => x[0].powf(a["exponent"].as_f64().unwrap()),
        "maximum" => x[0].maximum(&x[1]),
        "minimum" => x[0].minimum(&x[1]),
        "where" => {
            let cond = x[0].ne_scalar(0.0);
            if x.len() == 3 {
                Tensor::where_cond(&cond, &x[1], &x[2])
            } else {
                Tensor::where_cond(&cond, &x[1], &x[1].full_like(a["other"].as_f64().unwrap()).detach())
            }
        }
        "neg" => -&x[0],
        "exp" => x[0].exp(),
        "log" => x[0].log(),
        "sqrt" => x[0].sqrt(),
        "abs" => x[0].abs(),
        "tanh" => x[0].tanh(),
        "sigmoid" => x[0].sigmoid(),
        "relu" => x[0].relu(),
        "matmul" | "mm" | "bmm" => x[0].matmul(&x[1]),
        "sum" if a.get("dim").is_some() => x[0].sum_dims(&dims(&a["dim"]), keepdim),
        "sum" => x[0].sum(),
        "mean" if a.get("dim").is_some() => x[0].mean_dims(&dims(&a["dim"]), keepdim),
        "mean" => x[0].mean(),
        "max" if a.get("dim").is_some() => x[0].max_dim(int(a, "dim"), keepdim).0,
        "max" => x[0].max(),
        "min" if a.get("dim").is_some() => x[0].min_dim(int(a, "dim"), keepdim).0,
        "min" => x[0].min(),
        "amax" => x[0].amax(&dims(&dim_arg(case).unwrap()), keepdim),
        "amin" => x[0].amin(&dims(&dim_arg(case).unwrap()), keepdim),
        "var" | "std" => {
            let d = a.get("dim").map(dims).unwrap_or_default();
            let c = a["correction"].as_u64().unwrap() as usize;
            if op == "var" {
                x[0].var_dims(&d, c, keepdim)
            } else {
                x[0].std_dims(&d, c, keepdim)
            }
        }
        "reshape" => x[0].reshape(&dims(&a["shape"])),
        "view" => x[0].view(&dims(&a["shape"])),
        "flatten" => x[0].flatten(int(a, "start_dim"), -1),
        "transpose" => x[0].transpose(int(a, "dim0"), int(a, "dim1")),
        "t" => x[0].t(),
        "transpose/reshape" => x[0].t().reshape(&[-1]),
        "permute" => x[0].permute(&dims(&a["dims"])),
        "expand" => x[0].expand(&dims(&a["size"])),
        "squeeze" if a.get("dim").is_some() => x[0].squeeze_dim(int(a, "dim")),
        "squeeze" => x[0].squeeze(),
        "unsqueeze" => x[0].unsqueeze(int(a, "dim")),
        "narrow" => x[0].narrow(int(a, "dim"), int(a, "start") as usize, int(a, "length") as usize),
        "slice" => x[0].slice(int(a, "dim"), int(a, "start"), a["end"].as_i64().map(|e| e as isize), int(a, "step") as usize),
        "select" => x[0].select(int(a, "dim"), int(a, "index")),
        "index_select" => x[0].index_select(int(a, "dim"), &x[1]),
        "gather" => x[0].gather(int(a, "dim"), &x[1]),
        "cat" => Tensor::cat(x, int(a, "dim")),
        "stack" => Tensor::stack(x, int(a, "dim")),
        "composite" => match id {
            "tanh_ab_plus_c" => (&x[0] * &x[1] + &x[2]).tanh(),
            "x_sq_plus_x" => &x[0] * &x[0] + &x[0],
            "xy_plus_y_squared" => (&x[0] * &x[1] + &x[1]).powf(2.0),
            "xy_plus_x_sq" => &x[0] * &x[1] + x[0].powf(2.0),
            "sigmoid_x_times_x" => x[0].sigmoid() * &x[0],
            "exp_div_sum" => (x[0].exp() / x[0].exp().sum()).powf(2.0).sum(),
            "mlp2_relu_mse_random_gout" => {
                let h = (x[0].matmul(&x[1].t()) + &x[2]).relu();
                (h.matmul(&x[3].t()) + &x[4] - 1.0).powf(2.0)
            }
            _ => return None,
        },
        _ => return None,
    })
}

/// Cases that need ops of later issues (losses, softmax, activations with
/// parameters); listed so that nothing is skipped silently.
const LATER: &[&str] = &[
    "mlp2_relu_cross_entropy",
    "mlp2_tanh_cross_entropy_manual",
    "leaky_relu_at_zero",
    "clamp_at_bounds",
    "clamp_min_only_at_bound",
    "l1_loss_zero_diff",
];

fn run_family<B: Backend>(name: &str, dtype: DType) {
    let fam: Family = load_family(name);
    let mut checked = 0;
    for case in &fam.cases {
        let id = case["case_id"].as_str().unwrap();
        assert_eq!(case["kind"], "vjp", "{id}");
        let inputs: Vec<Tensor<B>> = case["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                let t = fam.tensor::<B>(i["key"].as_str().unwrap(), dtype);
                if i["requires_grad"].as_bool().unwrap() {
                    t.requires_grad_(true)
                } else {
                    t
                }
            })
            .collect();
        let Some(out) = eval(case, &inputs) else {
            assert!(LATER.contains(&id), "{name}/{id}: no evaluator for op {}", case["op"]);
            continue;
        };
        let (rtol, atol) = if dtype == DType::F64 {
            (case["tolerance"]["rtol"].as_f64().unwrap(), case["tolerance"]["atol"].as_f64().unwrap())
        } else {
            (2e-4, 2e-5)
        };
        let (ws, wv) = fam.f64s(case["output"]["key"].as_str().unwrap());
        assert_close_to(&format!("{name}/{id} ({dtype:?}, {}) out", B::NAME), out.dims(), &out.to_vec_f64(), &ws, &wv, rtol, atol);
        let gout = fam.tensor::<B>(case["grad_output"]["key"].as_str().unwrap(), dtype);
        out.backward_with(Some(&gout), false, false).unwrap_or_else(|e| panic!("{name}/{id}: backward: {e}"));
        for g in case["grads"].as_array().unwrap() {
            let k: usize = g["input"].as_str().unwrap()[2..].parse().unwrap();
            let grad = inputs[k].grad().unwrap_or_else(|| panic!("{name}/{id}: no gradient for in{k}"));
            let (ws, wv) = fam.f64s(g["key"].as_str().unwrap());
            assert_close_to(
                &format!("{name}/{id} ({dtype:?}, {}) grad in{k}", B::NAME),
                grad.dims(),
                &grad.to_vec_f64(),
                &ws,
                &wv,
                rtol,
                atol,
            );
        }
        checked += 1;
    }
    assert!(checked > 0, "{name}: no case checked");
    eprintln!("{name}: {checked} cases checked ({dtype:?}, {})", B::NAME);
}

macro_rules! golden_tests {
    ($($fam:ident),*) => {
        mod reference_f64 { use super::*; $( #[test] fn $fam() { run_family::<RefBackend>(stringify!($fam), DType::F64); } )* }
        mod reference_f32 { use super::*; $( #[test] fn $fam() { run_family::<RefBackend>(stringify!($fam), DType::F32); } )* }
        mod cpu_f64 { use super::*; $( #[test] fn $fam() { run_family::<Cpu>(stringify!($fam), DType::F64); } )* }
        mod cpu_f32 { use super::*; $( #[test] fn $fam() { run_family::<Cpu>(stringify!($fam), DType::F32); } )* }
    };
}

golden_tests!(elementwise_binary, elementwise_unary, matmul, reductions, shape_indexing, composite, conventions);
