//! Patched against pristine in one run: what the extra check on every
//! assignment costs on graphs full of multi-output groups. Each variant's
//! C++ `graph_bench` times its own cycles (compile, run, drop, plus an
//! uncompiled run), so process start-up is not measured. Ends with the
//! ratio patched / pristine over interleaved rounds.

use criterion::{criterion_group, criterion_main, Criterion};
use mlx_fork::{variant, Variant};
use std::process::Command;
use std::time::Duration;

fn timed(variant: &Variant, iters: u64) -> Duration {
    let out = Command::new(variant.graph_bench).arg(iters.to_string()).output().expect("run graph_bench");
    assert!(out.status.success(), "{} graph_bench failed", variant.name);
    Duration::from_nanos(String::from_utf8_lossy(&out.stdout).trim().parse().expect("nanoseconds"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn variants(c: &mut Criterion) {
    let mut group = c.benchmark_group("compile_run_drop");
    for v in mlx_fork::VARIANTS {
        group.bench_function(v.name, |b| b.iter_custom(|iters| timed(v, iters)));
    }
    group.finish();

    // Interleaved rounds, so both variants see the same machine load.
    let (mut pristine, mut patched) = (Vec::new(), Vec::new());
    for _ in 0..15 {
        pristine.push(timed(variant("pristine"), 50).as_secs_f64());
        patched.push(timed(variant("patched"), 50).as_secs_f64());
    }
    let ratios: Vec<f64> = patched.iter().zip(&pristine).map(|(a, b)| a / b).collect();
    println!("compile_run_drop: patched / pristine = {:.3} (median of 15 interleaved rounds of 50 cycles)", median(ratios));
}

criterion_group!(benches, variants);
criterion_main!(benches);
