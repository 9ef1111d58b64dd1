//! The tree keeps its own rules: every file git tracks is read, and each
//! rule is a pure function over a file's path and text, shown rejecting a
//! made-up file below so that none can pass by matching nothing.
//!
//! * every environment variable the code reads, sets or removes is
//!   declared: in `crates/facts/src/variables.rs`'s tables, or set by Cargo;
//! * no package registry's host name appears anywhere (the names are kept
//!   here as SHA-256 digests, so this file names none either);
//! * no upstream file is tracked: no file outside `patches/` carries a
//!   copyright notice (ours carry none; MLX's, mlx-c's, mlx-lm's, mlx-audio's
//!   and nanobind's all do), and no tracked file has the bytes of a file of
//!   the upstream MLX tree the build uses;
//! * every generated page is what its generator writes now;
//! * no module imports one that imports it back, in any crate;
//! * variants, probes and slow checks are named through their constants
//!   or the claim registry, never as strings;
//! * the lock files outside the workspace are current;
//! * the macOS workflow calls only commands that run here too;
//! * no module of the harness is over 600 lines, no crate over 30% of the
//!   project's Rust lines.
//!
//! One module a kind of rule; each shows its rule rejecting a made-up file.

mod locks;
mod macos_workflow;
mod modules;
mod names;
mod pages;
mod sizes;
mod text;
mod upstream;

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root")
}

/// Every file git tracks, with its text (binary files are left out).
fn tracked() -> Vec<(String, String)> {
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(workspace())
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git ls-files failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let files: Vec<(String, String)> = out
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .filter_map(|p| {
            let bytes = std::fs::read(workspace().join(&p)).ok()?;
            let text = String::from_utf8(bytes).ok()?;
            Some((p, text))
        })
        .collect();
    assert!(
        files.len() > 100,
        "git tracks only {} text files here",
        files.len()
    );
    files
}

/// Fails naming every violation of a rule.
fn report(what: &str, violations: Vec<String>) {
    assert!(violations.is_empty(), "{what}:\n{}", violations.join("\n"));
}

