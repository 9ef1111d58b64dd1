//! Rules over a file's text: the summary table's format written only by
//! its module, errors that keep their cause, and no package registry's
//! host named anywhere.

use crate::{report, tracked};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;

// ---- the summary table's format ----

/// Pieces of the summary table's format (`mlx_expectations::report`), in
/// Rust outside that module: every row is written and read through `Row`.
fn report_formats(path: &str, text: &str) -> Vec<String> {
    const PIECES: &[&str] = &["bit-identical=", "\"note\\t", "rows.tsv", "fuzz-slice-"];
    if !path.ends_with(".rs")
        || path == "crates/expectations/src/report.rs"
        || path.starts_with("crates/workflows/tests/tidy/")
    {
        return vec![];
    }
    lines_with(
        path,
        text,
        PIECES,
        "is the summary table's format: use mlx_expectations::report",
    )
}

// ---- errors keep their cause ----

/// Places in the harness (workflows, checks, plumbing, xtask) where an error is flattened to text,
/// losing its cause chain: they return `anyhow` errors with context.
fn flattened_errors(path: &str, text: &str) -> Vec<String> {
    const PIECES: &[&str] = &[
        "map_err(|e| e.to_string())",
        "Result<T, String>",
        "map_err(|e| format!(",
    ];
    const HARNESS: &[&str] = &["crates/workflows/src/", "crates/checks/src/", "crates/harness/src/", "crates/xtask/src/"];
    if !HARNESS.iter().any(|h| path.starts_with(h)) {
        return vec![];
    }
    lines_with(
        path,
        text,
        PIECES,
        "drops the error's cause: use `?` with `.context(..)`",
    )
}

/// Each line of `text` holding one of `pieces`, as `path:line: piece why`.
fn lines_with(path: &str, text: &str, pieces: &[&str], why: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for piece in pieces {
            if line.contains(piece) {
                out.push(format!("{path}:{}: `{piece}` {why}", i + 1));
            }
        }
    }
    out
}

// ---- registry hosts ----

/// SHA-256 of the host names of the package registries (crates, PyPI and
/// its file host, npm, conda, RubyGems, the Go proxy).
const REGISTRY_HOST_DIGESTS: &[&str] = &[
    "789e46d79514e28093cabe2bb4a0798266f584b0e508ef269ebabb6e57859290",
    "3d01f3609be82d98eeedcd977fae947ee6da479acbfd5d19619bda2184977921",
    "eb7e11c7f9ecbcf48099060ec1c8c593134ff031f587e07be17293b2a3a0ee36",
    "a4aa2ac280bb8d1a0ce7a1be5a7bfb10292b49fe9435ad5cff19f421f3c70e41",
    "c899567ee906851741bf7f3bde17a33777859ff9f53ff54d6f0ea54cf31ad636",
    "d6d7019ca9fcbf07c769e445342515ef0c92e4f18a96adbb3bf6460f5b0ba17f",
    "9495278a74715c7e246a36404b3589f0f2f0b564defdec00b228aa07ecb515e0",
    "9ab2ad663f3d2a5e0a38190483536f53c576599778c6e6d1adb9f357122f355c",
    "0dc11026ac75c015aaa1deafff4a7a54ef6d0cf6b3c7f9b1d2c8f3502929aa9e",
    "4db460c55b85212e50a70cadcb10c5fc3c32382ed9896a3730423469d2e05619",
    "15bdb44dafa6843b1e260ba626cb18b8d49581827a759b8102812b61cc522c83",
    "51c6b9f69c48a75b146d2785c3d70d336d5fdce24868f2e22db377d736f2ef24",
    "71741fe2460a615058687c4585f665af5e825968e51a512ffb14c6f2684a397d",
    "00a7dc5a0cc388586b8665846e7d8ae94a6dd096f2aa1aa3b4aab4ac484f998a",
];

fn sha256(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The host names in `text` whose digest is listed: every dotted name, and
/// every name it ends with (a subdomain of a registry counts).
fn hosts_in(text: &str, digests: &[&str]) -> Vec<String> {
    let mut found = BTreeSet::new();
    let lower = text.to_ascii_lowercase();
    for word in lower.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '-')) {
        let labels: Vec<&str> = word.split('.').filter(|l| !l.is_empty()).collect();
        for start in 0..labels.len().saturating_sub(1) {
            let host = labels[start..].join(".");
            if digests.contains(&sha256(&host).as_str()) {
                found.insert(host);
            }
        }
    }
    found.into_iter().collect()
}

fn registry_hosts(path: &str, text: &str) -> Vec<String> {
    hosts_in(text, REGISTRY_HOST_DIGESTS)
        .into_iter()
        .map(|h| format!("{path}: names a package registry's host ({} characters); use the client (cargo, pip, apt-get) by package name", h.len()))
        .collect()
}

#[test]
fn only_the_report_module_writes_the_table_s_format() {
    let violations = tracked()
        .iter()
        .flat_map(|(p, t)| report_formats(p, t))
        .collect();
    report("the summary table's format outside its module", violations);
}

#[test]
fn the_report_rule_rejects_a_row_written_by_hand() {
    let text = "rows.push(format!(\"{s}\\tbit-identical=yes\"));\nlet f = dir.join(\"rows.tsv\");";
    assert_eq!(report_formats("crates/workflows/src/a.rs", text).len(), 2);
    assert!(report_formats("crates/expectations/src/report.rs", text).is_empty());
}

#[test]
fn workflow_errors_keep_their_cause() {
    let violations = tracked()
        .iter()
        .flat_map(|(p, t)| flattened_errors(p, t))
        .collect();
    report("errors flattened to text", violations);
}

#[test]
fn the_error_rule_rejects_a_flattened_error() {
    let text = "let t = std::fs::read(p).map_err(|e| e.to_string())?;\nlet u = f().map_err(|e| format!(\"{p}: {e}\"))?;";
    assert_eq!(flattened_errors("crates/workflows/src/a.rs", text).len(), 2);
    assert!(flattened_errors("crates/fuzz/src/a.rs", text).is_empty());
}

#[test]
fn no_file_names_a_package_registry() {
    let bad = tracked()
        .iter()
        .flat_map(|(p, t)| registry_hosts(p, t))
        .collect();
    report("registry host names", bad);
}

#[test]
fn the_registry_rule_finds_a_listed_host_and_its_subdomains() {
    let digest = sha256("example.org");
    let listed = [digest.as_str()];
    assert_eq!(
        hosts_in("see https://example.org/x", &listed),
        ["example.org"]
    );
    assert_eq!(
        hosts_in("files.Example.org/a.whl", &listed),
        ["example.org"]
    );
    assert!(hosts_in("example.com and org.example", &listed).is_empty());
}
