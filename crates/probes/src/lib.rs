//! The leak report's scenario through the Rust API, the twin of
//! `cpp/leak_scenario.cpp`: same flags, same weights (fixed PRNG keys), same
//! output lines, so the two can be compared line for line.

use mlx_bridge::{self as mlx, Array, Dtype, Result};

#[derive(Clone, Debug)]
pub struct Config {
    pub cycles: usize,
    pub blocks: usize,
    pub dim: i32,
    pub batch: i32,
    /// Input shapes per cycle (batch, 2 batch, ...): traced cache entries.
    pub shapes: i32,
    /// `split` (the multi-output op) or two slices.
    pub split: bool,
    pub eval_outside: bool,
    pub compile: bool,
}

impl Default for Config {
    /// The report's sizes: 24 blocks of 512x512 f32 = 24 MiB of weights.
    fn default() -> Self {
        Config {
            cycles: 10,
            blocks: 24,
            dim: 512,
            batch: 8,
            shapes: 1,
            split: true,
            eval_outside: true,
            compile: true,
        }
    }
}

pub const USAGE: &str =
    "usage: leak-scenario [--cycles N] [--blocks N] [--dim N] [--batch N] [--shapes N] [--slices] [--no-eval-outside] [--no-compile]";

impl Config {
    pub fn parse(args: &[String]) -> std::result::Result<Config, String> {
        let mut c = Config::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = |name: &str| -> std::result::Result<i64, String> {
                it.next()
                    .and_then(|v| v.parse().ok())
                    .filter(|v| *v > 0)
                    .ok_or(format!("{name} needs a positive number"))
            };
            match a.as_str() {
                "--cycles" => c.cycles = value(a)? as usize,
                "--blocks" => c.blocks = value(a)? as usize,
                "--dim" => c.dim = value(a)? as i32,
                "--batch" => c.batch = value(a)? as i32,
                "--shapes" => c.shapes = value(a)? as i32,
                "--slices" => c.split = false,
                "--no-eval-outside" => c.eval_outside = false,
                "--no-compile" => c.compile = false,
                _ => return Err(USAGE.to_string()),
            }
        }
        if c.dim % 2 != 0 {
            return Err("--dim must be even".into());
        }
        Ok(c)
    }
}

/// What one cycle left behind, and a digest of its output bits.
#[derive(Clone, Debug, PartialEq)]
pub struct Cycle {
    pub retained_bytes: i64,
    pub digest: u64,
}

/// The forward pass of the report: per block `x @ w`, halves swapped.
fn forward(weights: &[Array], x: &Array, split: bool) -> Result<Array> {
    let mut x = x.clone();
    for w in weights {
        let h = mlx::matmul(&x, w)?;
        let (rows, cols) = (h.shape()[0], h.shape()[1]);
        let (a, b) = if split {
            let mut parts = mlx::split(&h, 2, -1)?;
            let b = parts.pop().unwrap();
            (parts.pop().unwrap(), b)
        } else {
            (
                mlx::slice(&h, &[0, 0], &[rows, cols / 2], &[1, 1])?,
                mlx::slice(&h, &[0, cols / 2], &[rows, cols], &[1, 1])?,
            )
        };
        x = mlx::concatenate(&[b, a], -1)?;
    }
    Ok(x)
}

/// FNV-1a over the f32 bytes, as the C++ probe computes it.
pub fn digest(a: &Array) -> Result<u64> {
    let mut h: u64 = 1469598103934665603;
    for v in a.to_vec_f32()? {
        for byte in v.to_ne_bytes() {
            h = (h ^ byte as u64).wrapping_mul(1099511628211);
        }
    }
    Ok(h)
}

/// Runs the scenario, calling `on_cycle` after each cycle.
pub fn run(cfg: &Config, mut on_cycle: impl FnMut(usize, &Cycle)) -> Result<Vec<Cycle>> {
    let inputs = (0..cfg.shapes)
        .map(|i| {
            mlx::random::normal(
                &[cfg.batch * (i + 1), cfg.dim],
                Dtype::F32,
                &mlx::random::key(0),
            )
        })
        .collect::<Result<Vec<_>>>()?;
    mlx::eval(&inputs)?;
    let mut cycles = Vec::new();
    for cycle in 0..cfg.cycles {
        mlx::synchronize()?;
        let base = mlx::memory::active() as i64;
        let mut d: u64 = 0;
        {
            let weights = (0..cfg.blocks)
                .map(|i| {
                    mlx::random::normal(
                        &[cfg.dim, cfg.dim],
                        Dtype::F32,
                        &mlx::random::key(1 + i as u64),
                    )
                })
                .collect::<Result<Vec<_>>>()?;
            if cfg.eval_outside {
                mlx::eval(&weights)?;
            }
            let split = cfg.split;
            // The weights are captured by value, as a Python closure captures them.
            let compiled = cfg.compile.then(|| {
                let captured = weights.clone();
                mlx::compile(move |ins: &[Array]| Ok(vec![forward(&captured, &ins[0], split)?]))
            });
            for x in &inputs {
                let out = match &compiled {
                    Some(c) => c.call(std::slice::from_ref(x))?.remove(0),
                    None => forward(&weights, x, split)?,
                };
                out.eval()?;
                d = d.wrapping_mul(31).wrapping_add(digest(&out)?);
            }
            // `compiled`, the closure and `weights` all drop here.
        }
        mlx::synchronize()?;
        let c = Cycle {
            retained_bytes: mlx::memory::active() as i64 - base,
            digest: d,
        };
        on_cycle(cycle, &c);
        cycles.push(c);
    }
    Ok(cycles)
}
