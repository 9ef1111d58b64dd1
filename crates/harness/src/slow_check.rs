//! The slow checks as tests. Each is a `#[test]` under `tests/` that calls
//! [`run`]: it runs only when `MLX_FORK_SLOW_CHECKS=1` (`cargo xtask test`
//! sets it), adds its rows to the run's table, leaves its tally for
//! `cargo xtask test` to count, and fails naming every failed claim.

use crate::error::{bail, Context, Result};
use crate::paths::report_dir;
use crate::tally::Tally;
use mlx_expectations::report::{self, Row};
use mlx_patched::Env;

/// Runs the check `name` as a test (see the module's documentation).
pub fn run(name: &str, check: impl FnOnce(&mut Vec<Row>) -> Result<Tally>) {
    if !Env::process().slow_checks() {
        eprintln!(
            "{name}: skipped (a slow check: `cargo xtask test` runs it; alone, set {}=1)",
            mlx_patched::vars::MLX_FORK_SLOW_CHECKS.name
        );
        return;
    }
    let mut rows = Vec::new();
    let result = crate::deps::install().and_then(|()| check(&mut rows));
    // The rows of a check that failed are evidence too.
    if let Some(file) = Env::process().report_file() {
        report::append(&file, &rows).expect("append to the run's table");
    }
    let checked = match result {
        Ok(c) => c,
        Err(e) => panic!("{name}: the check could not run: {e:#}"),
    };
    // The tally is for the run in progress: a check run alone leaves none.
    if let Some(file) = Env::process().report_file() {
        let dir = file.parent().expect("the report file is in a directory");
        write_tally(dir, name, &checked).expect("write the check's tally");
    }
    println!(
        "{name}: {} passed, {} failed",
        checked.passed,
        checked.failures.len()
    );
    assert!(
        checked.failures.is_empty(),
        "{name}: {} failed:\n{}",
        checked.failures.len(),
        checked.failures.join("\n")
    );
}

/// A check run as an xtask command (`cargo xtask python-check`, …):
/// installs what it needs, names every failed claim, and fails if one did.
pub fn command(name: &str, check: impl FnOnce(&mut Vec<Row>) -> Result<Tally>) -> Result<()> {
    crate::deps::install()?;
    let t = check(&mut Vec::new())?;
    for f in &t.failures {
        println!("FAILED: {f}");
    }
    println!("{name}: {} passed, {} failed", t.passed, t.failures.len());
    if !t.failures.is_empty() {
        bail!("{name}: {} checks failed", t.failures.len());
    }
    Ok(())
}

/// The report directory of the run in progress (the one its table is
/// in), or of the last `cargo xtask test` when a check runs alone.
pub fn run_report_dir() -> Result<std::path::PathBuf> {
    match Env::process().report_file() {
        Some(f) => Ok(f
            .parent()
            .context("the report file is in no directory")?
            .to_path_buf()),
        None => report_dir(),
    }
}

fn write_tally(dir: &std::path::Path, name: &str, t: &Tally) -> Result<()> {
    let file = report::tally(dir, name);
    std::fs::create_dir_all(file.parent().unwrap())?;
    let json = serde_json::json!({ "passed": t.passed, "failures": t.failures });
    std::fs::write(&file, json.to_string()).with_context(|| format!("{}", file.display()))
}

/// A check's tally as its test left it, if it ran under this report.
pub fn read_tally(dir: &std::path::Path, name: &str) -> Option<Tally> {
    let text = std::fs::read_to_string(report::tally(dir, name)).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some(Tally {
        passed: v["passed"].as_u64()? as u32,
        failures: v["failures"]
            .as_array()?
            .iter()
            .filter_map(|f| f.as_str().map(String::from))
            .collect(),
    })
}
