//! A small training job that behaves like a real one, with memory leaks that
//! can be switched on one at a time (`--leak MODE`).
//!
//! It trains an MLP on a synthetic, deterministic classification task: data
//! loader worker threads fill a bounded prefetch queue, gradients are
//! accumulated over `--accumulate` steps, every epoch ends with an evaluation
//! pass under no-grad and with the device's allocator cache emptied. Each
//! epoch's end is marked with `tracer_mark("epoch N")` when the leak tracer is
//! loaded, and the resident set size is printed the way one would check it by
//! hand.

mod device_cache;
mod mark;

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;

use clap::{Parser, ValueEnum};
use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Tensor};

const FEATURES: i64 = 64;
const HIDDEN: i64 = 256;
const CLASSES: i64 = 10;
/// Number of batches in the held-out evaluation set.
const EVAL_BATCHES: u64 = 4;
/// Number of distinct augmentation noise tensors (see `NoiseTable`).
const NOISE_SLOTS: usize = 32;

/// Which memory leak to plant in the training loop.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Leak {
    /// No leak: memory stays flat after the first epoch.
    None,
    /// Every step's loss is kept as a tensor, autograd graph included.
    LossHistory,
    /// Batches, their features and logits are cached for replay and never evicted.
    BatchCache,
    /// A copy of every gradient is kept at each optimizer step.
    GradSnapshots,
}

impl Leak {
    fn name(self) -> String {
        self.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default()
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "demo-trainer",
    about = "Trains a small MLP on synthetic data, optionally with a planted memory leak."
)]
struct Args {
    /// Number of training epochs.
    #[arg(long, default_value_t = 6)]
    epochs: usize,
    /// Training steps (batches) per epoch.
    #[arg(long, default_value_t = 48)]
    steps: usize,
    /// Samples per batch.
    #[arg(long, default_value_t = 32)]
    batch_size: i64,
    /// Data loader worker threads (0: batches are made on the training thread).
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Capacity of the bounded prefetch queue between workers and training.
    #[arg(long, default_value_t = 4)]
    prefetch: usize,
    /// Gradient accumulation: backward every step, optimizer step every K steps.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    accumulate: u64,
    /// Planted memory leak.
    #[arg(long, value_enum, default_value_t = Leak::None)]
    leak: Leak,
    /// Learning rate (Adam).
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Seed for the data and the model's initial weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// libtorch intra-op threads (0: libtorch's default).
    #[arg(long, default_value_t = 1)]
    threads: i32,
    /// Train on the CPU even when CUDA is available.
    #[arg(long)]
    cpu: bool,
}

/// splitmix64: small, fast and the same everywhere, so the dataset is too.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0xD134_2543_DE82_EF95).wrapping_add(0x2545_F491_4F6C_DD1D))
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    fn uniform(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 + 0.5) / (1u64 << 24) as f32
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f32 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f32::consts::PI * u2).cos()
    }

    fn normals(seed: u64, n: usize) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        (0..n).map(|_| rng.normal()).collect()
    }
}

/// One batch of inputs and class labels.
struct Batch {
    index: u64,
    xs: Tensor,
    ys: Tensor,
}

/// The synthetic task: Gaussian inputs labelled by a fixed random linear
/// "teacher". Batch `i` is the same in every run with the same seed.
struct Dataset {
    seed: u64,
    batch_size: i64,
    teacher: Tensor,
}

impl Dataset {
    fn new(seed: u64, batch_size: i64) -> Self {
        let teacher = Tensor::from_slice(&Rng::normals(seed ^ 0x7EAC_4E55, (FEATURES * CLASSES) as usize))
            .view([FEATURES, CLASSES]);
        Dataset { seed, batch_size, teacher }
    }

    fn batch(&self, index: u64) -> Batch {
        let n = (self.batch_size * FEATURES) as usize;
        let xs = Tensor::from_slice(&Rng::normals(self.seed.rotate_left(17) ^ index, n))
            .view([self.batch_size, FEATURES]);
        let ys = xs.matmul(&self.teacher).argmax(-1, false);
        Batch { index, xs, ys }
    }
}

/// Produces the batches `first..first + count` in order, from `workers`
/// threads through a bounded queue of `prefetch` batches, and hands each to
/// `consume` on the calling thread. With a device, batches are put in pinned
/// host memory so the copy to the device can be asynchronous.
fn load_batches(
    args: &Args,
    first: u64,
    count: u64,
    pin_for: Option<Device>,
    mut consume: impl FnMut(Batch),
) {
    let make = |data: &Dataset, index: u64| {
        let batch = data.batch(index);
        match pin_for {
            Some(device) => Batch {
                index,
                xs: batch.xs.pin_memory(device),
                ys: batch.ys.pin_memory(device),
            },
            None => batch,
        }
    };
    if args.workers == 0 {
        let data = Dataset::new(args.seed, args.batch_size);
        for index in first..first + count {
            consume(make(&data, index));
        }
        return;
    }
    let workers = args.workers as u64;
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::sync_channel::<Batch>(args.prefetch.max(1));
        for worker in 0..workers {
            let tx = tx.clone();
            let make = &make;
            scope.spawn(move || {
                let data = Dataset::new(args.seed, args.batch_size);
                let mut index = first + worker;
                while index < first + count {
                    if tx.send(make(&data, index)).is_err() {
                        break;
                    }
                    index += workers;
                }
            });
        }
        drop(tx);
        // Workers finish out of order; hand batches on in index order.
        let mut pending = BTreeMap::new();
        let mut next = first;
        for batch in rx {
            pending.insert(batch.index, batch);
            while let Some(batch) = pending.remove(&next) {
                consume(batch);
                next += 1;
            }
        }
        assert!(pending.is_empty(), "data loader lost batches");
    });
}

/// Augmentation noise, one tensor per step slot, made the first time a slot
/// is used. It fills during the first epoch and then keeps its size: a cache,
/// not a leak.
struct NoiseTable {
    seed: u64,
    shape: [i64; 2],
    device: Device,
    slots: HashMap<usize, Tensor>,
}

impl NoiseTable {
    fn augment(&mut self, step: usize, xs: &Tensor) -> Tensor {
        let (seed, shape, device) = (self.seed, self.shape, self.device);
        let noise = self.slots.entry(step % NOISE_SLOTS).or_insert_with(|| {
            let n = (shape[0] * shape[1]) as usize;
            Tensor::from_slice(&Rng::normals(seed ^ 0xA06 ^ ((step % NOISE_SLOTS) as u64) << 32, n))
                .view(shape)
                .to_device(device)
        });
        xs + &*noise * 0.05
    }
}

/// A batch kept for replay by `leak_batch_cache`.
#[allow(dead_code)]
struct CachedBatch {
    xs: Tensor,
    ys: Tensor,
    features: Tensor,
    logits: Tensor,
}

/// Everything the leaks hold on to.
#[derive(Default)]
struct Leaked {
    loss_history: Vec<Tensor>,
    batch_cache: Vec<CachedBatch>,
    grad_snapshots: Vec<Vec<Tensor>>,
}

/// LEAK `loss-history`: computes the batch's loss for the loss curve and
/// keeps the tensor itself instead of its value. The tensor still carries its
/// autograd graph, so every step's activations stay alive with it.
#[inline(never)]
fn leak_loss_history(history: &mut Vec<Tensor>, model: &nn::Sequential, xs: &Tensor, ys: &Tensor) {
    let loss = model.forward(xs).cross_entropy_for_logits(ys);
    history.push(loss);
}

/// LEAK `batch-cache`: keeps every batch with its features (the last hidden
/// layer) and logits for replaying hard examples later; nothing ever evicts
/// an entry.
#[inline(never)]
fn leak_batch_cache(cache: &mut Vec<CachedBatch>, model: &nn::Sequential, xs: &Tensor, ys: &Tensor) {
    let _no_grad = tch::no_grad_guard();
    let mut outputs = model.forward_all(xs, None);
    let logits = outputs.pop().expect("the model has layers");
    let features = outputs.pop().expect("the model has hidden layers");
    cache.push(CachedBatch { xs: xs.copy(), ys: ys.copy(), features, logits });
}

/// LEAK `grad-snapshots`: keeps a copy of every parameter's gradient at each
/// optimizer step, for plotting gradient norms at the end; never trimmed.
#[inline(never)]
fn leak_grad_snapshots(snapshots: &mut Vec<Vec<Tensor>>, params: &[Tensor]) {
    let mut copies = Vec::with_capacity(params.len());
    for param in params {
        copies.push(param.grad().copy());
    }
    snapshots.push(copies);
}

struct Trainer {
    device: Device,
    leak: Leak,
    accumulate: u64,
    model: nn::Sequential,
    params: Vec<Tensor>,
    opt: nn::Optimizer,
    noise: NoiseTable,
    /// Detached losses of the steps since the last optimizer step; cleared at
    /// every optimizer step.
    accumulated: Vec<Tensor>,
    leaked: Leaked,
    steps_done: u64,
}

impl Trainer {
    fn new(args: &Args, device: Device) -> Self {
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let model = nn::seq()
            .add(nn::linear(&root / "fc1", FEATURES, HIDDEN, Default::default()))
            .add_fn(|x| x.relu())
            .add(nn::linear(&root / "fc2", HIDDEN, HIDDEN, Default::default()))
            .add_fn(|x| x.relu())
            .add(nn::linear(&root / "out", HIDDEN, CLASSES, Default::default()));
        let opt = nn::Adam::default().build(&vs, args.lr).expect("optimizer");
        let params = vs.trainable_variables();
        Trainer {
            device,
            leak: args.leak,
            accumulate: args.accumulate,
            model,
            params,
            opt,
            noise: NoiseTable {
                seed: args.seed,
                shape: [args.batch_size, FEATURES],
                device,
                slots: HashMap::new(),
            },
            accumulated: Vec::new(),
            leaked: Leaked::default(),
            steps_done: 0,
        }
    }

    /// One training step; returns the mean loss when it ended an accumulation
    /// window with an optimizer step.
    fn step(&mut self, step_in_epoch: usize, batch: Batch) -> Option<f64> {
        let non_blocking = self.device != Device::Cpu;
        let xs = batch.xs.to_device_(self.device, Kind::Float, non_blocking, false);
        let ys = batch.ys.to_device_(self.device, Kind::Int64, non_blocking, false);
        let xs = self.noise.augment(step_in_epoch, &xs);

        let loss = self.model.forward(&xs).cross_entropy_for_logits(&ys);
        (&loss / self.accumulate as f64).backward();
        self.accumulated.push(loss.detach());

        match self.leak {
            Leak::LossHistory => leak_loss_history(&mut self.leaked.loss_history, &self.model, &xs, &ys),
            Leak::BatchCache => leak_batch_cache(&mut self.leaked.batch_cache, &self.model, &xs, &ys),
            Leak::None | Leak::GradSnapshots => {}
        }

        self.steps_done += 1;
        if self.steps_done % self.accumulate != 0 {
            return None;
        }
        self.opt.step();
        if self.leak == Leak::GradSnapshots {
            leak_grad_snapshots(&mut self.leaked.grad_snapshots, &self.params);
        }
        self.opt.zero_grad();
        let mean = Tensor::stack(&self.accumulated, 0).mean(Kind::Float).double_value(&[]);
        self.accumulated.clear();
        Some(mean)
    }

    /// Accuracy on the held-out batches, without building autograd graphs.
    fn evaluate(&self, eval: &[Batch]) -> f64 {
        tch::no_grad(|| {
            let total: f64 = eval
                .iter()
                .map(|b| {
                    let xs = b.xs.to_device(self.device);
                    let ys = b.ys.to_device(self.device);
                    self.model.forward(&xs).accuracy_for_logits(&ys).double_value(&[])
                })
                .sum();
            total / eval.len() as f64
        })
    }
}

/// Resident set size of this process, from /proc/self/statm.
fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    pages * page
}

fn mib(bytes: i64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn main() {
    let args = Args::parse();
    if args.threads > 0 {
        tch::set_num_threads(args.threads);
    }
    tch::manual_seed(args.seed as i64);
    let device = if !args.cpu && tch::Cuda::is_available() { Device::Cuda(0) } else { Device::Cpu };
    let pin_for = (device != Device::Cpu).then_some(device);
    println!(
        "demo-trainer: device {:?}, {} epochs x {} steps, batch {}, {} workers, accumulate {}, leak {}, tracer {}",
        device,
        args.epochs,
        args.steps,
        args.batch_size,
        args.workers,
        args.accumulate,
        args.leak.name(),
        if mark::tracer_loaded() { "loaded" } else { "not loaded" },
    );

    // Held-out batches: the same task, indices far from the training ones.
    let eval_data = Dataset::new(args.seed, args.batch_size);
    let eval: Vec<Batch> = (0..EVAL_BATCHES).map(|i| eval_data.batch(u64::MAX - i)).collect();
    drop(eval_data);

    let mut trainer = Trainer::new(&args, device);
    let start_rss = rss_bytes() as i64;
    let mut first_epoch_rss = None;
    let mut last_rss = start_rss;
    let started = std::time::Instant::now();
    for epoch in 1..=args.epochs {
        let first = ((epoch - 1) * args.steps) as u64;
        let mut losses = Vec::new();
        let mut step_in_epoch = 0;
        load_batches(&args, first, args.steps as u64, pin_for, |batch| {
            if let Some(loss) = trainer.step(step_in_epoch, batch) {
                losses.push(loss);
            }
            step_in_epoch += 1;
        });
        let accuracy = trainer.evaluate(&eval);
        let emptied = device_cache::empty();
        mark::tracer_mark(&format!("epoch {epoch}"));

        let rss = rss_bytes() as i64;
        let loss = if losses.is_empty() { f64::NAN } else { losses.iter().sum::<f64>() / losses.len() as f64 };
        println!(
            "epoch {epoch}/{}: loss {loss:.4}  eval acc {accuracy:.3}  rss {:.1} MiB ({:+.2} MiB){}",
            args.epochs,
            mib(rss),
            mib(rss - last_rss),
            match emptied {
                device_cache::Emptied::Yes => "  device cache emptied",
                device_cache::Emptied::NoDevice => "",
                device_cache::Emptied::Failed => "  device cache: empty failed",
            }
        );
        first_epoch_rss.get_or_insert(rss);
        last_rss = rss;
    }
    if let Some(first) = first_epoch_rss {
        if args.epochs > 1 {
            let per_epoch = (last_rss - first) as f64 / (args.epochs - 1) as f64;
            println!(
                "rss after epoch 1: {:.1} MiB, after epoch {}: {:.1} MiB, {:+.2} MiB per epoch; {:.1}s",
                mib(first),
                args.epochs,
                mib(last_rss),
                per_epoch / (1024.0 * 1024.0),
                started.elapsed().as_secs_f64(),
            );
        }
    }
    let kept = trainer.leaked.loss_history.len()
        + trainer.leaked.batch_cache.len()
        + trainer.leaked.grad_snapshots.len();
    if kept > 0 {
        println!("leak {}: {kept} entries still held", args.leak.name());
    }
}
