//! The findings kept in the repository (`tests/fuzz-findings/NNN-<name>.json`):
//! each program that showed a bug, which patch of the series fixes it, and
//! on which variants it must show. The suite replays them through the
//! worker (`tests/fuzz.rs`) and, where Python can express them, as Python
//! scripts on each variant's bindings (`cargo xtask python-check`).

use crate::ir::Program;
use crate::oracle::Kind;
use std::path::{Path, PathBuf};

pub struct Kept {
    pub file: PathBuf,
    pub name: String,
    pub kind: Kind,
    /// The patch of the series that fixes it; empty while it is open (then
    /// it must show on every variant, so a fix, here or upstream, is noticed).
    pub fixed_by: String,
    pub program: Program,
}

impl Kept {
    /// Whether the finding must show on a variant built with the fix series
    /// `series` (none on the control). A leak is the report's leak, the only
    /// one the fuzzer has found: it must show exactly where the report's
    /// leak must (`report_leak_fixed` is the expectations' verdict, which
    /// knows when upstream fixed it too).
    pub fn must_show(&self, series: &[String], report_leak_fixed: bool) -> bool {
        let has_fix = !self.fixed_by.is_empty() && series.contains(&self.fixed_by);
        match self.kind {
            Kind::Leak => !(has_fix || report_leak_fixed),
            _ => !has_fix,
        }
    }
}

/// Every `*.json` of `dir`, in name order; a malformed or invalid one is an
/// error naming the file.
pub fn load_dir(dir: &Path) -> Result<Vec<Kept>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files.into_iter().map(|f| load(&f)).collect()
}

fn load(f: &Path) -> Result<Kept, String> {
    let at = |e: String| format!("{}: {e}", f.display());
    let text = std::fs::read_to_string(f).map_err(|e| at(e.to_string()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| at(e.to_string()))?;
    let kind = Kind::ALL
        .into_iter()
        .find(|k| v["kind"] == k.name())
        .ok_or_else(|| at(format!("unknown kind {}", v["kind"])))?;
    let program: Program =
        serde_json::from_value(v["program"].clone()).map_err(|e| at(e.to_string()))?;
    crate::check(&program).map_err(|e| at(format!("invalid program: {e}")))?;
    Ok(Kept {
        file: f.to_path_buf(),
        name: v["name"].as_str().unwrap_or_default().to_string(),
        kind,
        fixed_by: v["fixed_by"].as_str().unwrap_or_default().to_string(),
        program,
    })
}
