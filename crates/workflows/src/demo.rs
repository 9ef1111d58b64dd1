//! The main job: the leak report's scenario on the pristine control and on
//! the patched variant, through the Rust API and through a plain C++ program.

use mlx_harness::deps;
use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::process::cargo;
use mlx_harness::config::options;
use mlx_harness::cpp_probe::{cpp_probe, run_probe};
use mlx_patched::{Env, Variant};
use std::process::Command;

/// The leak report's scenario on pristine and on patched, through the Rust
/// API and a plain C++ program.
#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Build/compile/run/drop cycles per variant.
    #[arg(long, default_value_t = 10)]
    pub cycles: u32,
}

pub fn run(a: DemoArgs) -> Result<()> {
    let cycles = a.cycles.to_string();
    deps::install()?;
    // The libraries only: MLX's own tests are built by `cargo xtask test`.
    let started = std::time::Instant::now();
    let variants = mlx_patched::build_all(&[Variant::PRISTINE, Variant::PATCHED], &options()?)?;
    if variants.iter().any(|v| !v.cached()) {
        eprintln!(
            "both variants built in {}",
            mlx_patched::progress::elapsed(started.elapsed())
        );
    }
    eprintln!(
        "building the probes (the Rust API through cargo, the C++ program with {})",
        Env::process().cxx_or_default().to_string_lossy()
    );

    println!(
        "\nThe report's scenario: 24 blocks of 512x512 f32 weights (24.0 MiB), evaluated outside the\n\
         compiled function, which splits each block's output; {cycles} build/run/drop cycles per run.\n"
    );
    let mut rows = Vec::new();
    for mlx in &variants {
        let exe = cpp_probe(mlx, mlx_patched::probes::LEAK_SCENARIO)?;
        let cpp = run_probe(
            &format!("C++ API, {} ({})", mlx.name(), mlx.prefix().display()),
            Command::new(&exe).args(["--cycles", &cycles]),
        )?;
        let mut rust_cmd = cargo();
        rust_cmd.args([
            "run",
            "--quiet",
            "--package",
            "mlx-probes",
            "--bin",
            "leak-scenario",
        ]);
        if let Some(feature) = mlx_patched::Variant::parse(mlx.name())?.feature() {
            rust_cmd.args(["--features", feature]);
        }
        rust_cmd.args(["--", "--cycles", &cycles]);
        let rust = run_probe(&format!("Rust API, {}", mlx.name()), &mut rust_cmd)?;
        rows.push((mlx.name().to_string(), cpp, rust));
    }
    println!(
        "\n{:<10} {:>22} {:>22}   output digest",
        "variant", "C++ API retained", "Rust API retained"
    );
    for (variant, cpp, rust) in &rows {
        println!(
            "{:<10} {:>13.2} MiB/cycle {:>13.2} MiB/cycle   {}",
            variant, cpp.mib_per_cycle, rust.mib_per_cycle, cpp.digest
        );
    }
    let same = rows
        .iter()
        .all(|(_, c, r)| c.digest == rows[0].1.digest && r.digest == rows[0].1.digest);
    println!(
        "outputs bit-identical across variants and APIs: {}",
        if same { "yes" } else { "NO" }
    );
    if !same {
        return Err(anyhow!("the variants computed different outputs"));
    }
    // Each variant retains what its verdict says, through both APIs.
    let expectations = mlx_harness::config::expectations();
    let mut outside = Vec::new();
    for (variant, cpp, rust) in &rows {
        let verdict = expectations
            .verdict_of(variant)
            .with_context(|| format!("no verdict for {variant}"))?;
        let bound = mlx_expectations::Cell::REPORT.bound(verdict);
        for (api, s) in [("C++", cpp), ("Rust", rust)] {
            let bytes = (s.mib_per_cycle * (1u64 << 20) as f64).round() as i64;
            if !bound.admits(bytes) {
                outside.push(format!(
                    "{variant} ({api} API): {:.2} MiB per cycle, expected {bound}",
                    s.mib_per_cycle
                ));
            }
        }
    }
    if !outside.is_empty() {
        return Err(anyhow!(
            "retained memory outside its bound: {}",
            outside.join("; ")
        ));
    }
    Ok(())
}
