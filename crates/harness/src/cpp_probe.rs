//! The C++ probes (`crates/probes/cpp/`): built against a variant's prefix,
//! run, and their summary line read.

use crate::error::{anyhow, Context, Result};
use crate::paths::target_dir;
use mlx_expectations::record::parse_records;
use mlx_patched::Env;
use std::process::Command;

/// The last line of a probe run: `summary cycles N retained_mib_per_cycle X digest D`.
pub struct Summary {
    pub mib_per_cycle: f64,
    pub digest: String,
}

pub fn run_probe(label: &str, cmd: &mut Command) -> Result<Summary> {
    println!("-- {label}");
    let out = cmd
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    let records = parse_records(&String::from_utf8_lossy(&out.stdout));
    for r in records.iter().filter(|r| r.kind == "cycle") {
        let bytes = r
            .number("retained_bytes")
            .map(|b| b as f64)
            .unwrap_or(f64::NAN);
        println!(
            "   cycle {:>2}: {:>6.2} MiB retained",
            r.value("cycle").unwrap_or("?"),
            bytes / (1024.0 * 1024.0)
        );
    }
    if !out.status.success() {
        return Err(anyhow!(
            "{label} failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // `summary cycles N retained_mib_per_cycle X digest D`
    let summary = records
        .iter()
        .find(|r| r.kind == "summary")
        .with_context(|| format!("{label} printed no summary"))?;
    let mib = summary
        .value("retained_mib_per_cycle")
        .and_then(|m| m.parse().ok())
        .with_context(|| format!("bad summary: {summary:?}"))?;
    Ok(Summary {
        mib_per_cycle: mib,
        digest: summary.value("digest").unwrap_or_default().to_string(),
    })
}

/// A C++ probe of `crates/probes/cpp/` linked against a build's prefix.
pub fn cpp_probe(mlx: &mlx_patched::Artifacts, probe: &str) -> Result<std::path::PathBuf> {
    cpp_probe_in(mlx, probe, &target_dir()?.join("probes"))
}

/// [`cpp_probe`] built into `dir` (a rebase keeps its target's probes apart
/// from the pin's, whose variants have the same names).
pub fn cpp_probe_in(
    mlx: &mlx_patched::Artifacts,
    probe: &str,
    dir: &std::path::Path,
) -> Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir)?;
    let exe = dir.join(format!("{probe}-{}", mlx.name()));
    mlx_patched::compile_program(
        mlx,
        &mlx_patched::probes::source(probe),
        &exe,
        &Env::process(),
    )?;
    Ok(exe)
}
