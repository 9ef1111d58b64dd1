//! Where things are: the workspace, its target directory and the last
//! run's report.

use crate::error::{Context, Result};
use mlx_patched::Env;
use std::path::PathBuf;

/// The workspace's root folder.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// Cargo's target directory, where every build of the fork lives.
pub fn target_dir() -> Result<PathBuf> {
    if let Some(dir) = Env::process().cargo_target_dir() {
        return Ok(workspace_root().join(dir));
    }
    let out = std::process::Command::new(Env::process().cargo())
        .current_dir(workspace_root())
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .context("cannot run cargo metadata")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let key = "\"target_directory\":\"";
    let start = text
        .find(key)
        .context("cargo metadata printed no target_directory")?
        + key.len();
    let end = start
        + text[start..]
            .find('"')
            .context("malformed cargo metadata")?;
    Ok(PathBuf::from(&text[start..end]))
}

/// The report of the last `cargo xtask test`: its table
/// (`mlx_expectations::report`), the fuzz slice's results, the slow
/// checks' tallies, and [`MEASURED_FOR`].
pub fn report_dir() -> Result<PathBuf> {
    Ok(target_dir()?.join("suite-report"))
}

/// In the report directory: the tree and series the figures belong to,
/// written only when every check before `upstream_pr` passed.
pub const MEASURED_FOR: &str = "measured-for";
