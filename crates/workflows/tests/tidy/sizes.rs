//! The harness stays a house a newcomer can walk: no module of its three
//! crates over [`MAX_MODULE_LINES`], and no crate holding more than
//! [`MAX_CRATE_SHARE`] of the project's Rust lines.

use crate::{report, tracked};
use std::collections::BTreeMap;

/// Lines a module of the harness may have, its test module apart.
const MAX_MODULE_LINES: usize = 600;
/// The share of the project's Rust lines one crate may hold.
const MAX_CRATE_SHARE: f64 = 0.30;
/// The harness's crates: the plumbing, the checks and the commands.
const HARNESS: &[&str] = &["crates/harness/", "crates/checks/", "crates/workflows/"];

/// Modules of the harness over the limit.
fn long_modules(files: &[(String, String)]) -> Vec<String> {
    files
        .iter()
        .filter(|(p, _)| p.ends_with(".rs") && HARNESS.iter().any(|h| p.starts_with(h)))
        .filter(|(_, t)| t.lines().count() > MAX_MODULE_LINES)
        .map(|(p, t)| format!("{p}: {} lines (at most {MAX_MODULE_LINES}): split it by what it holds", t.lines().count()))
        .collect()
}

/// The crate a Rust file belongs to: the folder that holds its `Cargo.toml`
/// (the root package for `src/`, `tests/`, `benches/` and `build.rs`).
fn crate_of(path: &str, manifests: &[&str]) -> String {
    manifests
        .iter()
        .map(|m| m.trim_end_matches("Cargo.toml"))
        .filter(|dir| path.starts_with(dir))
        .max_by_key(|dir| dir.len())
        .unwrap_or("")
        .to_string()
}

/// Crates over their share of the project's Rust lines.
fn heavy_crates(files: &[(String, String)]) -> Vec<String> {
    let manifests: Vec<&str> = files
        .iter()
        .map(|(p, _)| p.as_str())
        .filter(|p| *p == "Cargo.toml" || p.ends_with("/Cargo.toml"))
        .collect();
    let mut lines: BTreeMap<String, usize> = BTreeMap::new();
    for (p, t) in files.iter().filter(|(p, _)| p.ends_with(".rs")) {
        *lines.entry(crate_of(p, &manifests)).or_default() += t.lines().count();
    }
    let total: usize = lines.values().sum();
    lines
        .into_iter()
        .filter(|(_, n)| *n as f64 > MAX_CRATE_SHARE * total as f64)
        .map(|(c, n)| format!("{}: {n} of {total} Rust lines ({:.0}%, at most {:.0}%)", if c.is_empty() { "the root package" } else { &c }, 100.0 * n as f64 / total as f64, 100.0 * MAX_CRATE_SHARE))
        .collect()
}

#[test]
fn no_harness_module_is_too_long_and_no_crate_too_heavy() {
    let files = tracked();
    report("modules too long", long_modules(&files));
    report("crates too heavy", heavy_crates(&files));
}

#[test]
fn the_size_rules_reject_a_long_module_and_a_heavy_crate() {
    let long = "x\n".repeat(MAX_MODULE_LINES + 1);
    let short = "x\n".repeat(10);
    let files = vec![
        ("Cargo.toml".to_string(), String::new()),
        ("crates/checks/Cargo.toml".to_string(), String::new()),
        ("crates/checks/src/a.rs".to_string(), long.clone()),
        ("crates/fuzz/Cargo.toml".to_string(), String::new()),
        ("crates/fuzz/src/b.rs".to_string(), long),
        ("src/lib.rs".to_string(), short),
    ];
    assert_eq!(long_modules(&files).len(), 1, "only the harness's module");
    let heavy = heavy_crates(&files);
    assert_eq!(heavy.len(), 2, "{heavy:?}");
    assert!(heavy.iter().any(|h| h.starts_with("crates/checks/")));
}
