//! Loss modules against values computed by PyTorch 2.15 (float64), heads,
//! and the multi-task identity.

use autograd_core::{Backend, DType};
use autograd_nn::LinearConfig;
use autograd_nn::{
    BCEWithLogitsLoss, ClassificationHead, CrossEntropyLoss, Module, ModuleExt, ReLU, Reduction, RegressionHead, RegressionLoss, Sequential,
};
use autograd_tensor::BackwardOptions;
use autograd_tensor::Tensor;
use autograd_tensor::functional::CrossEntropyOptions;

fn close(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= 1e-12 + 1e-10 * b.abs(), "{what}[{i}]: {a} vs {b}");
    }
}

fn cross_entropy_options<B: Backend>() {
    let logits =
        || Tensor::<B>::from_vec(vec![0.2f64, -1.0, 0.5, 1.5, 1.0, 0.3, -0.2, 0.0, -0.5, 0.8, 2.0, -1.0], [3, 4]).requires_grad_(true);
    let t = Tensor::<B>::from_vec(vec![3i64, 0, 2], [3]);
    let w = Tensor::<B>::from_vec(vec![1.0f64, 2.0, 0.5, 1.5], [4]);
    // (name, options, reduction, PyTorch loss, PyTorch gradient)
    type Case<B> = (&'static str, CrossEntropyOptions<B>, Reduction, f64, Vec<f64>);
    let cases: Vec<Case<B>> = vec![
        (
            "weights + label smoothing",
            CrossEntropyOptions { weight: Some(w.clone()), ignore_index: None, label_smoothing: 0.1 },
            Reduction::Mean,
            0.7645015573201819,
            vec![
                0.06945772111885812,
                0.006763548672880331,
                0.10084027333624837,
                -0.17706154312798678,
                -0.15056764932199854,
                0.06167745345596154,
                0.04335144419591682,
                0.0455387516701202,
                0.002645194527648405,
                0.02361680902899866,
                -0.020420817302841822,
                -0.005841186253805221,
            ],
        ),
        (
            "ignore_index",
            CrossEntropyOptions { weight: None, ignore_index: Some(0), label_smoothing: 0.0 },
            Reduction::Mean,
            0.45179546824755507,
            vec![
                0.07910954690053368,
                0.023827337633437626,
                0.10678671864703225,
                -0.20972360318100353,
                0.0,
                0.0,
                0.0,
                0.0,
                0.02863963789821323,
                0.10508732790173562,
                -0.15109778426828302,
                0.017370818468334208,
            ],
        ),
        (
            "weights + ignore_index + label smoothing",
            CrossEntropyOptions { weight: Some(w.clone()), ignore_index: Some(2), label_smoothing: 0.2 },
            Reduction::Mean,
            0.8459335983331555,
            vec![
                0.07176707440461906,
                -0.012360288345212357,
                0.1138725936305574,
                -0.17327937968996412,
                -0.14606364697143234,
                0.05630594278488932,
                0.04841250701156604,
                0.04134519717497703,
                0.0,
                0.0,
                0.0,
                0.0,
            ],
        ),
        (
            "sum + label smoothing",
            CrossEntropyOptions { weight: None, ignore_index: None, label_smoothing: 0.3 },
            Reduction::Sum,
            2.756315619710617,
            vec![
                0.08321909380106735,
                -0.027345324733124753,
                0.1385734372940645,
                -0.19444720636200702,
                -0.3132467785034104,
                0.15429986377354593,
                0.06407739764658578,
                0.09486951708327859,
                -0.017720724203573547,
                0.13517465580347124,
                -0.07719556853656603,
                -0.04025836306333159,
            ],
        ),
    ];
    for (name, options, reduction, loss, grad) in cases {
        let x = logits();
        let l = CrossEntropyLoss { reduction, options }.try_forward(&x, &t).unwrap();
        l.backward().unwrap();
        close(&format!("{name}: loss"), &[l.item()], &[loss]);
        close(&format!("{name}: grad"), &x.grad().unwrap().to_vec_f64(), &grad);
    }
    let z = Tensor::<B>::from_vec(vec![0.3f64, -1.2, 2.0, 0.1], [2, 2]).requires_grad_(true);
    let y = Tensor::<B>::from_vec(vec![1.0f64, 0.0, 0.0, 1.0], [2, 2]);
    let l = BCEWithLogitsLoss { reduction: Reduction::Mean, pos_weight: Some(Tensor::from_vec(vec![2.0f64, 0.5], [2])) }
        .try_forward(&z, &y)
        .unwrap();
    l.backward().unwrap();
    close("bce pos_weight loss", &[l.item()], &[0.9552798243387108]);
    close(
        "bce pos_weight grad",
        &z.grad().unwrap().to_vec_f64(),
        &[-0.21277874159417048, 0.057868804125245595, 0.22019926949447058, -0.0593776015651325],
    );
}

/// A shared encoder with two heads: one backward of the summed losses equals
/// two backwards (the first with retain_graph) through the shared part.
fn multi_task<B: Backend>() {
    autograd_tensor::manual_seed(3);
    let encoder = Sequential::<B>::new().add(LinearConfig::new(5, 8).with_dtype(DType::F64).init()).add(ReLU);
    let cls = ClassificationHead::<B> { linear: LinearConfig::new(8, 3).with_dtype(DType::F64).init() };
    let reg = RegressionHead::<B> { linear: LinearConfig::new(8, 2).with_dtype(DType::F64).init(), loss_kind: RegressionLoss::Huber(1.0) };
    let x = Tensor::<B>::randn_dtype([6, 5], DType::F64);
    let labels = Tensor::<B>::from_vec(vec![0i64, 2, 1, 1, 0, 2], [6]);
    let targets = Tensor::<B>::randn_dtype([6, 2], DType::F64);
    let params: Vec<Tensor<B>> = encoder.parameters().into_iter().chain(cls.parameters()).chain(reg.parameters()).collect();

    let h = encoder.forward(&x);
    (cls.loss(&h, &labels).unwrap() + reg.loss(&h, &targets).unwrap()).backward().unwrap();
    let joint: Vec<Vec<f64>> = params.iter().map(|p| p.grad().unwrap().to_vec_f64()).collect();
    params.iter().for_each(|p| p.set_grad(None));

    let h = encoder.forward(&x);
    cls.loss(&h, &labels).unwrap().backward_with(None, BackwardOptions { retain_graph: true, ..Default::default() }).unwrap();
    reg.loss(&h, &targets).unwrap().backward().unwrap();
    for (i, p) in params.iter().enumerate() {
        close(&format!("param {i}"), &p.grad().unwrap().to_vec_f64(), &joint[i]);
    }
    assert_eq!(cls.predict(&h).dtype(), DType::I64);
}

autograd_testkit::for_backends!(with_traced: cross_entropy_options, multi_task);
