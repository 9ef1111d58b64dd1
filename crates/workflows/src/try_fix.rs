//! `cargo xtask try`: evaluate a candidate fix against the same evidence the
//! series must pass, without making it part of the series.

use mlx_harness::cpp_probe::{cpp_probe, run_probe};
use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::config::options;
use std::path::PathBuf;
use std::process::Command;

/// `cargo xtask try`: upstream plus a candidate fix, measured.
#[derive(clap::Args, Debug)]
pub struct TryArgs {
    /// The experiment's name (its build is experiment-<name>).
    #[arg(value_parser = name)]
    pub name: String,
    /// The candidate's patches, applied in this order.
    #[arg(required = true)]
    pub patches: Vec<PathBuf>,
}

fn name(n: &str) -> Result<String> {
    match n.contains('/') || n.is_empty() {
        true => Err(anyhow!("`{n}` is not a name: no slash")),
        false => Ok(n.to_string()),
    }
}

pub fn run(a: TryArgs) -> Result<()> {
    let name = &a.name;
    let patches: Vec<PathBuf> = a
        .patches
        .iter()
        .map(|p| std::fs::canonicalize(p).with_context(|| format!("{}", p.display())))
        .collect::<Result<_>>()?;
    mlx_harness::deps::install()?;
    let mut opts = options()?;
    opts.tests = true;
    let mlx = mlx_patched::build_experiment(name, &patches, &opts)?;
    println!(
        "candidate `{name}`: the control (upstream + the series' tests/ changes) + {}, in {}{}",
        patches
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" "),
        mlx.prefix().display(),
        mlx.built_on()
            .as_ref()
            .map(|b| format!(" (compiled on the {b} build)"))
            .unwrap_or_default()
    );

    let leak = run_probe(
        "the report's scenario (C++ API)",
        Command::new(cpp_probe(&mlx, mlx_patched::probes::LEAK_SCENARIO)?).args(["--cycles", "3"]),
    )?;
    println!(
        "   => {:.2} MiB retained per cycle (pristine: 24.00, patched: 0.00)",
        leak.mib_per_cycle
    );

    println!("-- held output of an unevaluated multi-output op");
    let held = Command::new(cpp_probe(&mlx, mlx_patched::probes::HELD_OUTPUT)?).output()?;
    print!(
        "{}{}",
        String::from_utf8_lossy(&held.stdout),
        String::from_utf8_lossy(&held.stderr)
    );
    println!("   => {}", held.status);

    println!("-- MLX's own suite");
    let exclude = mlx_patched::mlx_tests_filter();
    let suite = Command::new(mlx.mlx_tests())
        .args(["--no-colors", &exclude])
        .output()?;
    let text = String::from_utf8_lossy(&suite.stdout);
    for line in text.lines().filter(|l| {
        l.starts_with("TEST CASE:")
            || l.starts_with("[doctest] test cases")
            || l.contains("Status:")
    }) {
        println!("   {line}");
    }
    print!(
        "{}",
        String::from_utf8_lossy(&suite.stderr)
            .lines()
            .rev()
            .take(3)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .map(|l| format!("   {l}\n"))
            .collect::<String>()
    );
    println!("   => {}", suite.status);

    // A candidate is only as good as the evidence the series must pass.
    let mut failed = Vec::new();
    if leak.mib_per_cycle != 0.0 {
        failed.push(format!(
            "the report's scenario retains {:.2} MiB per cycle",
            leak.mib_per_cycle
        ));
    }
    if !held.status.success() {
        failed.push(format!("held_output: {}", held.status));
    }
    if !suite.status.success() {
        failed.push(format!("MLX's own suite: {}", suite.status));
    }
    if failed.is_empty() {
        println!("candidate `{name}`: no leak, the held output survives, MLX's suite passes");
        Ok(())
    } else {
        Err(anyhow!("candidate `{name}` fails: {}", failed.join("; ")))
    }
}
