//! The leak report's scenario through mlx-rs 0.33: per cycle, make weights,
//! evaluate them outside the compiled function, compile a forward pass that
//! splits every block's output, run it once, drop the compiled function and
//! the weights, and print how much active memory the cycle left behind. The
//! weights and the input come from the same PRNG keys as the C++ probe
//! (`crates/probes/cpp/leak_scenario.cpp`), so the digests are comparable
//! across the C++ API, the project's Rust API and mlx-rs.
//!
//!   mlx-rs-leak-scenario [--cycles N] [--blocks N] [--dim N] [--batch N]
//!                        [--slices] [--no-eval-outside]
//!   mlx-rs-leak-scenario --shims
//!   mlx-rs-leak-scenario --race TRIALS
//!
//! Output: `cycle <i> retained_bytes <n> digest <hex>` per cycle; with
//! `--shims`, one `shim <name> ok` line per check of what the drop-in mlx-sys
//! supplies off Apple and off ARM, or an error and a non-zero exit; with
//! `--race`, `race split2 trials <n> leaked <k>`: the two outputs of one
//! `split` moved to two threads and dropped at the same instant.

use half::{bf16, f16};
use mlx_rs::error::Exception;
use mlx_rs::ops::indexing::IndexOp;
use mlx_rs::transforms::compile::compile;
use mlx_rs::{ops, random, Array};

struct Config {
    cycles: usize,
    blocks: i32,
    dim: i32,
    batch: i32,
    split: bool,
    eval_outside: bool,
}

fn parse(args: &[String]) -> Result<Config, String> {
    let mut c = Config { cycles: 10, blocks: 24, dim: 512, batch: 8, split: true, eval_outside: true };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().and_then(|v| v.parse::<i32>().ok()).filter(|v| *v > 0).ok_or(format!("{a} needs a positive number"));
        match a.as_str() {
            "--cycles" => c.cycles = value()? as usize,
            "--blocks" => c.blocks = value()?,
            "--dim" => c.dim = value()?,
            "--batch" => c.batch = value()?,
            "--slices" => c.split = false,
            "--no-eval-outside" => c.eval_outside = false,
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if c.dim % 2 != 0 {
        return Err("--dim must be even".into());
    }
    Ok(c)
}

/// Per block `x @ w`, then the halves of the result swapped: by `split`
/// (one multi-output op) or by two slices.
fn forward(weights: &[Array], x: &Array, split: bool) -> Result<Array, Exception> {
    let mut x = x.clone();
    for w in weights {
        let h = x.matmul(w)?;
        let half = h.shape()[1] / 2;
        let (a, b) = if split {
            let mut parts = h.split_equal(2, -1)?;
            let b = parts.pop().unwrap();
            (parts.pop().unwrap(), b)
        } else {
            (h.index((.., ..half)), h.index((.., half..)))
        };
        x = ops::concatenate(&[b, a], -1)?;
    }
    Ok(x)
}

/// FNV-1a over the output's f32 bytes, as the C++ probe computes it.
fn digest(a: &Array) -> u64 {
    let mut h: u64 = 1469598103934665603;
    for v in a.as_slice::<f32>() {
        for byte in v.to_ne_bytes() {
            h = (h ^ byte as u64).wrapping_mul(1099511628211);
        }
    }
    h
}

/// Active memory once all work is done.
fn active_after_sync() -> Result<i64, Exception> {
    // mlx-rs has no wrapper for it; the raw call is the drop-in's own item.
    let stream = mlx_rs::Stream::default();
    let status = unsafe { mlx_sys::mlx_synchronize(stream.as_ptr()) };
    if status != 0 {
        return Err(Exception::custom("mlx_synchronize failed"));
    }
    Ok(mlx_rs::memory::active_memory()? as i64)
}

fn run(cfg: &Config) -> Result<(), Exception> {
    let x = random::normal::<f32>(&[cfg.batch, cfg.dim][..], None, None, &random::key(0)?)?;
    x.eval()?;
    for cycle in 0..cfg.cycles {
        let base = active_after_sync()?;
        let d = {
            let weights = (0..cfg.blocks)
                .map(|i| random::normal::<f32>(&[cfg.dim, cfg.dim][..], None, None, &random::key(1 + i as u64)?))
                .collect::<Result<Vec<_>, _>>()?;
            if cfg.eval_outside {
                mlx_rs::transforms::eval(weights.iter())?;
            }
            // The weights are captured by value, as a Python closure captures them.
            let (captured, split) = (weights.clone(), cfg.split);
            let mut compiled = compile(move |x: &Array| -> Result<Array, Exception> { forward(&captured, x, split) }, None);
            let out = compiled(&x)?;
            out.eval()?;
            digest(&out)
            // `compiled`, the closure and `weights` all drop here.
        };
        let retained = active_after_sync()? - base;
        println!("cycle {cycle} retained_bytes {retained} digest {d:016x}");
    }
    Ok(())
}

/// What the drop-in supplies for mlx-rs off ARM (the float16/bfloat16
/// accessors) and off Apple (`mach_approximate_time`, the seed of the default
/// random state), exercised through mlx-rs's public API.
fn shims() -> Result<(), String> {
    let err = |e: Exception| e.to_string();
    let halves = [0.0f32, -0.0, 1.5, -3.25, 65504.0, 6.1e-5, 0.1];
    let f16s: Vec<f16> = halves.iter().map(|&v| f16::from_f32(v)).collect();
    let a = Array::from_slice(&f16s, &[f16s.len() as i32]);
    let back: Vec<f16> = a.as_slice::<f16>().to_vec();
    if back.iter().map(|v| v.to_bits()).ne(f16s.iter().map(|v| v.to_bits())) {
        return Err(format!("float16 data round trip: {back:?} != {f16s:?}"));
    }
    let doubled = (&a + &a).as_slice::<f16>().iter().map(|v| v.to_f32()).collect::<Vec<_>>();
    let want: Vec<f32> = f16s.iter().map(|v| f16::from_f32(v.to_f32() * 2.0).to_f32()).collect();
    if doubled.iter().map(|v| v.to_bits()).ne(want.iter().map(|v| v.to_bits())) {
        return Err(format!("float16 arithmetic: {doubled:?} != {want:?}"));
    }
    let item = Array::from_slice(&[f16::from_f32(-2.5)], &[1]).item_exact::<f16>();
    if item != f16::from_f32(-2.5) {
        return Err(format!("float16 item: {item}"));
    }
    println!("shim float16 ok");

    let bf16s: Vec<bf16> = halves.iter().map(|&v| bf16::from_f32(v)).collect();
    let b = Array::from_slice(&bf16s, &[bf16s.len() as i32]);
    let back: Vec<bf16> = b.as_slice::<bf16>().to_vec();
    if back.iter().map(|v| v.to_bits()).ne(bf16s.iter().map(|v| v.to_bits())) {
        return Err(format!("bfloat16 data round trip: {back:?} != {bf16s:?}"));
    }
    let converted = b.as_type::<f32>().map_err(err)?;
    let want: Vec<f32> = bf16s.iter().map(|v| v.to_f32()).collect();
    if converted.as_slice::<f32>() != want.as_slice() {
        return Err(format!("bfloat16 to float32: {:?} != {want:?}", converted.as_slice::<f32>()));
    }
    let item = Array::from_slice(&[bf16::from_f32(3.0)], &[1]).item_exact::<bf16>();
    if item != bf16::from_f32(3.0) {
        return Err(format!("bfloat16 item: {item}"));
    }
    println!("shim bfloat16 ok");

    // The default random state: no key given, so mlx-rs seeds one from the clock.
    let n = 20_000;
    let a = random::normal::<f32>(&[n][..], None, None, None).map_err(err)?;
    let b = random::normal::<f32>(&[n][..], None, None, None).map_err(err)?;
    let (a, b) = (a.as_slice::<f32>().to_vec(), b.as_slice::<f32>().to_vec());
    let mean = a.iter().sum::<f32>() / n as f32;
    let var = a.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / n as f32;
    if a == b || mean.abs() > 0.05 || (var - 1.0).abs() > 0.05 {
        return Err(format!("default random state: mean {mean}, variance {var}, successive draws equal: {}", a == b));
    }
    println!("shim default_random_state ok");
    Ok(())
}

/// Trials of the release race in safe Rust: `Array` is `Send`, so the two
/// outputs of one `split` of an evaluated input can go to two threads, which
/// drop them at the same instant, after a random spin of up to 2048
/// iterations each. Returns how many trials left the input allocated.
fn race(trials: usize) -> Result<usize, Exception> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let host: Vec<f32> = (0..4096).map(|i| (i % 97) as f32 + 1.0).collect();
    let mut seed: u64 = std::process::id() as u64 | 1;
    let mut spins = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % 2049) as usize
    };
    let spin = |n: usize| {
        for i in 0..n {
            std::hint::black_box(i);
        }
    };
    let mut leaked = 0;
    for _ in 0..trials {
        let base = active_after_sync()?;
        let mut outs = Array::from_slice(&host, &[64, 64]).split_equal(2, 0)?;
        let (b, a) = (outs.pop().unwrap(), outs.pop().unwrap());
        let ready = Arc::new(AtomicUsize::new(0));
        let (theirs, mine) = (spins(), spins());
        let other = {
            let ready = ready.clone();
            std::thread::spawn(move || {
                ready.fetch_add(1, Ordering::AcqRel);
                while ready.load(Ordering::Acquire) < 2 {
                    std::hint::spin_loop();
                }
                spin(theirs);
                drop(a);
            })
        };
        ready.fetch_add(1, Ordering::AcqRel);
        while ready.load(Ordering::Acquire) < 2 {
            std::hint::spin_loop();
        }
        spin(mine);
        drop(b);
        other.join().map_err(|_| Exception::custom("a race thread panicked"))?;
        if active_after_sync()? > base {
            leaked += 1;
        }
    }
    Ok(leaked)
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--race") {
        let trials = args.get(1).and_then(|t| t.parse::<usize>().ok()).filter(|t| *t > 0);
        let Some(trials) = trials else {
            eprintln!("error: --race needs a positive number of trials");
            return std::process::ExitCode::FAILURE;
        };
        return match race(trials) {
            Ok(leaked) => {
                println!("race split2 trials {trials} leaked {leaked}");
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    if args.first().map(String::as_str) == Some("--shims") {
        return match shims() {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("shim check failed: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let result = parse(&args).map_err(|e| e.to_string()).and_then(|cfg| run(&cfg).map_err(|e| e.to_string()));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
