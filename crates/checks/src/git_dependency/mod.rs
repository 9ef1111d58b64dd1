//! The fork from a git URL, as a team pulls it:
//!
//! ```toml
//! [patch.crates-io]
//! mlx-sys = { git = "<url>", rev = "<commit>" }
//! ```
//!
//! `tests/mlx-sys-git` (mlx-rs 0.33, and a second crate that depends on the
//! published `mlx-sys`) is copied into the target directory with its
//! `[patch]` line pointing at this checkout through a `file://` URL, and
//! built offline. Cargo checks the fork out under its own home, as it
//! does any git dependency; the check requires that
//!
//! - the build succeeds, offline, and reuses this checkout's build of MLX
//!   (the patched variant's stamp and log are untouched);
//! - the report's scenario through mlx-rs retains 0 bytes per cycle;
//! - the second crate sees the fork's mlx-sys (its `DEP_MLX_VARIANT`), and
//!   computes through it;
//! - nothing is written into Cargo's checkout (`git status` shows only
//!   Cargo's own `.cargo-ok`, ignored files included);
//! - a second `cargo build` compiles nothing.
//!
//! The commit is `HEAD` when the working tree is clean (CI's fresh clone).
//! Uncommitted work is not in git: then the working tree, untracked files
//! included, is committed on top of `HEAD` through a scratch index, and the
//! ref [`SNAPSHOT_REF`] keeps that commit fetchable (Cargo fetches only
//! commits a ref reaches from a `file://` URL). That writes the commit's
//! objects and the ref into this repository's `.git`, and nothing else.
//!
//! Runs on the default base only: no other base has an mlx-c.

pub mod judge;

use crate::mlx_rs::project::{fetch_once, prefix_of, without_network};
use judge::{Evidence, FileState, GitSource, CARGO_MARK};
use mlx_expectations::record::parse_records;
use mlx_expectations::report::Row;
use mlx_expectations::Cell;
use mlx_harness::check::Check;
use mlx_harness::error::{bail, Context, Result};
use mlx_harness::paths::{target_dir, workspace_root};
use mlx_harness::process::{cargo, Ran};
use mlx_harness::tally::Tally;
use mlx_patched::{other_vars, vars, CommandVars, Expectations, Variant};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The project, relative to the workspace.
const PROJECT: &str = "tests/mlx-sys-git";
/// Its own packages: every other package of its lock without a source is
/// the fork's, reached through the `[patch]` line.
const OWN_PACKAGES: &[&str] = &["mlx-sys-git", "mlx-sys-git-dependent"];
/// The `[patch]` entry of the committed manifest.
const PATH_PATCH: &str = "mlx-sys = { path = \"../../crates/mlx-sys\" }";
/// The ref that keeps a snapshot of uncommitted work fetchable.
pub const SNAPSHOT_REF: &str = "refs/mlx-fork/git-dependency-check";
/// What Cargo itself writes into a checkout: the mark of a finished one.

/// The committed manifest with its `[patch]` path made the git form.
pub fn git_manifest(committed: &str, src: &GitSource) -> Result<String> {
    if committed.matches(PATH_PATCH).count() != 1 {
        bail!("{PROJECT}/Cargo.toml must hold `{PATH_PATCH}` once");
    }
    Ok(committed.replace(
        PATH_PATCH,
        &format!("mlx-sys = {{ git = {:?}, rev = {:?} }}", src.url, src.rev),
    ))
}

/// The committed lock file with the fork's packages (those without a
/// source, but the project's own) from `src`, as Cargo writes a git
/// source: `git+<url>?rev=<rev>#<commit>`. The build runs `--locked`, so a
/// lock that is not exactly Cargo's fails it.
pub fn git_lock(committed: &str, src: &GitSource, own: &[&str]) -> Result<String> {
    let source = format!("source = \"git+{}?rev={}#{}\"", src.url, src.rev, src.rev);
    let mut moved = 0;
    let blocks: Vec<String> = committed
        .split("\n[[package]]\n")
        .enumerate()
        .map(|(i, block)| {
            let name = block
                .lines()
                .find_map(|l| l.strip_prefix("name = \""))
                .and_then(|n| n.strip_suffix('"'));
            let fork = i > 0
                && name.is_some_and(|n| !own.contains(&n))
                && !block.lines().any(|l| l.starts_with("source = "));
            if !fork {
                return block.to_string();
            }
            moved += 1;
            let mut lines: Vec<String> = block.lines().map(String::from).collect();
            let at = lines
                .iter()
                .position(|l| l.starts_with("version = "))
                .map_or(lines.len(), |p| p + 1);
            lines.insert(at, source.clone());
            lines.join("\n") + if block.ends_with('\n') { "\n" } else { "" }
        })
        .collect();
    if moved == 0 {
        bail!("{PROJECT}/Cargo.lock lists no package of the fork's");
    }
    Ok(blocks.join("\n[[package]]\n"))
}

/// What `git status --porcelain --ignored --untracked-files=all` of Cargo's
/// checkout shows beyond Cargo's own mark: what the build wrote there.

/// From `cargo build --message-format json`: how many units it reported,
/// and those it compiled (not `fresh`).
pub fn compiled_units(json: &str) -> (usize, Vec<String>) {
    let mut seen = 0;
    let mut compiled = Vec::new();
    for line in json.lines() {
        let Ok(m) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if m["reason"] != "compiler-artifact" {
            continue;
        }
        seen += 1;
        if m["fresh"] != true {
            compiled.push(m["package_id"].as_str().unwrap_or("?").to_string());
        }
    }
    (seen, compiled)
}

fn file_state(path: &Path) -> FileState {
    let bytes = std::fs::read(path).ok()?;
    let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok()?;
    Some((bytes, mtime))
}

/// This checkout as a git source: `HEAD`, or a snapshot of the working
/// tree when it has uncommitted work (see the module's comment).
pub fn source_of(root: &Path, scratch: &Path) -> Result<(GitSource, bool)> {
    let git = |args: &[&str]| -> Result<String> { Ok(mlx_patched::git::git(root, args)?) };
    let url = format!("file://{}", root.display());
    let head = git(&["rev-parse", "HEAD"])?;
    if git(&["status", "--porcelain"])?.is_empty() {
        return Ok((GitSource { url, rev: head }, false));
    }
    // A scratch index: the checkout's own stays as it is.
    let index = scratch.join("index");
    let _ = std::fs::remove_file(&index);
    let indexed = |args: &[&str]| -> Result<String> {
        Ok(mlx_patched::git::run(
            mlx_patched::git::command(root)
                .var(other_vars::GIT_INDEX_FILE, &index)
                .args(args),
        )?)
    };
    indexed(&["read-tree", "HEAD"])?;
    indexed(&["add", "-A"])?;
    let tree = indexed(&["write-tree"])?;
    // The same work snapshots to the same commit: Cargo's checkout and the
    // project's build are reused.
    let kept = git(&["rev-parse", "--verify", "-q", SNAPSHOT_REF]).ok();
    let reuse = kept.filter(|c| {
        git(&["rev-parse", &format!("{c}^{{tree}}")])
            .ok()
            .as_deref()
            == Some(tree.as_str())
            && git(&["rev-parse", &format!("{c}^")]).ok().as_deref() == Some(head.as_str())
    });
    let rev = match reuse {
        Some(c) => c,
        None => {
            let c = git(&[
                "commit-tree",
                &tree,
                "-p",
                &head,
                "-m",
                "the working tree, for the git-dependency check",
            ])?;
            git(&["update-ref", SNAPSHOT_REF, &c])?;
            c
        }
    };
    Ok((GitSource { url, rev }, true))
}

/// The project's copy in `dir`, in the git form: its manifest and lock
/// rewritten, its sources and the scenario's (`tests/mlx-rs/src/main.rs`)
/// copied at the same relative places.
pub fn write_project(dir: &Path, src: &GitSource) -> Result<PathBuf> {
    let from = workspace_root().join(PROJECT);
    let to = dir.join(PROJECT);
    let _ = std::fs::remove_dir_all(dir.join("tests"));
    for sub in ["src", "dependent"] {
        mlx_patched::copy_tree(&from.join(sub), &to.join(sub))?;
    }
    let scenario = "tests/mlx-rs/src/main.rs";
    std::fs::create_dir_all(dir.join("tests/mlx-rs/src"))?;
    std::fs::copy(workspace_root().join(scenario), dir.join(scenario))
        .with_context(|| format!("cannot copy {scenario}"))?;
    let read =
        |f: &str| std::fs::read_to_string(from.join(f)).with_context(|| format!("{PROJECT}/{f}"));
    std::fs::write(
        to.join("Cargo.toml"),
        git_manifest(&read("Cargo.toml")?, src)?,
    )?;
    std::fs::write(
        to.join("Cargo.lock"),
        git_lock(&read("Cargo.lock")?, src, OWN_PACKAGES)?,
    )?;
    Ok(to.join("Cargo.toml"))
}

/// Cargo's checkout of the fork: the folder above the mlx-sys package it
/// resolved that holds Cargo's mark.
pub fn checkout_of(manifest: &Path) -> Result<PathBuf> {
    let out = cargo()
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .arg("--manifest-path")
        .arg(manifest)
        .output()
        .context("cannot run cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata of {}: {}",
            manifest.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let sys = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "mlx-sys")
        .and_then(|p| p["manifest_path"].as_str())
        .context("cargo metadata lists no mlx-sys")?;
    Path::new(sys)
        .ancestors()
        .find(|a| a.join(CARGO_MARK).is_file())
        .map(Path::to_path_buf)
        .with_context(|| format!("{sys} is in no checkout of Cargo's"))
}

fn ran(cmd: &mut Command) -> Result<Ran> {
    Ok(Ran::from(
        &cmd.output()
            .with_context(|| format!("cannot run {cmd:?}"))?,
    ))
}

pub fn collect() -> Result<Evidence> {
    let opts = mlx_harness::config::options()?;
    if opts.base.mlxc.is_none() {
        bail!(
            "MLX {} has no mlx-c: the git-dependency check runs on the default base",
            opts.base.version
        );
    }
    let mlx = prefix_of(Variant::PATCHED)?;
    let dir = target_dir()?.join("mlx-sys-git");
    std::fs::create_dir_all(&dir)?;
    let (source, snapshot) = source_of(&workspace_root(), &dir)?;
    let manifest = write_project(&dir, &source)?;
    eprintln!(
        "building {PROJECT} with mlx-sys from {} at {}{}",
        source.url,
        source.rev,
        if snapshot { " (uncommitted work)" } else { "" }
    );
    // The registry's crates through the committed lock, and mlx-c's carrier
    // for the drop-in's nested `cargo metadata`: the only downloads.
    fetch_once(&workspace_root().join(PROJECT).join("Cargo.toml"))?;
    fetch_once(&workspace_root().join("mlx-patched/sources/mlx-c/Cargo.toml"))?;
    // The git source: a local fetch, which `--offline` would refuse; any
    // download would fail at the refusing proxy.
    mlx_harness::process::run(
        cargo()
            .args(["fetch", "--locked", "--quiet", "--manifest-path"])
            .arg(&manifest)
            .var(other_vars::CARGO_HTTP_PROXY, "http://127.0.0.1:9")
            .var(other_vars::CARGO_NET_RETRY, "0"),
    )?;
    // The mlx-rs check's target for patched: the registry's crates (bindgen
    // and clang-sys among them) are compiled there already, and what depends
    // on the git source is compiled apart from the path source's units.
    let target = target_dir()?.join("mlx-rs").join(Variant::PATCHED.name);
    let project = |args: &[&str]| {
        let mut c = cargo();
        c.args(args)
            .arg("--locked")
            .arg("--manifest-path")
            .arg(&manifest)
            .var(vars::CARGO_TARGET_DIR, &target)
            // This checkout's build of MLX and of mlx-c, as in the other checks.
            .var(vars::MLX_PATCHED_BUILD_DIR, &opts.root)
            .unset(vars::MLX_SYS_PREFIX)
            .unset(other_vars::LD_LIBRARY_PATH)
            .unset(other_vars::RUSTFLAGS);
        without_network(&mut c);
        c
    };
    let variant = mlx
        .prefix()
        .parent()
        .context("a prefix has a parent")?
        .to_path_buf();
    let mlx_files = [variant.join("stamp"), variant.join("build.log")];
    let mlx_before: Vec<FileState> = mlx_files.iter().map(|f| file_state(f)).collect();
    let build = ran(&mut project(&["build", "--quiet"]))?;
    let mlx_after: Vec<FileState> = mlx_files.iter().map(|f| file_state(f)).collect();
    let bin = |name: &str| target.join("debug").join(name);
    // The report's cell, as the mlx-rs check runs it.
    let scenario = ran(Command::new(bin("mlx-sys-git-scenario"))
        .args(["--cycles", "10"])
        .args(Cell::REPORT.flags())
        .unset(other_vars::LD_LIBRARY_PATH))
    .unwrap_or_default();
    let (mut retained, mut digests) = (Vec::new(), Vec::new());
    for r in parse_records(&scenario.stdout)
        .iter()
        .filter(|r| r.kind == "cycle")
    {
        retained.extend(r.number("retained_bytes"));
        digests.extend(r.value("digest").map(String::from));
    }
    let dependent = ran(Command::new(bin("mlx-sys-git")).unset(other_vars::LD_LIBRARY_PATH))
        .unwrap_or_default();
    let checkout = checkout_of(&manifest)?;
    let checkout_status = ran(mlx_patched::git::command(&checkout).args([
        "status",
        "--porcelain",
        "--ignored",
        "--untracked-files=all",
    ]))?;
    let again = ran(&mut project(&["build", "--message-format", "json"]))?;
    let again_units = compiled_units(&again.stdout);
    Ok(Evidence {
        source,
        snapshot,
        build,
        retained,
        digests,
        scenario,
        dependent,
        release: opts.base.version.to_string(),
        checkout,
        checkout_status,
        again,
        again_units,
        mlx_before,
        mlx_after,
    })
}

/// The fork as a git dependency.
pub struct GitDependency;

impl Check for GitDependency {
    type Evidence = Evidence;
    fn collect(&self, _: &Expectations) -> Result<Evidence> {
        collect()
    }
    fn judge(&self, e: &Evidence, expectations: &Expectations) -> Tally {
        judge::judge(e, expectations)
    }
    fn render(&self, e: &Evidence) -> Vec<Row> {
        judge::render(e)
    }
}

/// The check as the suite runs it: on a base no mlx-c compiles against,
/// mlx-sys cannot build (the mlx-rs check claims that it refuses).
pub fn check(rows: &mut Vec<Row>) -> Result<Tally> {
    mlx_harness::check::outcome_with_mlxc(&GitDependency, "git dependency", rows)
}

#[cfg(test)]
mod tests;
