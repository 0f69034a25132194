//! PyTorch's golden cases (see `fixtures/golden/README.md`): every case of
//! every family, against PyTorch's float64 values, in f64 at the case's
//! tolerance (rtol 1e-10) and in f32 at a tolerance suited to f32.
//! [`golden_suite!`](crate::golden_suite) instantiates them for a backend.

use autograd_core::{Backend, DType, HostData};
use autograd_tensor::BackwardOptions;
use autograd_tensor::GradOptions;
use autograd_tensor::functional::{self as F, Reduction};
use autograd_tensor::{Tensor, autograd};
use safetensors::SafeTensors;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;

/// One golden family: its cases (from `<name>.json`) and tensors (from `<name>.safetensors`).
pub struct Family {
    /// The cases, as written by the generating script.
    pub cases: Vec<Value>,
    tensors: HashMap<String, (DType, Vec<usize>, Vec<u8>)>,
}

/// The folder of the golden families.
pub fn golden_dir() -> PathBuf {
    crate::fixture("golden")
}

/// Loads `fixtures/golden/<name>.{json,safetensors}`.
pub fn load_family(name: &str) -> Family {
    let dir = golden_dir();
    let manifest: Value = serde_json::from_slice(&std::fs::read(dir.join(format!("{name}.json"))).unwrap()).unwrap();
    let bytes = std::fs::read(dir.join(format!("{name}.safetensors"))).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors = HashMap::new();
    for (k, v) in st.tensors() {
        let dtype = match v.dtype() {
            safetensors::Dtype::F64 => DType::F64,
            safetensors::Dtype::I64 => DType::I64,
            d => panic!("unexpected dtype {d:?} in golden file"),
        };
        tensors.insert(k.to_string(), (dtype, v.shape().to_vec(), v.data().to_vec()));
    }
    Family { cases: manifest["cases"].as_array().unwrap().clone(), tensors }
}

impl Family {
    /// The tensor `key`, with float data converted to `float` (F32 or F64).
    pub fn tensor<B: Backend>(&self, key: &str, float: DType) -> Tensor<B> {
        let (dtype, shape, bytes) = self.tensors.get(key).unwrap_or_else(|| panic!("missing golden tensor {key}"));
        let h = HostData::from_le_bytes(bytes, *dtype).unwrap();
        let h = if *dtype == DType::F64 { h.convert(float) } else { h };
        Tensor::try_from_host(h, shape.clone()).unwrap()
    }
    /// The tensor `key` as its shape and f64 values.
    pub fn f64s(&self, key: &str) -> (Vec<usize>, Vec<f64>) {
        let (dtype, shape, bytes) = &self.tensors[key];
        (shape.clone(), HostData::from_le_bytes(bytes, *dtype).unwrap().to_f64_vec())
    }
}

/// `|a - e| <= atol + rtol |e|` elementwise, shapes equal.
pub fn assert_close_to(what: &str, got_shape: &[usize], got: &[f64], want_shape: &[usize], want: &[f64], rtol: f64, atol: f64) {
    assert_eq!(got_shape, want_shape, "{what}: shape");
    for (i, (a, e)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - e).abs() <= atol + rtol * e.abs() || (a.is_nan() && e.is_nan()),
            "{what}: element {i}: got {a:e}, want {e:e} (|diff| {:e})",
            (a - e).abs()
        );
    }
}

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

/// A list of sizes (or one size) from the args.
fn sizes(v: &Value) -> Vec<usize> {
    dims(v).into_iter().map(|d| usize::try_from(d).unwrap_or_else(|_| panic!("negative size in {v}"))).collect()
}

fn int(args: &Value, k: &str) -> isize {
    args[k].as_i64().unwrap_or_else(|| panic!("arg {k} missing in {args}")) as isize
}

fn reduction(case: &Value) -> Reduction {
    let r = case["args"]["reduction"].as_str().map(String::from).unwrap_or_else(|| {
        let call = case["call"].as_str().unwrap();
        if call.contains("reduction='sum'") {
            "sum".into()
        } else if call.contains("reduction='none'") {
            "none".into()
        } else {
            "mean".into()
        }
    });
    match r.as_str() {
        "sum" => Reduction::Sum,
        "none" => Reduction::None,
        _ => Reduction::Mean,
    }
}

/// Evaluates a case's call with our ops; `None` for ops outside this issue.
fn eval<B: Backend>(case: &Value, x: &[Tensor<B>]) -> Option<Tensor<B>> {
    let op = case["op"].as_str().unwrap();
    let id = case["case_id"].as_str().unwrap();
    let call = case["call"].as_str().unwrap();
    let a = &case["args"];
    let keepdim = a["keepdim"].as_bool().unwrap_or(false);
    let f = |k: &str, d: f64| a[k].as_f64().unwrap_or(d);
    let red = reduction(case);
    Some(match op {
        "leaky_relu" => x[0].leaky_relu(if id == "leaky_relu_at_zero" { 0.1 } else { f("negative_slope", 0.01) }),
        "gelu" if a["approximate"] == "tanh" || call.contains("tanh") => x[0].gelu_tanh(),
        "gelu" => x[0].gelu(),
        "silu" => x[0].silu(),
        "softplus" => x[0].softplus(f("beta", 1.0), f("threshold", 20.0)),
        "clamp" => match id {
            "clamp_at_bounds" => x[0].clamp(Some(-1.0), Some(1.0)),
            "clamp_min_only_at_bound" => x[0].clamp(Some(-1.0), None),
            _ => x[0].clamp(a["min"].as_f64(), a["max"].as_f64()),
        },
        "softmax" => x[0].softmax(int(a, "dim")),
        "log_softmax" => x[0].log_softmax(int(a, "dim")),
        "logsumexp" => x[0].logsumexp(&dims(&a["dim"]), keepdim),
        "mse_loss" => F::try_mse_loss(&x[0], &x[1], red).unwrap(),
        "l1_loss" => F::try_l1_loss(&x[0], &x[1], red).unwrap(),
        "smooth_l1_loss" => F::try_smooth_l1_loss(&x[0], &x[1], f("beta", 1.0), red).unwrap(),
        "huber_loss" => F::try_huber_loss(&x[0], &x[1], f("delta", 1.0), red).unwrap(),
        "binary_cross_entropy_with_logits" => F::try_binary_cross_entropy_with_logits(&x[0], &x[1], None, red).unwrap(),
        "cross_entropy" => F::try_cross_entropy(&x[0], &x[1], red, &Default::default()).unwrap(),
        "nll_loss" => F::try_nll_loss(&x[0], &x[1], None, None, red).unwrap(),
        "nll_loss/log_softmax" => F::try_nll_loss(&x[0].log_softmax(1), &x[1], None, None, red).unwrap(),
        "linear" => F::try_linear(&x[0], &x[1], x.get(2)).unwrap(),
        "layer_norm" => {
            let ns: Vec<usize> = a["normalized_shape"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
            F::try_layer_norm(&x[0], &ns, x.get(1), x.get(2), f("eps", 1e-5)).unwrap()
        }
        "embedding" => F::try_embedding(&x[0], &x[1]).unwrap(),
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
            if op == "var" { x[0].var_dims(&d, c, keepdim) } else { x[0].std_dims(&d, c, keepdim) }
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
        "conv1d" | "conv2d" => {
            let padding = match &a["padding"] {
                Value::String(s) if s == "same" => F::Padding::Same,
                Value::String(_) => F::Padding::Valid,
                p => F::Padding::Explicit(sizes(p)),
            };
            let o = F::ConvOptions::default()
                .with_stride(&sizes(&a["stride"]))
                .with_padding(padding)
                .with_dilation(&sizes(&a["dilation"]))
                .with_groups(int(a, "groups") as usize);
            F::try_conv(&x[0], &x[1], x.get(2), &o).unwrap()
        }
        "conv_transpose1d" | "conv_transpose2d" => {
            let o = F::ConvTransposeOptions::default()
                .with_stride(&sizes(&a["stride"]))
                .with_padding(&sizes(&a["padding"]))
                .with_output_padding(&sizes(&a["output_padding"]))
                .with_dilation(&sizes(&a["dilation"]))
                .with_groups(int(a, "groups") as usize);
            F::try_conv_transpose(&x[0], &x[1], x.get(2), &o).unwrap()
        }
        "unfold" => {
            F::try_unfold(&x[0], &sizes(&a["kernel_size"]), &sizes(&a["dilation"]), &sizes(&a["padding"]), &sizes(&a["stride"])).unwrap()
        }
        "fold" => F::try_fold(
            &x[0],
            &sizes(&a["output_size"]),
            &sizes(&a["kernel_size"]),
            &sizes(&a["dilation"]),
            &sizes(&a["padding"]),
            &sizes(&a["stride"]),
        )
        .unwrap(),
        "max_pool1d" | "max_pool2d" | "avg_pool1d" | "avg_pool2d" => {
            let mut o = F::PoolOptions::new(&sizes(&a["kernel_size"]))
                .with_stride(&sizes(&a["stride"]))
                .with_padding(&sizes(&a["padding"]))
                .with_ceil_mode(a["ceil_mode"].as_bool().unwrap());
            if let Some(d) = a.get("dilation") {
                o = o.with_dilation(&sizes(d));
            }
            if let Some(c) = a["count_include_pad"].as_bool() {
                o = o.with_count_include_pad(c);
            }
            o = o.with_divisor_override(a["divisor_override"].as_u64().map(|d| d as usize));
            match op {
                "max_pool1d" => F::try_max_pool1d(&x[0], &o),
                "max_pool2d" => F::try_max_pool2d(&x[0], &o),
                "avg_pool1d" => F::try_avg_pool1d(&x[0], &o),
                _ => F::try_avg_pool2d(&x[0], &o),
            }
            .unwrap()
        }
        "adaptive_avg_pool1d" => F::try_adaptive_avg_pool1d(&x[0], sizes(&a["output_size"])[0]).unwrap(),
        "adaptive_avg_pool2d" | "adaptive_max_pool2d" => {
            let s = sizes(&a["output_size"]);
            if op == "adaptive_avg_pool2d" {
                F::try_adaptive_avg_pool2d(&x[0], [s[0], s[1]]).unwrap()
            } else {
                F::try_adaptive_max_pool2d(&x[0], [s[0], s[1]]).unwrap()
            }
        }
        "interpolate" => {
            let size = match a.get("size") {
                Some(s) => F::InterpolateSize::Size(sizes(s)),
                None => {
                    F::InterpolateSize::ScaleFactor(a["scale_factor"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect())
                }
            };
            let mode = if a["mode"] == "nearest" { F::InterpolateMode::Nearest } else { F::InterpolateMode::Linear };
            F::try_interpolate(&x[0], &size, mode, a["align_corners"].as_bool().unwrap_or(false)).unwrap()
        }
        "pad" => {
            let mode = match a["mode"].as_str().unwrap() {
                "reflect" => F::PadMode::Reflect,
                "replicate" => F::PadMode::Replicate,
                "circular" => F::PadMode::Circular,
                _ => F::PadMode::Constant(f("value", 0.0)),
            };
            F::try_pad(&x[0], &sizes(&a["pad"]), mode).unwrap()
        }
        "group_norm" => F::try_group_norm(&x[0], int(a, "num_groups") as usize, x.get(1), x.get(2), f("eps", 1e-5)).unwrap(),
        "instance_norm" => F::try_instance_norm(&x[0], x.get(1), x.get(2), f("eps", 1e-5)).unwrap(),
        "composite" => match id {
            "tanh_ab_plus_c" => (&x[0] * &x[1] + &x[2]).tanh(),
            "x_sq_plus_x" => &x[0] * &x[0] + &x[0],
            "xy_plus_y_squared" => (&x[0] * &x[1] + &x[1]).powf(2.0),
            "xy_plus_x_sq" => &x[0] * &x[1] + x[0].powf(2.0),
            "sigmoid_x_times_x" => x[0].sigmoid() * &x[0],
            "exp_div_sum" => (x[0].exp() / x[0].exp().sum()).powf(2.0).sum(),
            "mlp2_relu_cross_entropy" => {
                let h = F::try_linear(&x[0], &x[1], Some(&x[2])).unwrap().relu();
                F::try_cross_entropy(&F::try_linear(&h, &x[3], Some(&x[4])).unwrap(), &x[5], Reduction::Mean, &Default::default()).unwrap()
            }
            "mlp2_tanh_cross_entropy_manual" => {
                let logp = ((x[0].matmul(&x[1].t()) + &x[2]).tanh().matmul(&x[3].t()) + &x[4]).log_softmax(1);
                let n = x[5].numel();
                -logp.gather(1, &x[5].reshape(&[n as isize, 1])).mean()
            }
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
const LATER: &[&str] = &[];

/// Runs every case of the family `name` with float data in `dtype`.
pub fn run_family<B: Backend>(name: &str, dtype: DType) {
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
                if i["requires_grad"].as_bool().unwrap() { t.requires_grad_(true) } else { t }
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
        out.backward_with(Some(&gout), BackwardOptions::default()).unwrap_or_else(|e| panic!("{name}/{id}: backward: {e}"));
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

/// Second derivatives and Hessian-vector products through `create_graph`.
pub fn run_higher_order<B: Backend>(dtype: DType) {
    let fam = load_family("higher_order");
    let (rtol, atol) = if dtype == DType::F64 { (1e-10, 1e-12) } else { (1e-3, 1e-4) };
    let mut checked = 0;
    for case in &fam.cases {
        let id = case["case_id"].as_str().unwrap();
        let t = |role: &str| fam.tensor::<B>(case["tensors"][role].as_str().unwrap(), dtype);
        let want = |role: &str| fam.f64s(case["tensors"][role].as_str().unwrap());
        let check = |role: &str, got: &Tensor<B>| {
            let (ws, wv) = want(role);
            assert_close_to(
                &format!("higher_order/{id} ({dtype:?}, {}) {role}", B::NAME),
                got.dims(),
                &got.to_vec_f64(),
                &ws,
                &wv,
                rtol,
                atol,
            );
        };
        let x = t("in0").requires_grad_(true);
        match case["kind"].as_str().unwrap() {
            "second_derivative" => {
                let y = match id {
                    "d2_x_cubed" => x.powf(3.0),
                    "d2_tanh" => x.tanh(),
                    "d2_sigmoid" => x.sigmoid(),
                    "d2_exp_times_x" => x.exp() * &x,
                    "d2_log" => x.log(),
                    "d2_softplus" => x.softplus(1.0, 20.0),
                    "d2_gelu_tanh" => x.gelu_tanh(),
                    other => panic!("no evaluator for {other}"),
                };
                check("out", &y);
                let ones = y.ones_like();
                let g = autograd::grad(
                    &[y],
                    std::slice::from_ref(&x),
                    Some(std::slice::from_ref(&ones)),
                    GradOptions { retain_graph: true, create_graph: true, ..Default::default() },
                )
                .unwrap()[0]
                    .clone()
                    .unwrap();
                check("gin0", &g);
                let gg = autograd::grad(&[g], std::slice::from_ref(&x), Some(&[ones]), GradOptions::default()).unwrap()[0].clone().unwrap();
                check("ggin0", &gg);
            }
            "hvp" => {
                let f = |x: &Tensor<B>| -> Tensor<B> {
                    match id {
                        "hvp_cubic_poly" => x.powf(3.0).sum() + (x * x).sum() * x.tanh().sum(),
                        "hvp_quadratic_form" => x.matmul(&t("in1").matmul(x)) * 0.5 + (&t("in2") * x).sum(),
                        "hvp_tanh_regression" => (t("in1").matmul(x).tanh() - t("in2")).powf(2.0).mean(),
                        "hvp_logsumexp" => x.logsumexp(&[0], false) + x.powf(2.0).mean(),
                        other => panic!("no evaluator for {other}"),
                    }
                };
                let y = f(&x);
                check("out", &y);
                let g = autograd::grad(
                    &[y],
                    std::slice::from_ref(&x),
                    None,
                    GradOptions { retain_graph: true, create_graph: true, ..Default::default() },
                )
                .unwrap()[0]
                    .clone()
                    .unwrap();
                check("gin0", &g);
                let hv = autograd::grad(
                    std::slice::from_ref(&g),
                    std::slice::from_ref(&x),
                    Some(&[t("v")]),
                    GradOptions { retain_graph: true, ..Default::default() },
                )
                .unwrap()[0]
                    .clone()
                    .unwrap();
                check("hvp", &hv);
                let n = x.numel();
                let rows: Vec<Tensor<B>> = (0..n)
                    .map(|i| {
                        autograd::grad(
                            &[g.select(0, i as isize)],
                            std::slice::from_ref(&x),
                            None,
                            GradOptions { retain_graph: true, ..Default::default() },
                        )
                        .unwrap()[0]
                            .clone()
                            .unwrap()
                    })
                    .collect();
                check("hessian", &Tensor::stack(&rows, 0));
            }
            "jvp" => {
                let primals: Vec<Tensor<B>> = case["inputs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|i| i["is_primal"].as_bool().unwrap_or(false))
                    .map(|i| fam.tensor::<B>(i["key"].as_str().unwrap(), dtype))
                    .collect();
                let tangents: Vec<Tensor<B>> = (0..primals.len()).map(|k| t(&format!("tan{k}"))).collect();
                let f = |p: &[Tensor<B>]| -> Tensor<B> {
                    match id {
                        "jvp_tanh_times_x" => p[0].tanh() * &p[0],
                        "jvp_exp" => p[0].exp(),
                        "jvp_matmul_const" => p[0].matmul(&t("in1")),
                        "jvp_softmax" => p[0].softmax(-1),
                        "jvp_sum_of_squares" => p[0].powf(2.0).sum(),
                        "jvp_two_inputs" => &p[0] * &p[1] + p[0].exp() / (&p[1] * &p[1] + 1.0),
                        "jvp_mlp" => (p[0].matmul(&t("in1").t()) + t("in2")).tanh().matmul(&t("in3").t()),
                        other => panic!("no evaluator for {other}"),
                    }
                };
                let (y, dy) = autograd::jvp(f, &primals, &tangents).unwrap();
                check("out", &y);
                check("jvp", &dy);
                // forward mode agrees with reverse mode: <J t, u> = <t, J^T u>
                let u = y.ones_like();
                let leaves: Vec<Tensor<B>> = primals.iter().map(|p| p.detach().requires_grad_(true)).collect();
                let yr = f(&leaves);
                let gs = autograd::grad(
                    &[yr],
                    &leaves,
                    Some(std::slice::from_ref(&u)),
                    GradOptions { allow_unused: true, ..Default::default() },
                )
                .unwrap();
                let rev: f64 = gs.iter().zip(&tangents).map(|(g, t)| (g.clone().unwrap() * t).sum().item()).sum();
                let fwd = (dy * u).sum().item();
                assert!((rev - fwd).abs() <= 1e-9 * (1.0 + fwd.abs()) || dtype == DType::F32, "{id}: forward {fwd} vs reverse {rev}");
            }
            k => panic!("unknown kind {k}"),
        }
        checked += 1;
    }
    assert_eq!(checked, 18, "every higher-order case checked");
}

/// The `elementwise_binary` family in f64.
pub fn elementwise_binary_f64<B: Backend>() {
    run_family::<B>("elementwise_binary", DType::F64);
}
/// The `elementwise_binary` family in f32.
pub fn elementwise_binary_f32<B: Backend>() {
    run_family::<B>("elementwise_binary", DType::F32);
}
/// The `elementwise_unary` family in f64.
pub fn elementwise_unary_f64<B: Backend>() {
    run_family::<B>("elementwise_unary", DType::F64);
}
/// The `elementwise_unary` family in f32.
pub fn elementwise_unary_f32<B: Backend>() {
    run_family::<B>("elementwise_unary", DType::F32);
}
/// The `matmul` family in f64.
pub fn matmul_f64<B: Backend>() {
    run_family::<B>("matmul", DType::F64);
}
/// The `matmul` family in f32.
pub fn matmul_f32<B: Backend>() {
    run_family::<B>("matmul", DType::F32);
}
/// The `reductions` family in f64.
pub fn reductions_f64<B: Backend>() {
    run_family::<B>("reductions", DType::F64);
}
/// The `reductions` family in f32.
pub fn reductions_f32<B: Backend>() {
    run_family::<B>("reductions", DType::F32);
}
/// The `shape_indexing` family in f64.
pub fn shape_indexing_f64<B: Backend>() {
    run_family::<B>("shape_indexing", DType::F64);
}
/// The `shape_indexing` family in f32.
pub fn shape_indexing_f32<B: Backend>() {
    run_family::<B>("shape_indexing", DType::F32);
}
/// The `composite` family in f64.
pub fn composite_f64<B: Backend>() {
    run_family::<B>("composite", DType::F64);
}
/// The `composite` family in f32.
pub fn composite_f32<B: Backend>() {
    run_family::<B>("composite", DType::F32);
}
/// The `conventions` family in f64.
pub fn conventions_f64<B: Backend>() {
    run_family::<B>("conventions", DType::F64);
}
/// The `conventions` family in f32.
pub fn conventions_f32<B: Backend>() {
    run_family::<B>("conventions", DType::F32);
}
/// The `activations` family in f64.
pub fn activations_f64<B: Backend>() {
    run_family::<B>("activations", DType::F64);
}
/// The `activations` family in f32.
pub fn activations_f32<B: Backend>() {
    run_family::<B>("activations", DType::F32);
}
/// The `softmax` family in f64.
pub fn softmax_f64<B: Backend>() {
    run_family::<B>("softmax", DType::F64);
}
/// The `softmax` family in f32.
pub fn softmax_f32<B: Backend>() {
    run_family::<B>("softmax", DType::F32);
}
/// The `losses` family in f64.
pub fn losses_f64<B: Backend>() {
    run_family::<B>("losses", DType::F64);
}
/// The `losses` family in f32.
pub fn losses_f32<B: Backend>() {
    run_family::<B>("losses", DType::F32);
}
/// The `nn_functional` family in f64.
pub fn nn_functional_f64<B: Backend>() {
    run_family::<B>("nn_functional", DType::F64);
}
/// The `nn_functional` family in f32.
pub fn nn_functional_f32<B: Backend>() {
    run_family::<B>("nn_functional", DType::F32);
}
/// Convolution, pooling, unfold/fold, resampling, padding, group norm in f64 (`make_window.py`).
pub fn window_f64<B: Backend>() {
    run_family::<B>("window", DType::F64);
}
/// The `window` family in f32.
pub fn window_f32<B: Backend>() {
    run_family::<B>("window", DType::F32);
}
/// Second derivatives, Hessian-vector products and JVPs in f64.
pub fn higher_order_f64<B: Backend>() {
    run_higher_order::<B>(DType::F64);
}
/// Second derivatives, Hessian-vector products and JVPs in f32.
pub fn higher_order_f32<B: Backend>() {
    run_higher_order::<B>(DType::F32);
}

/// Every golden family as `#[test]`s for one backend, in f64 and f32.
#[macro_export]
macro_rules! golden_suite {
    ($backend:ty) => {
        $crate::instantiate!(
            $backend,
            golden,
            [
                elementwise_binary_f64,
                elementwise_binary_f32,
                elementwise_unary_f64,
                elementwise_unary_f32,
                matmul_f64,
                matmul_f32,
                reductions_f64,
                reductions_f32,
                shape_indexing_f64,
                shape_indexing_f32,
                composite_f64,
                composite_f32,
                conventions_f64,
                conventions_f32,
                activations_f64,
                activations_f32,
                softmax_f64,
                softmax_f32,
                losses_f64,
                losses_f32,
                nn_functional_f64,
                nn_functional_f32,
                window_f64,
                window_f32,
                higher_order_f64,
                higher_order_f32
            ]
        );
    };
}
