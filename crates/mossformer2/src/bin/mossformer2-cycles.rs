//! The report's recipe through mlx-rs, one process's worth: each cycle
//! builds MossFormer2_SE with fresh weights, evaluates them outside the
//! compiled function, compiles the forward pass, runs it once on a few
//! frames, drops everything, and prints what MLX's active memory kept:
//!
//!   {"cycle": i, "retained_bytes": b, "seconds": s}
//!
//! the same records as `tests/python/mossformer_cycles.py`, so that one
//! driver (`cargo xtask real-model`) reads both.
//!
//!   mossformer2-cycles [--cycles N] [--seed S] [--frames F] [--slices]
//!                      [--no-eval] [--second-shape FRAMES] [--weights W]
//!
//! `--weights` loads a checkpoint each cycle instead of drawing fresh
//! weights.
//!
//! `--second-shape` calls the model a second time at another length (a
//! second compile-cache entry) and adds `live_one`, `live_two` (active
//! memory above the cycle's start with one entry and with two) and
//! `weights` to the record.
//!
//! `--bench N` times N iterations after one untimed one and prints only
//! the nanoseconds they took, for the benchmark (`benches/variants.rs`).

use std::process::ExitCode;
use std::time::Instant;

use mlx_rs::{random, Array};
use mossformer2::{MossFormer2SE, Split};

struct Args {
    cycles: u64,
    seed: u64,
    frames: i32,
    split: Split,
    eval: bool,
    second: Option<i32>,
    bench: Option<u64>,
    weights: Option<std::path::PathBuf>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args { cycles: 20, seed: 0, frames: 8, split: Split::Op, eval: true, second: None, bench: None, weights: None };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut number = || it.next().and_then(|v| v.parse::<u64>().ok()).ok_or(format!("{arg} needs a number"));
        match arg.as_str() {
            "--cycles" => a.cycles = number()?,
            "--seed" => a.seed = number()?,
            "--frames" => a.frames = number()?.clamp(1, 1 << 20) as i32,
            "--second-shape" => a.second = Some(number()?.clamp(1, 1 << 20) as i32),
            "--bench" => a.bench = Some(number()?),
            "--weights" => a.weights = Some(it.next().ok_or("--weights needs a path")?.into()),
            "--slices" => a.split = Split::Slices,
            "--no-eval" => a.eval = false,
            _ => return Err(format!("unknown argument {arg}")),
        }
    }
    Ok(a)
}

/// Active memory once every queued task has run and the cache is cleared.
fn settled() -> Result<i64, String> {
    let stream = mlx_rs::Stream::default();
    // mlx-rs does not wrap synchronize; the drop-in's raw item does it.
    if unsafe { mlx_sys::mlx_synchronize(stream.as_ptr()) } != 0 {
        return Err("mlx_synchronize failed".into());
    }
    mlx_rs::memory::clear_cache().map_err(|e| e.to_string())?;
    Ok(mlx_rs::memory::active_memory().map_err(|e| e.to_string())? as i64)
}

fn features(frames: i32, key: u64) -> Result<Array, String> {
    let x = random::normal::<f32>(&[1, frames, 180][..], None, None, &random::key(key).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    x.eval().map_err(|e| e.to_string())?;
    Ok(x)
}

/// On the CPU, MLX's compile does nothing unless `g++ --version` works;
/// without it the leak cannot show, so a run would prove nothing.
fn refuse_without_compile() -> Result<(), String> {
    let works = std::process::Command::new("g++").arg("--version").output().is_ok_and(|o| o.status.success());
    if cfg!(not(target_os = "macos")) && !works {
        return Err("refusing to run: `g++ --version` fails, so MLX's CPU backend compiles nothing".into());
    }
    Ok(())
}

/// One iteration of the recipe, as a user's loop runs it.
fn iteration(x: &Array, seed: u64, a: &Args) -> Result<(), mossformer2::Error> {
    let mut model = MossFormer2SE::fresh(seed, a.split)?;
    if a.eval {
        model.eval_parameters()?;
    }
    model.mask(x)?.eval()?;
    Ok(())
}

fn bench(a: &Args, n: u64) -> Result<(), String> {
    let x = features(a.frames, 12345)?;
    iteration(&x, a.seed, a).map_err(|e| e.to_string())?;
    settled()?;
    let t0 = Instant::now();
    for i in 0..n {
        iteration(&x, a.seed + 1 + i, a).map_err(|e| e.to_string())?;
    }
    settled()?;
    println!("{}", t0.elapsed().as_nanos());
    Ok(())
}

fn run(a: &Args) -> Result<(), String> {
    refuse_without_compile()?;
    if let Some(n) = a.bench {
        return bench(a, n);
    }
    let e = |e: mossformer2::Error| e.to_string();
    let x = features(a.frames, 12345)?;
    settled()?;
    for i in 0..a.cycles {
        let before = settled()?;
        let t0 = Instant::now();
        let mut shapes = String::new();
        {
            // A checkpoint, as a user loads one (its arrays are read lazily
            // unless evaluated), or fresh weights, as mlx-audio's recipe.
            let mut model = match &a.weights {
                Some(w) => MossFormer2SE::load(w, a.split),
                None => MossFormer2SE::fresh(a.seed + i, a.split),
            }
            .map_err(e)?;
            if a.eval {
                model.eval_parameters().map_err(e)?;
            }
            let out = model.mask(&x).map_err(e)?;
            out.eval().map_err(|e| e.to_string())?;
            drop(out);
            if let Some(frames) = a.second {
                let one = settled()? - before;
                let x2 = features(frames, 54321)?;
                let out = model.mask(&x2).map_err(e)?;
                out.eval().map_err(|e| e.to_string())?;
                drop((out, x2));
                let two = settled()? - before;
                shapes = format!(", \"live_one\": {one}, \"live_two\": {two}, \"weights\": {}", model.parameter_bytes());
            }
        }
        let after = settled()?;
        println!(
            "{{\"cycle\": {i}, \"retained_bytes\": {}, \"seconds\": {:.3}{shapes}}}",
            after - before,
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    match parse().and_then(|a| run(&a)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
