//! What every workflow needs: the workspace's paths, Cargo, the build
//! options, the run's expectations and a tally of checks.

use mlx_patched::{Env, Expectations, Options, Progress, Variant};
use std::path::PathBuf;
use std::process::Command;

/// Errors keep their cause chain, with the path or command each step
/// concerns as context; `{:#}` prints the whole chain.
pub use anyhow::{anyhow, bail, Context, Error, Result};

/// Cargo as the developer invoked it (`$CARGO`), in the workspace root.
pub fn cargo() -> Command {
    let mut cmd = Command::new(Env::process().cargo());
    cmd.current_dir(workspace_root());
    cmd
}

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

pub fn target_dir() -> Result<PathBuf> {
    if let Some(dir) = Env::process().cargo_target_dir() {
        return Ok(workspace_root().join(dir));
    }
    let out = cargo()
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

/// Options for builds run by xtask: progress on stderr, library only.
pub fn options() -> Result<Options> {
    let mut opts = Options::from_env(Env::process(), &target_dir()?, false)?;
    opts.progress = Progress::for_stderr();
    Ok(opts)
}

/// `opts` moved to `base`: the same settings, with that base's builds
/// (`target/mlx/v<release>/`).
pub fn options_on(opts: &Options, base: &'static mlx_patched::pin::Base) -> Result<Options> {
    let mut moved = opts.clone();
    moved.root = opts
        .root
        .parent()
        .context("the build directory's parent")?
        .join(base.dir_name());
    moved.base = base;
    Ok(moved)
}

/// What each variant must show in this run (`MLX_FORK_UPSTREAM_FIXED`
/// included), as the suite's build script reads it.
pub fn expectations() -> Expectations {
    Expectations::from_env(&Env::process())
}

/// The variants this run builds and checks.
pub fn variants_to_build() -> Vec<Variant> {
    expectations().variants()
}

/// Checks counted as they are made: each failure is printed when it happens.
pub struct Tally {
    pub passed: u32,
    pub failures: Vec<String>,
}

impl Default for Tally {
    fn default() -> Self {
        Self::new()
    }
}

impl Tally {
    pub fn new() -> Self {
        Tally {
            passed: 0,
            failures: Vec::new(),
        }
    }

    pub fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        self.claim(ok, || {
            let what = what();
            println!("FAILED: {what}");
            what
        });
    }

    /// As [`Tally::check`], printing nothing: for a pure judge.
    pub fn claim(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if ok {
            self.passed += 1;
        } else {
            self.failures.push(what());
        }
    }
}

/// A finished process as evidence for a judge: its status and its output
/// as text.
#[derive(Clone, Debug, Default)]
pub struct Ran {
    pub success: bool,
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

impl From<&std::process::Output> for Ran {
    fn from(o: &std::process::Output) -> Ran {
        Ran {
            success: o.status.success(),
            status: o.status.to_string(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(anyhow!("{cmd:?} failed ({status})"))
    }
}

/// A variant by name, for command lines.
pub fn variant(name: &str) -> Result<Variant> {
    Ok(Variant::parse(name)?)
}

/// A base by release, for command lines (`0.32.4`).
pub fn base(name: &str) -> Result<&'static mlx_patched::pin::Base> {
    Ok(mlx_patched::pin::Base::parse(name)?)
}

/// `--base`'s help, from the table of bases.
pub fn base_help() -> String {
    let names: Vec<String> = mlx_patched::pin::BASES
        .iter()
        .map(|b| {
            if b.is_default() {
                format!("{} (the default)", b.version)
            } else {
                b.version.to_string()
            }
        })
        .collect();
    format!(
        "The upstream release to build on: {} (sets {} for every step)",
        names.join(" or "),
        mlx_patched::vars::MLX_FORK_BASE.name
    )
}

/// Makes `base` this process's base, and so its children's: `--base` sets
/// `MLX_FORK_BASE`, the one place the base is read from. Called once, first.
pub fn select_base(base: &mlx_patched::pin::Base) {
    std::env::set_var(mlx_patched::vars::MLX_FORK_BASE.name, base.version);
}

/// A sanitizer by name, for command lines.
/// A sanitizer that reports (`cargo xtask sanitize`): the coverage build
/// only counts, and is the fuzzer's ([`instrumentation`]).
pub fn sanitizer(name: &str) -> Result<mlx_patched::Sanitizer> {
    match mlx_patched::Sanitizer::parse(name)? {
        mlx_patched::Sanitizer::Coverage => Err(anyhow!(
            "the coverage build reports nothing to judge: `cargo xtask fuzz --sanitizer coverage` and `cargo xtask fuzz coverage` use it"
        )),
        s => Ok(s),
    }
}

/// Any instrumentation of the fuzzer's worker: a sanitizer or coverage.
pub fn instrumentation(name: &str) -> Result<mlx_patched::Sanitizer> {
    Ok(mlx_patched::Sanitizer::parse(name)?)
}

/// `git <args>` in `dir`, confined to it (`mlx_patched::git`).
pub fn git(dir: &std::path::Path, args: &[&str]) -> Result<String> {
    Ok(mlx_patched::git::git(dir, args)?)
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
