//! The fp32 GEMM roof of a training at its own shapes, for
//! scripts/bench/train_roof.sh.
//!
//!     train_roof plan TOKENS ROWS SEED BATCH > plan.json
//!     train_roof gemm MODEL_DIR plan.json [EVERY] [REPEATS]
//!
//! `plan` writes the batches `train/classifier@1` trains and validates
//! on with these params (`limit_train_samples` ROWS, `seed`, `batch_size`:
//! the epoch-1 order of the stage's `BucketSampler`, and the validation
//! batches of `EvalSampler::for_inference`), so that an eager script can
//! run the very same batches, and the pad id the collator pads with.
//!
//! `gemm` times, with libtorch's matmuls alone, the linear layers' matrix
//! products of one training step on every EVERY-th batch of the plan
//! (default 8): per layer the forward of the QKV, output and feed-forward
//! linears (`addmm`, with their bias), the two backward products of each
//! (the input's gradient, `dY W`, and the weight's, `dY^T X`, on
//! transposed views as autograd passes them); per sequence the pooler and
//! the classifier; at the batch's padded shape. These are 98.8% of the
//! FLOPs `SequenceClassifier::train_flops` counts at the quickstart's
//! lengths; the rest, the attention's scores and weighted sum, are
//! hundreds of tiny batched products whose rate says more about threading
//! than about the machine, and are left out. FLOPs over the loop's time is
//! the rate a step could reach if everything but its GEMMs took no time.
//! Each batch's products run once untimed, then REPEATS times (default 1);
//! it prints the median of the timed passes over all batches.
//! The threads are libtorch's default unless PIPE_THREADS sets them (the
//! train stage sets the engine's count, the machine's cores here).

use std::error::Error;
use std::path::Path;
use std::time::Instant;

use pipe_stages::batches::{limit, pad_id, BucketSampler, EvalSampler};
use pipe_stages::token_file::{open_split, TOKENIZER_FILE};
use pipe_train::model::ModelConfig;
use serde_json::{json, Value};
use tch::{Device, Kind, Tensor};

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(threads) = std::env::var("PIPE_THREADS")
        .ok()
        .and_then(|text| text.parse::<i32>().ok())
    {
        tch::set_num_threads(threads);
    }
    match args.first().map(String::as_str) {
        Some("plan") if args.len() == 5 => plan(&args[1..]),
        Some("gemm") if args.len() >= 3 => gemm(&args[1..]),
        _ => Err(
            "usage: train_roof plan TOKENS ROWS SEED BATCH | gemm MODEL_DIR PLAN [EVERY] [REPEATS]"
                .into(),
        ),
    }
}

/// The batches of the train stage's first epoch and of its validation.
fn plan(args: &[String]) -> Result<(), Box<dyn Error>> {
    let tokens = Path::new(&args[0]);
    let (rows, seed, batch): (usize, u64, usize) =
        (args[1].parse()?, args[2].parse()?, args[3].parse()?);
    let train = open_split(tokens, "train")?;
    let val = open_split(tokens, "val")?;
    let subset = limit(train.len(), rows, seed);
    let sampler = BucketSampler::subset(subset, &train.lengths(), batch, seed)?;
    let val_sampler = EvalSampler::for_inference(&val.lengths(), batch)?;
    let lengths = train.lengths();
    let epoch = sampler.epoch(0);
    let shapes: Vec<[usize; 2]> = epoch
        .iter()
        .map(|rows| {
            let longest = rows.iter().map(|&row| lengths[row]).max().unwrap_or(0);
            [rows.len(), longest]
        })
        .collect();
    let plan = json!({
        "pad_id": pad_id(&tokens.join(TOKENIZER_FILE))?,
        "train": epoch,
        "train_shapes": shapes,
        "val": val_sampler.batches(),
    });
    println!("{plan}");
    Ok(())
}

/// One matrix product of a step: `m x k times k x n`.
#[derive(Clone, Copy, PartialEq)]
struct Product {
    m: i64,
    k: i64,
    n: i64,
    /// A linear layer's forward, which adds its bias (`addmm`).
    bias: bool,
    /// The left operand is a transposed view (a weight's gradient).
    left_transposed: bool,
}

impl Product {
    fn flops(&self) -> f64 {
        2.0 * (self.m * self.k * self.n) as f64
    }
}

/// The forward of `x W^T` (x: m x k, W: n x k) and its two backward
/// products, as autograd runs them.
fn linear_products(m: i64, k: i64, n: i64) -> [Product; 3] {
    let product = |m, k, n, bias, left_transposed| Product {
        m,
        k,
        n,
        bias,
        left_transposed,
    };
    [
        product(m, k, n, true, false),
        // dX = dY W: m x n times n x k.
        product(m, n, k, false, false),
        // dW = dY^T X: n x m times m x k.
        product(n, m, k, false, true),
    ]
}

/// The linear layers' products of one training step on `rows` x `seq`.
fn step_products(config: &ModelConfig, rows: i64, seq: i64) -> Vec<Product> {
    let (hidden, inner) = (config.hidden_size, config.intermediate_size);
    let positions = rows * seq;
    let mut layer = Vec::new();
    layer.extend(linear_products(positions, hidden, 3 * hidden));
    layer.extend(linear_products(positions, hidden, hidden));
    layer.extend(linear_products(positions, hidden, inner));
    layer.extend(linear_products(positions, inner, hidden));
    let mut products = Vec::new();
    for _ in 0..config.num_hidden_layers {
        products.extend(layer.iter().copied());
    }
    products.extend(linear_products(rows, hidden, hidden));
    products.extend(linear_products(rows, hidden, config.num_labels().max(2)));
    products
}

/// Operands for one product, made once and reused by every pass.
struct Operands {
    product: Product,
    left: Tensor,
    right: Tensor,
    bias: Option<Tensor>,
}

impl Operands {
    fn new(product: Product) -> Operands {
        let options = (Kind::Float, Device::Cpu);
        let Product { m, k, n, .. } = product;
        let left = if product.left_transposed {
            Tensor::randn([k, m], options).tr()
        } else {
            Tensor::randn([m, k], options)
        };
        let right = if product.bias {
            // A linear's weight is n x k, used transposed.
            Tensor::randn([n, k], options).tr()
        } else {
            Tensor::randn([k, n], options)
        };
        let bias = product.bias.then(|| Tensor::randn([n], options));
        Operands {
            product,
            left,
            right,
            bias,
        }
    }

    fn run(&self) -> Tensor {
        match &self.bias {
            Some(bias) => bias.addmm(&self.left, &self.right),
            None => self.left.mm(&self.right),
        }
    }
}

fn gemm(args: &[String]) -> Result<(), Box<dyn Error>> {
    let config = ModelConfig::from_file(&Path::new(&args[0]).join("config.json"))?;
    let plan: Value = serde_json::from_str(&std::fs::read_to_string(&args[1])?)?;
    let every: usize = args.get(2).map_or(Ok(8), |text| text.parse())?;
    let repeats: usize = args.get(3).map_or(Ok(1), |text| text.parse())?;
    let shapes: Vec<(i64, i64)> = plan["train_shapes"]
        .as_array()
        .ok_or("the plan has no `train_shapes`")?
        .iter()
        .map(|pair| Some((pair[0].as_i64()?, pair[1].as_i64()?)))
        .collect::<Option<_>>()
        .ok_or("bad `train_shapes`")?;
    tch::manual_seed(0);
    let _guard = tch::no_grad_guard();
    let (mut flops, mut batches, mut products_run) = (0.0, 0, 0);
    // Each pass's time over every sampled batch.
    let mut seconds = vec![0.0; repeats.max(1)];
    for &(rows, seq) in shapes.iter().step_by(every.max(1)) {
        let products = step_products(&config, rows, seq);
        // Operands once per distinct shape of the batch (the layers share
        // theirs), so that only the products are timed.
        let mut operands: Vec<Operands> = Vec::new();
        let mut order = Vec::with_capacity(products.len());
        for product in &products {
            let index = match operands.iter().position(|made| made.product == *product) {
                Some(index) => index,
                None => {
                    operands.push(Operands::new(*product));
                    operands.len() - 1
                }
            };
            order.push(index);
        }
        // One untimed pass warms the kernels and the allocator.
        for pass in 0..=seconds.len() {
            let started = Instant::now();
            for &index in &order {
                let _ = operands[index].run();
            }
            if pass > 0 {
                seconds[pass - 1] += started.elapsed().as_secs_f64();
            }
        }
        flops += products.iter().map(Product::flops).sum::<f64>();
        batches += 1;
        products_run += products.len();
    }
    seconds.sort_by(f64::total_cmp);
    let median = seconds[seconds.len() / 2];
    println!(
        "{}",
        json!({
            "batches": batches,
            "products": products_run,
            "flops": flops,
            "seconds": median,
            "flops_per_s": flops / median,
            "threads": tch::get_num_threads(),
        })
    );
    Ok(())
}
