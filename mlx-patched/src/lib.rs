//! Builds MLX from upstream's pinned tree, as variants installed side by side
//! (see [`VARIANTS`]):
//!
//! * `pristine`: the control for every leak check. Its library and headers
//!   are upstream's tree untouched; only the series' changes under `tests/`
//!   are applied, so that MLX's own suite runs the new regression tests
//!   against the unpatched library and shows them failing there.
//! * `patched`: upstream with `patches/*.patch` applied in file-name order.
//! * `suggested`: the control plus the fix the leak report suggests, which
//!   the suite must reject; built on the control's build.
//!
//! Upstream's tree is recovered from the published carrier crate by
//! reversing the carrier's own patches (`<root>/upstream/<tree id>`), and
//! checked against the pinned tree id. Each variant lives in
//! `<root>/<variant>/`: `src/` its tree, `build/` the CMake build, `prefix/`
//! the install (`include/`, `lib/`, `lib/cmake/MLX`), `mlx-tests` MLX's own
//! suite against that install. A stamp holds the cache key (tree id, patch
//! bytes, CMake arguments, compilers, system dependencies); when it matches,
//! nothing is configured or built. Used from build scripts (with
//! [`Env::build_script`]) and from `cargo xtask`.

mod archive;
mod build;
mod env;
mod expectations;
mod fingerprint;
pub mod git;
pub mod jobs;
pub mod patch;
pub mod pin;
pub mod probes;
pub mod progress;
mod python;
mod source;
pub mod system;
pub mod upstream_fixes;

pub use archive::StaticLink;
pub use build::plan;
pub use build::{
    build, build_all, build_experiment, build_from, build_inputs, print_rpath_of_dependency,
    Artifacts, Backend, BuildPlan, Host, Layout, LinkKind, Options, Sanitizer,
};
pub use env::{
    watched,
    other_vars, variables_markdown, vars, CommandVars, Env, Variable, OTHER_VARIABLES, VARIABLES,
    VARIABLES_PAGE,
};
pub use expectations::Expectations;
pub use fingerprint::Fingerprint;
pub use progress::Progress;
pub use python::{build_bindings, Bindings, PythonTarget};
pub use source::{
    carrier_dir, carrier_patches, from_override, mlxc_source, published_package, recover_upstream,
    sources_manifest, tree_id, verify_tree, version_of, CarrierTree, Origin, Upstream,
};
pub use system::{check_system, DEBIAN_PACKAGES};
pub use mlx_facts::variants::{
    mlx_tests_filter, mlx_tests_filter_also, Expect, Variant, CONTROL_FEATURE, MLX_TESTS_EXCLUDED,
    PRISTINE_PATHS, VARIANTS,
};

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Cargo target directory that holds a build script's `OUT_DIR`.
pub fn target_dir_of_out_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .find(|a| a.join("CACHEDIR.TAG").is_file())
        .map(Path::to_path_buf)
        // <target>/<profile>/build/<pkg>-<hash>/out
        .unwrap_or_else(|| out_dir.ancestors().nth(4).unwrap_or(out_dir).to_path_buf())
}

/// A build failure, with a message meant for the person who ran `cargo build`.
pub struct Error(String);

impl Error {
    pub fn new(msg: impl Into<String>) -> Self {
        Error(msg.into())
    }
}

impl From<mlx_facts::Unknown> for Error {
    fn from(e: mlx_facts::Unknown) -> Self {
        Error(e.0)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

// `fn main() -> Result<(), Error>` prints Debug: keep it the readable message.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

fn io(context: impl fmt::Display) -> impl FnOnce(std::io::Error) -> Error {
    move |e| Error::new(format!("{context}: {e}"))
}

/// An exclusive lock held as long as the returned file lives.
pub fn lock_file(path: &Path) -> Result<fs::File, Error> {
    let lock =
        fs::File::create(path).map_err(io(format!("cannot create the lock {}", path.display())))?;
    lock.lock()
        .map_err(io(format!("cannot lock {}", path.display())))?;
    Ok(lock)
}

/// Upstream's tree to build: `MLX_SOURCE_DIR`, or the base's carrier's
/// tree with the carrier's own patches reversed, both tree ids checked
/// against the base's row.
pub fn upstream(opts: &Options) -> Result<Upstream, Error> {
    source::locate(&opts.env, opts.base, &opts.root)
}

/// The series this process's builds apply (fork-only patches included):
/// the base's (`MLX_FORK_BASE`) of `patches/`, or `MLX_PATCHED_SERIES_DIR`'s.
pub fn run_series() -> Result<Vec<PathBuf>, Error> {
    let env = Env::process();
    let dir = env.series_dir().unwrap_or_else(patch::series_dir);
    patch::series_on(env.base()?, &dir)
}

/// A short description of the upstream tree for messages.
pub fn describe(upstream: &Upstream) -> String {
    match &upstream.origin {
        Origin::Pinned(base) => format!(
            "upstream MLX v{} (tree {})",
            base.version, upstream.tree_id
        ),
        Origin::Carrier(v) => format!(
            "upstream MLX from {} {v} (tree {})",
            pin::CARRIER_CRATE,
            upstream.tree_id
        ),
        Origin::Override => match pin::BASES
            .iter()
            .find(|b| b.upstream_tree_id == upstream.tree_id)
        {
            Some(base) => format!(
                "MLX_SOURCE_DIR={} (tree {}, identical to the base v{})",
                upstream.dir.display(),
                upstream.tree_id,
                base.version
            ),
            None => format!(
                "MLX_SOURCE_DIR={} (tree {}, not a base's)",
                upstream.dir.display(),
                upstream.tree_id,
            ),
        },
    }
}

/// Copies a source tree (without `.git`), keeping symlinks as symlinks.
pub fn copy_tree(from: &Path, to: &Path) -> Result<(), Error> {
    fs::create_dir_all(to).map_err(io(format!("cannot create {}", to.display())))?;
    for entry in fs::read_dir(from).map_err(io(format!("cannot read {}", from.display())))? {
        let entry = entry.map_err(io("cannot read a directory entry"))?;
        let name = entry.file_name();
        if name == ".git" {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        let ty = entry.file_type().map_err(io("cannot stat"))?;
        if ty.is_dir() {
            copy_tree(&src, &dst)?;
        } else if ty.is_symlink() {
            let target = fs::read_link(&src).map_err(io("cannot read a symlink"))?;
            std::os::unix::fs::symlink(target, &dst)
                .map_err(io(format!("cannot create {}", dst.display())))?;
        } else {
            fs::copy(&src, &dst).map_err(io(format!("cannot copy {}", src.display())))?;
        }
    }
    Ok(())
}

/// Makes `to` hold what `from` holds, moving in only the files whose bytes,
/// mode or link target differ (so their mtimes tell ninja what changed).
fn sync_tree(from: &Path, to: &Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    fs::create_dir_all(to).map_err(io(format!("cannot create {}", to.display())))?;
    let mut wanted = std::collections::HashSet::new();
    for entry in fs::read_dir(from).map_err(io(format!("cannot read {}", from.display())))? {
        let entry = entry.map_err(io("cannot read a directory entry"))?;
        let name = entry.file_name();
        wanted.insert(name.clone());
        let (src, dst) = (entry.path(), to.join(&name));
        let meta = fs::symlink_metadata(&src).map_err(io("cannot stat"))?;
        let existing = fs::symlink_metadata(&dst).ok();
        if meta.is_dir() {
            if existing.as_ref().is_some_and(|m| !m.is_dir()) {
                fs::remove_file(&dst).map_err(io("cannot replace a file"))?;
            }
            sync_tree(&src, &dst)?;
            continue;
        }
        if existing.as_ref().is_some_and(|m| m.is_dir()) {
            fs::remove_dir_all(&dst).map_err(io("cannot replace a directory"))?;
        }
        let same = meta.file_type().is_symlink()
            == existing
                .as_ref()
                .is_some_and(|m| m.file_type().is_symlink())
            && existing
                .as_ref()
                .is_some_and(|m| m.permissions().mode() == meta.permissions().mode())
            && if meta.file_type().is_symlink() {
                fs::read_link(&src).ok() == fs::read_link(&dst).ok()
            } else {
                fs::read(&src).ok() == fs::read(&dst).ok()
            };
        if !same {
            let _ = fs::remove_file(&dst);
            fs::rename(&src, &dst)
                .map_err(io(format!("cannot move {} into place", dst.display())))?;
        }
    }
    for entry in fs::read_dir(to).map_err(io(format!("cannot read {}", to.display())))? {
        let entry = entry.map_err(io("cannot read a directory entry"))?;
        if !wanted.contains(&entry.file_name()) {
            let p = entry.path();
            let _ = if p.is_dir() && !p.is_symlink() {
                fs::remove_dir_all(&p)
            } else {
                fs::remove_file(&p)
            };
        }
    }
    Ok(())
}

/// Compiles and links a one-file C++ program against a variant's prefix the
/// plain way (`c++ -std=c++20 prog.cpp -I$P/include -L$P/lib -lmlx`), with an
/// rpath so it runs without `LD_LIBRARY_PATH`. `$CXX` picks the compiler.
/// Against a sanitizer build it carries the same instrumentation.
pub fn compile_program(mlx: &Artifacts, src: &Path, exe: &Path, env: &Env) -> Result<(), Error> {
    let cxx = env.cxx_or_default();
    let lib = &mlx.lib_dir;
    let out = Command::new(&cxx)
        .args(["-std=c++20", "-O2"])
        .args(mlx.sanitizer.map(|s| s.compile_flags()).unwrap_or_default())
        .arg(src)
        .arg(format!("-I{}", mlx.include_dir.display()))
        .arg(format!("-L{}", lib.display()))
        .arg("-lmlx")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(exe)
        .output()
        .map_err(|e| {
            Error::new(format!(
                "cannot run the C++ compiler {}: {e}",
                cxx.to_string_lossy()
            ))
        })?;
    if !out.status.success() {
        return Err(Error::new(format!(
            "compiling {} against the {} prefix {} failed:\n{}",
            src.display(),
            mlx.name,
            mlx.prefix.display(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}
