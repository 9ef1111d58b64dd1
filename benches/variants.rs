//! Patched against pristine in one run, reported as ratios. Each variant's C++
//! `graph_bench` times its own loops in process (start-up is not measured):
//!
//! * `report_cycle`: the report's cycle (make and evaluate 24 MiB of weights,
//!   compile a forward pass that splits every block, run, drop);
//! * `teardown`: a 1.2-million-node graph, a third of it outputs of `split`,
//!   built and dropped without evaluation;
//! * `assign_siblings` / `assign_plain`: copy and move assignment in a hot
//!   loop, over outputs of `split` and over single-output arrays;
//! * `contended_release`: `assign_siblings`'s loop on 8 threads at once, each
//!   over a group of its own (threads that share no group must not queue);
//! * `model_forward`: a compiled forward pass of the 192 MiB transformer.
//!
//! * `mlx_lm_generate_step`, `mlx_lm_compiled_prefill`: mlx-lm 0.32.2's
//!   `generate_step` for 16 tokens, and 8 compiled prefills of a 32-token
//!   prompt, on a phi3 of its own classes (random weights), timed in the
//!   variant's mlx-lm environment by `tests/python/model_server.py --bench`
//!   (made by `cargo xtask mlx-lm-check`).
//!
//! * `mossformer2_iteration`: the report's iteration on its own model through
//!   mlx-rs (`crates/mossformer2`'s `mossformer2-cycles --bench`): build
//!   MossFormer2_SE with fresh weights, evaluate them, compile, run 8 frames,
//!   drop; with `split` and with two slices (built optimized by
//!   `cargo xtask real-model --cells rust-pristine,rust-patched`).
//!
//! Criterion measures every variant; then interleaved rounds (both variants
//! under the same machine load) give the ratio patched / pristine, printed
//! with its goal. Last, a peer comparison: the report's cycle through this
//! project's Rust API (patched) against the official Python package at the
//! pinned version, when it is installed.

use criterion::{criterion_group, criterion_main, Criterion};
use mlx_fork::{control_and_fixes, variant, Variant, MIB};
use std::process::Command;
use std::time::{Duration, Instant};

/// (workload, iterations per measurement, goal: largest patched / pristine).
const WORKLOADS: &[(&str, u64, f64)] = &[
    ("report_cycle", 4, 1.02),
    ("teardown", 1, 1.02),
    ("assign_siblings", 2000, 1.02),
    ("assign_plain", 2000, 1.02),
    ("contended_release", 250, 1.02),
    ("model_forward", 10, 1.02),
];

const ROUNDS: usize = 11;

/// mlx-lm's workloads: (name, `--bench` mode, units per measurement, goal).
const MLX_LM_WORKLOADS: &[(&str, &str, u64, f64)] = &[
    ("mlx_lm_generate_step", "generate", 16, 1.02),
    ("mlx_lm_compiled_prefill", "prefill", 8, 1.02),
];

/// The variant's mlx-lm environment (`cargo xtask mlx-lm-check` makes it:
/// `target/python/v<base>/<variant>/mlx-lm-venv`), beside its MLX build
/// (`target/mlx/v<base>/<variant>/prefix`).
fn mlx_lm_python(v: &Variant) -> Option<std::path::PathBuf> {
    let prefix = std::path::Path::new(v.prefix);
    let (base, target) = (prefix.ancestors().nth(2)?, prefix.ancestors().nth(4)?);
    let python = target
        .join("python")
        .join(base.file_name()?)
        .join(v.name)
        .join("mlx-lm-venv/bin/python");
    python.is_file().then_some(python)
}

fn timed_mlx_lm(python: &std::path::Path, mode: &str, iters: u64) -> Duration {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/model_server.py");
    nanoseconds(
        Command::new(python).args([
            script,
            "--arch",
            "phi3",
            "--bench",
            mode,
            "--iters",
            &iters.to_string(),
        ]),
        &format!("model_server.py --bench {mode}"),
    )
}

/// mlx-lm's workloads on patched and pristine: criterion per variant, then
/// interleaved rounds for the ratio.
fn mlx_lm(c: &mut Criterion) {
    let (pristine, patched) = (
        variant(mlx_patched::Variant::PRISTINE),
        variant(mlx_patched::Variant::PATCHED),
    );
    let (Some(py_pristine), Some(py_patched)) = (mlx_lm_python(pristine), mlx_lm_python(patched))
    else {
        println!(
            "
mlx-lm workloads: no mlx-lm environment for both variants; `cargo xtask mlx-lm-check` makes them"
        );
        return;
    };
    for &(name, mode, unit, _) in MLX_LM_WORKLOADS {
        let mut group = c.benchmark_group(name);
        group
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(10));
        for (v, python) in [(pristine, &py_pristine), (patched, &py_patched)] {
            group.bench_function(v.name, |b| {
                b.iter_custom(|iters| timed_mlx_lm(python, mode, iters * unit))
            });
        }
        group.finish();
    }
    println!("\nmlx-lm, patched / pristine, median of {MLX_LM_ROUNDS} interleaved rounds:\n");
    println!(
        "{:24} | {:>7} | {:>6} | within goal",
        "workload", "ratio", "goal"
    );
    println!("{}", "-".repeat(56));
    for &(name, mode, unit, goal) in MLX_LM_WORKLOADS {
        let ratios: Vec<f64> = (0..MLX_LM_ROUNDS)
            .map(|_| {
                timed_mlx_lm(&py_patched, mode, unit).as_secs_f64()
                    / timed_mlx_lm(&py_pristine, mode, unit).as_secs_f64()
            })
            .collect();
        let r = median(ratios);
        println!(
            "{name:24} | {r:7.3} | {goal:6.2} | {}",
            if r <= goal { "yes" } else { "NO" }
        );
    }
}

/// Each round starts two Python processes: fewer rounds than the C++ ones.
const MLX_LM_ROUNDS: usize = 7;

fn timed(v: &Variant, workload: &str, iters: u64) -> Duration {
    nanoseconds(
        Command::new(v.probe(mlx_patched::probes::GRAPH_BENCH)).args([workload, &iters.to_string()]),
        &format!("{} graph_bench {workload}", v.name),
    )
}

/// Runs a program that times its own loop and prints the nanoseconds.
fn nanoseconds(cmd: &mut Command, what: &str) -> Duration {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Duration::from_nanos(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{what} printed no nanoseconds: {e}")),
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn variants(c: &mut Criterion) {
    for &(workload, unit, _) in WORKLOADS {
        let mut group = c.benchmark_group(workload);
        group
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(5));
        for v in control_and_fixes() {
            group.bench_function(v.name, |b| {
                b.iter_custom(|iters| timed(v, workload, iters * unit))
            });
        }
        group.finish();
    }

    println!("\npatched / pristine, median of {ROUNDS} interleaved rounds:\n");
    println!(
        "{:18} | {:>7} | {:>6} | within goal",
        "workload", "ratio", "goal"
    );
    println!("{}", "-".repeat(50));
    let (pristine, patched) = (
        variant(mlx_patched::Variant::PRISTINE),
        variant(mlx_patched::Variant::PATCHED),
    );
    for &(workload, unit, goal) in WORKLOADS {
        let ratios: Vec<f64> = (0..ROUNDS)
            .map(|_| {
                timed(patched, workload, unit).as_secs_f64()
                    / timed(pristine, workload, unit).as_secs_f64()
            })
            .collect();
        let r = median(ratios);
        println!(
            "{workload:18} | {r:7.3} | {goal:6.2} | {}",
            if r <= goal { "yes" } else { "NO" }
        );
    }
    peer_comparison();
}

/// The official Python package at the pinned version, when installed.
fn python_mlx_version() -> Option<String> {
    let out = Command::new("python3")
        .args(["-c", "import mlx.core as mx; print(mx.__version__)"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

const PYTHON_CYCLE: &str = r#"
import sys, time
import mlx.core as mx
cycles = int(sys.argv[1])
x = mx.random.normal((8, 512), key=mx.random.key(0))
mx.eval(x)
retained = []
start = time.perf_counter_ns()
for _ in range(cycles):
    mx.synchronize()
    base = mx.get_active_memory()
    weights = [mx.random.normal((512, 512), key=mx.random.key(1 + i)) for i in range(24)]
    mx.eval(weights)
    def forward(y):
        for w in weights:
            a, b = mx.split(y @ w, 2, axis=-1)
            y = mx.concatenate([b, a], axis=-1)
        return y
    fn = mx.compile(forward)
    mx.eval(fn(x))
    del fn, forward, weights
    mx.synchronize()
    retained.append(mx.get_active_memory() - base)
print(time.perf_counter_ns() - start, sum(retained) // cycles)
"#;

fn peer_comparison() {
    let pinned = mlx_patched::Env::process()
        .base()
        .expect("MLX_FORK_BASE names a base")
        .version;
    println!("\npeer comparison: the report's cycle, this project's Rust API on patched against the official Python package");
    match python_mlx_version() {
        Some(v) if v == pinned => {}
        Some(v) => {
            println!("skipped: python3 has mlx {v}, not the pinned {pinned} (pip install mlx=={pinned} mlx-cpu=={pinned})");
            return;
        }
        None => {
            println!("skipped: python3 cannot import mlx (pip install mlx=={pinned} mlx-cpu=={pinned} to compare)");
            return;
        }
    }
    const CYCLES: usize = 20;
    let cfg = mlx_probes::Config {
        cycles: CYCLES,
        ..mlx_probes::Config::default()
    };
    let (mut rust, mut python, mut rust_retained, mut python_retained) =
        (Vec::new(), Vec::new(), 0, 0);
    for _ in 0..5 {
        let start = Instant::now();
        let cycles = mlx_probes::run(&cfg, |_, _| {}).expect("the Rust API runs the scenario");
        rust.push(start.elapsed().as_secs_f64());
        rust_retained = cycles.iter().map(|c| c.retained_bytes).sum::<i64>() / CYCLES as i64;
        let out = Command::new("python3")
            .args(["-c", PYTHON_CYCLE, &CYCLES.to_string()])
            .output()
            .expect("run python3");
        assert!(
            out.status.success(),
            "python: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let mut fields = text
            .split_whitespace()
            .map(|f| f.parse::<i64>().expect("integer"));
        python.push(fields.next().unwrap() as f64 / 1e9);
        python_retained = fields.next().unwrap();
    }
    println!(
        "Rust API (linked to {}) / Python mlx {pinned}: time ratio {:.3} (medians of 5 runs of {CYCLES} cycles: {:.3} s / {:.3} s); \
         retained per cycle: Rust {:.2} MiB, Python {:.2} MiB",
        mlx_bridge::MLX_VARIANT,
        median(rust.clone()) / median(python.clone()),
        median(rust),
        median(python),
        rust_retained as f64 / MIB as f64,
        python_retained as f64 / MIB as f64
    );
}

/// The port's experiment binary for a variant, beside its MLX build
/// (`target/mossformer2/<variant>/release`).
fn mossformer2_binary(v: &Variant) -> Option<std::path::PathBuf> {
    let target = std::path::Path::new(v.prefix).ancestors().nth(4)?;
    let bin = target.join("mossformer2").join(v.name).join("release/mossformer2-cycles");
    bin.is_file().then_some(bin)
}

fn timed_mossformer2(bin: &std::path::Path, slices: bool, iters: u64) -> Duration {
    let mut cmd = Command::new(bin);
    cmd.args(["--bench", &iters.to_string()]);
    if slices {
        cmd.arg("--slices");
    }
    nanoseconds(&mut cmd, "mossformer2-cycles --bench")
}

/// The report's anchor: 138 ms with two slices against 139 ms with `split`,
/// on its machine. Here: patched against pristine, and slices against
/// `split`, each in interleaved rounds.
fn mossformer2(c: &mut Criterion) {
    let (pristine, patched) = (
        variant(mlx_patched::Variant::PRISTINE),
        variant(mlx_patched::Variant::PATCHED),
    );
    let (Some(bin_pristine), Some(bin_patched)) = (mossformer2_binary(pristine), mossformer2_binary(patched)) else {
        println!("\nmossformer2: the port is not built optimized for both variants; `cargo xtask real-model --cells rust-pristine,rust-patched --cycles 0` builds it");
        return;
    };
    let mut group = c.benchmark_group("mossformer2_iteration");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(20));
    for (name, bin, slices) in [
        ("pristine_split", &bin_pristine, false),
        ("patched_split", &bin_patched, false),
        ("patched_slices", &bin_patched, true),
    ] {
        group.bench_function(name, |b| b.iter_custom(|iters| timed_mossformer2(bin, slices, iters)));
    }
    group.finish();
    const UNIT: u64 = 4;
    let ratio = |num: (&std::path::Path, bool), den: (&std::path::Path, bool)| {
        median(
            (0..ROUNDS)
                .map(|_| {
                    timed_mossformer2(num.0, num.1, UNIT).as_secs_f64()
                        / timed_mossformer2(den.0, den.1, UNIT).as_secs_f64()
                })
                .collect(),
        )
    };
    println!("\nmossformer2 iteration, median of {ROUNDS} interleaved rounds of {UNIT}:\n");
    for (what, r) in [
        ("patched / pristine (split)", ratio((&bin_patched, false), (&bin_pristine, false))),
        ("slices / split (patched)", ratio((&bin_patched, true), (&bin_patched, false))),
    ] {
        println!("{what:28} | {r:7.3} | goal 1.02 | {}", if r <= 1.02 { "yes" } else { "NO" });
    }
}

criterion_group!(benches, variants, mlx_lm, mossformer2);
criterion_main!(benches);
