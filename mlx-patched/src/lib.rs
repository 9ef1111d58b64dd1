//! Builds MLX from the pinned upstream tree, as two variants installed side by side:
//!
//! * `patched`: upstream with `patches/*.patch` applied in file-name order;
//! * `pristine`: the control for every leak check. Its library and headers are
//!   the upstream tree untouched; only the series' changes under `tests/` are
//!   applied, so that MLX's own suite runs the new regression tests against
//!   the unpatched library and shows them failing there.
//!
//! Each variant lives in `<root>/<variant>/` (`root` defaults to `<target>/mlx`):
//! `src/` the materialized tree, `build/` the CMake build, `prefix/` the install
//! (`include/`, `lib/`, `lib/cmake/MLX`). A stamp holds the cache key (tree id,
//! patch bytes, CMake arguments); when it matches, nothing is configured or built.
//! Used from build scripts (with [`Env::build_script`]) and from `cargo xtask`.

mod env;
pub mod patch;
pub mod pin;
mod source;
mod system;

pub use env::{Env, VARIABLES};
pub use source::{carrier_dir, from_override, tree_id, verify_pinned, version_of, Origin, Upstream};
pub use system::{check_system, DEBIAN_PACKAGES};

use sha2::{Digest, Sha256};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Bumped whenever the build logic below changes what ends up in a prefix.
const BUILD_LOGIC_VERSION: u32 = 2;

/// What of the series the pristine control takes: MLX's tests, never its library.
pub const PRISTINE_PATHS: &str = "tests/*";

/// MLX test cases that cannot pass in these builds: GGUF support fetches
/// gguflib at configure time, so it is built off (`-DMLX_BUILD_GGUF=OFF`).
/// (A doctest filter: `*` matches any run of characters.)
pub const MLX_TESTS_EXCLUDED: &[&str] = &["test gguf*"];

/// One build of MLX from the upstream tree. The suite runs every leak check on
/// every variant in [`VARIANTS`] and expects the leak exactly where
/// `leak_free` is false: adding a variant is one line there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    pub name: &'static str,
    /// Patch files, relative to the workspace, applied before the series.
    pub extra_patches: &'static [&'static str],
    /// The part of the series applied (`None`: all of it).
    pub series_paths: Option<&'static str>,
    /// Whether the report's leak must be absent from this variant's library.
    pub leak_free: bool,
}

impl Variant {
    /// Upstream's library untouched, with the series' tests: the control.
    pub const PRISTINE: Variant = Variant { name: "pristine", extra_patches: &[], series_paths: Some(PRISTINE_PATHS), leak_free: false };
    /// Upstream with the whole series: what users link.
    pub const PATCHED: Variant = Variant { name: "patched", extra_patches: &[], series_paths: None, leak_free: true };

    pub fn parse(s: &str) -> Result<Self, Error> {
        VARIANTS.iter().copied().find(|v| v.name == s).ok_or_else(|| {
            let names: Vec<&str> = VARIANTS.iter().map(|v| v.name).collect();
            Error::new(format!("unknown variant `{s}`: expected one of {}", names.join(", ")))
        })
    }
}

/// Every variant the build script builds and the suite checks, control first.
/// A candidate fix is a line like
/// `Variant { name: "candidate", extra_patches: &["docs/rejected/x.patch"], series_paths: Some(PRISTINE_PATHS), leak_free: true }`.
pub const VARIANTS: &[Variant] = &[Variant::PRISTINE, Variant::PATCHED];

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// Which MLX backend to build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// Linux default: the CPU backend with system BLAS/LAPACK.
    Cpu,
    /// macOS default: Metal plus Accelerate.
    Metal,
    /// Linux with the `cuda` feature: the CUDA backend (and the CPU one).
    Cuda,
}

impl Backend {
    pub fn for_host(cuda: bool) -> Self {
        if cuda {
            Backend::Cuda
        } else if cfg!(target_os = "macos") {
            Backend::Metal
        } else {
            Backend::Cpu
        }
    }
}

/// What a finished variant provides.
#[derive(Clone, Debug)]
pub struct Artifacts {
    /// `patched`, `pristine`, or `experiment-<name>` (see [`build_experiment`]).
    pub name: String,
    pub backend: Backend,
    /// Install prefix with `include/`, `lib/` and `lib/cmake/MLX`.
    pub prefix: PathBuf,
    pub include_dir: PathBuf,
    pub lib_dir: PathBuf,
    /// The tree the variant was built from (patches applied for `patched`).
    pub source_dir: PathBuf,
    /// MLX's own doctest binary built from that tree.
    pub mlx_tests: PathBuf,
    /// Git tree id of the upstream tree, before any patch.
    pub upstream_tree_id: String,
    pub origin: Origin,
    /// Patch files applied, with the paths each was limited to.
    pub patches: Vec<(PathBuf, Option<&'static str>)>,
    /// True when the stamp matched and nothing was rebuilt.
    pub cached: bool,
}

#[derive(Clone, Debug)]
pub struct Options {
    /// Holds `<variant>/src`, `<variant>/build`, `<variant>/prefix`.
    pub root: PathBuf,
    pub backend: Backend,
    pub jobs: usize,
    pub extra_cmake_args: Vec<String>,
    pub patches_dir: PathBuf,
    pub env: Env,
}

impl Options {
    /// Reads the options through `env` (so a build script tracks each variable).
    /// `target_dir` is the Cargo target directory the default root goes under.
    pub fn from_env(env: Env, target_dir: &Path, cuda: bool) -> Self {
        let root = env.var_os("MLX_PATCHED_BUILD_DIR").map(PathBuf::from).unwrap_or_else(|| target_dir.join("mlx"));
        let jobs = env
            .var("MLX_PATCHED_JOBS")
            .and_then(|j| j.parse().ok())
            .unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2));
        let extra_cmake_args = env.var("MLX_PATCHED_CMAKE_ARGS").map(|a| a.split_whitespace().map(String::from).collect()).unwrap_or_default();
        let patches_dir = env.var_os("MLX_PATCHED_SERIES_DIR").map(PathBuf::from).unwrap_or_else(patch::series_dir);
        Options { root, backend: Backend::for_host(cuda), jobs, extra_cmake_args, patches_dir, env }
    }
}

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

/// The upstream tree to build: `MLX_SOURCE_DIR`, or the pinned carrier's
/// tree after its tree id was checked against the pin.
pub fn upstream(env: &Env) -> Result<Upstream, Error> {
    source::locate(env, &Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
}

/// Builds (or finds up to date) one variant.
pub fn build(variant: Variant, opts: &Options) -> Result<Artifacts, Error> {
    build_recipe(&recipe(variant, opts)?, &upstream(&opts.env)?, opts)
}

/// Builds one variant from a given upstream tree (`cargo xtask rebase`
/// builds trees other than the pinned one this way).
pub fn build_from(variant: Variant, upstream: &Upstream, opts: &Options) -> Result<Artifacts, Error> {
    build_recipe(&recipe(variant, opts)?, upstream, opts)
}

/// Builds every variant of [`VARIANTS`] from one look-up of the upstream tree.
pub fn build_all(opts: &Options) -> Result<Vec<Artifacts>, Error> {
    let upstream = upstream(&opts.env)?;
    VARIANTS.iter().map(|v| build_recipe(&recipe(*v, opts)?, &upstream, opts)).collect()
}

/// Builds upstream with candidate `patches` (a fix under evaluation, say)
/// plus the series' `tests/` changes, so MLX's suite runs the series' tests
/// against the candidate. Lives beside the variants as `experiment-<name>`.
pub fn build_experiment(name: &str, patches: &[PathBuf], opts: &Options) -> Result<Artifacts, Error> {
    let mut stages: Vec<(PathBuf, Option<&'static str>)> = patches.iter().map(|p| (p.clone(), None)).collect();
    stages.extend(patch::series(&opts.patches_dir)?.into_iter().map(|p| (p, Some(PRISTINE_PATHS))));
    build_recipe(&Recipe { name: format!("experiment-{name}"), patches: stages }, &upstream(&opts.env)?, opts)
}

/// What a build is made of: a name (its directory) and the patches applied
/// to the upstream tree, in order, each limited to some paths or not.
struct Recipe {
    name: String,
    patches: Vec<(PathBuf, Option<&'static str>)>,
}

fn recipe(variant: Variant, opts: &Options) -> Result<Recipe, Error> {
    let series = patch::series(&opts.patches_dir)?;
    if variant.series_paths.is_none() && series.is_empty() {
        let msg = format!("{} holds no patch: the {variant} variant is the upstream tree", opts.patches_dir.display());
        if opts.env.is_build_script() {
            println!("cargo:warning={msg}");
        } else {
            eprintln!("{msg}");
        }
    }
    let workspace = patch::series_dir().parent().map(Path::to_path_buf).unwrap_or_default();
    let extra = variant.extra_patches.iter().map(|p| (workspace.join(p), None));
    let patches = extra.chain(series.into_iter().map(|p| (p, variant.series_paths))).collect();
    Ok(Recipe { name: variant.name.to_string(), patches })
}

/// A short description of the upstream tree for messages.
pub fn describe(upstream: &Upstream) -> String {
    match upstream.origin {
        Origin::Pinned => format!("MLX v{} (tree {})", pin::UPSTREAM_VERSION, upstream.tree_id),
        Origin::Override if upstream.tree_id == pin::UPSTREAM_TREE_ID => {
            format!("MLX_SOURCE_DIR={} (tree {}, identical to pinned v{})", upstream.dir.display(), upstream.tree_id, pin::UPSTREAM_VERSION)
        }
        Origin::Override => format!("MLX_SOURCE_DIR={} (tree {}, not the pinned v{})", upstream.dir.display(), upstream.tree_id, pin::UPSTREAM_VERSION),
    }
}

fn build_recipe(recipe: &Recipe, upstream: &Upstream, opts: &Options) -> Result<Artifacts, Error> {
    let name = &recipe.name;
    // A CUDA build of a variant lives beside the host-default one, so that
    // switching the feature does not rebuild either.
    let dir = opts.root.join(if opts.backend == Backend::Cuda { format!("{name}-cuda") } else { name.clone() });
    fs::create_dir_all(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
    let src = dir.join("src");
    let build = dir.join("build");
    let prefix = dir.join("prefix");
    let args = cmake_args(opts, &prefix);

    let mut key = Sha256::new();
    key.update(format!("logic {BUILD_LOGIC_VERSION}\ntree {}\n", upstream.tree_id));
    for (p, only) in &recipe.patches {
        key.update(format!("patch {} only {only:?}\n", p.file_name().unwrap().to_string_lossy()));
        key.update(fs::read(p).map_err(io(format!("cannot read {}", p.display())))?);
    }
    for a in &args {
        key.update(format!("arg {a}\n"));
    }
    let key = format!("{:x}", key.finalize());

    // One build per variant at a time: build scripts of several packages and
    // xtask may all ask for the same variant concurrently.
    let lock = fs::File::create(dir.join("lock")).map_err(io("cannot create the variant lock"))?;
    lock.lock().map_err(io("cannot lock the variant directory"))?;

    let artifacts = Artifacts {
        name: name.clone(),
        backend: opts.backend,
        include_dir: prefix.join("include"),
        lib_dir: prefix.join("lib"),
        mlx_tests: build.join("tests/tests"),
        prefix: prefix.clone(),
        source_dir: src.clone(),
        upstream_tree_id: upstream.tree_id.clone(),
        origin: upstream.origin.clone(),
        patches: recipe.patches.clone(),
        cached: true,
    };
    let stamp = dir.join("stamp");
    if fs::read_to_string(&stamp).is_ok_and(|s| s.lines().next() == Some(key.as_str())) && prefix.join("lib").is_dir() {
        return Ok(artifacts);
    }

    check_system(opts.backend)?;
    if !opts.env.is_build_script() {
        eprintln!("building MLX {name} from {} (log in {})", describe(upstream), dir.join("build.log").display());
    }
    let started = std::time::Instant::now();

    materialize(&upstream.dir, &src, &dir.join("src.next"), &recipe.patches, &describe(upstream), &stamp)?;
    let deps = system::offline_dep_dirs(&opts.root, opts.backend)?;
    let log_path = dir.join("build.log");
    let log = fs::File::create(&log_path).map_err(io("cannot create build.log"))?;
    let mut configure = Command::new("cmake");
    configure.arg("-S").arg(&src).arg("-B").arg(&build).args(&args).args(&deps);
    let mut compile = Command::new("cmake");
    compile.arg("--build").arg(&build).arg("--parallel").arg(opts.jobs.to_string());
    let mut install = Command::new("cmake");
    install.arg("--install").arg(&build);
    for (step, mut cmd) in [("configure", configure), ("build", compile), ("install", install)] {
        // Relative paths in ccache's key let the second variant reuse the
        // first variant's objects for every file the patches do not touch.
        cmd.env("CCACHE_BASEDIR", &opts.root).env("CCACHE_NOHASHDIR", "1");
        let status = cmd
            .stdout(log.try_clone().unwrap())
            .stderr(log.try_clone().unwrap())
            .status()
            .map_err(io(format!("cannot run cmake ({step} step)")))?;
        if !status.success() {
            let text = fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(Error::new(format!(
                "MLX {name} {step} step failed ({}); full log: {}\n{}",
                describe(upstream),
                log_path.display(),
                tail.join("\n")
            )));
        }
    }
    link_cmake_package(&prefix)?;
    // Cargo shows build-script warnings again on later no-op builds, so this
    // one says what happened when the script last ran.
    if opts.env.is_build_script() {
        println!(
            "cargo:warning=MLX {name} was built from {} in {}s (log: {})",
            describe(upstream),
            started.elapsed().as_secs(),
            log_path.display()
        );
    }
    let names: Vec<String> = recipe.patches.iter().map(|(p, only)| format!("{}{}", p.file_name().unwrap().to_string_lossy(), only.map(|o| format!("[{o}]")).unwrap_or_default())).collect();
    fs::write(&stamp, format!("{key}\nupstream {}\npatches {}\n", describe(upstream), names.join(" "))).map_err(io("cannot write the stamp"))?;
    Ok(Artifacts { cached: false, ..artifacts })
}

/// MLX installs its CMake package to `share/cmake/MLX`; `lib/cmake/MLX` links
/// to it so the prefix has the layout tools expect either way. The package
/// locates the prefix relative to its own path, which has the same depth.
fn link_cmake_package(prefix: &Path) -> Result<(), Error> {
    let link = prefix.join("lib/cmake/MLX");
    if prefix.join("share/cmake/MLX").is_dir() && fs::symlink_metadata(&link).is_err() {
        fs::create_dir_all(prefix.join("lib/cmake")).map_err(io("cannot create lib/cmake"))?;
        std::os::unix::fs::symlink("../../share/cmake/MLX", &link).map_err(io("cannot link lib/cmake/MLX"))?;
    }
    Ok(())
}

/// CMake arguments for this host; part of the cache key.
fn cmake_args(opts: &Options, prefix: &Path) -> Vec<String> {
    let mut args: Vec<String> = [
        "-G", "Ninja",
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=ON",
        "-DCMAKE_INSTALL_LIBDIR=lib",
        "-DMLX_BUILD_TESTS=ON",
        "-DMLX_BUILD_EXAMPLES=OFF",
        "-DMLX_BUILD_BENCHMARKS=OFF",
        "-DMLX_BUILD_PYTHON_BINDINGS=OFF",
        // GGUF support fetches gguflib at configure time.
        "-DMLX_BUILD_GGUF=OFF",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(format!("-DCMAKE_INSTALL_PREFIX={}", prefix.display()));
    match opts.backend {
        // Offline: every dependency comes from system packages.
        Backend::Cpu => args.extend(
            ["-DMLX_BUILD_METAL=OFF", "-DMLX_BUILD_CUDA=OFF", "-DUSE_SYSTEM_FMT=ON", "-DFETCHCONTENT_FULLY_DISCONNECTED=ON"].map(String::from),
        ),
        // CUDA fetches cuDNN frontend and friends through FetchContent.
        Backend::Cuda => args.extend(["-DMLX_BUILD_METAL=OFF", "-DMLX_BUILD_CUDA=ON", "-DUSE_SYSTEM_FMT=ON"].map(String::from)),
        // Metal needs metal-cpp, which MLX's CMake fetches; Accelerate is found by MLX on macOS.
        Backend::Metal => args.extend(["-DMLX_BUILD_METAL=ON", "-DMLX_BUILD_CUDA=OFF"].map(String::from)),
    }
    args.extend(opts.extra_cmake_args.iter().cloned());
    args
}

/// Makes `src` hold upstream plus `patches`, rewriting only files whose bytes
/// change, so that an incremental ninja build recompiles exactly what a patch
/// touched. The new tree is staged in `staging` first: a patch that does not
/// apply leaves `src`, the build and the prefix (and their stamp) as they were.
fn materialize(upstream: &Path, src: &Path, staging: &Path, patches: &[(PathBuf, Option<&str>)], what: &str, stamp: &Path) -> Result<(), Error> {
    let _ = fs::remove_dir_all(staging);
    copy_tree(upstream, staging)?;
    for (p, only) in patches {
        patch::apply_series(staging, std::slice::from_ref(p), what, *only)?;
    }
    // From here on the variant is being changed: it is not done until a new stamp says so.
    let _ = fs::remove_file(stamp);
    sync_tree(staging, src)?;
    let _ = fs::remove_dir_all(staging);
    Ok(())
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
            std::os::unix::fs::symlink(target, &dst).map_err(io(format!("cannot create {}", dst.display())))?;
        } else {
            fs::copy(&src, &dst).map_err(io(format!("cannot copy {}", src.display())))?;
        }
    }
    Ok(())
}

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
        let same = meta.file_type().is_symlink() == existing.as_ref().is_some_and(|m| m.file_type().is_symlink())
            && existing.as_ref().is_some_and(|m| m.permissions().mode() == meta.permissions().mode())
            && if meta.file_type().is_symlink() { fs::read_link(&src).ok() == fs::read_link(&dst).ok() } else { fs::read(&src).ok() == fs::read(&dst).ok() };
        if !same {
            let _ = fs::remove_file(&dst);
            fs::rename(&src, &dst).map_err(io(format!("cannot move {} into place", dst.display())))?;
        }
    }
    for entry in fs::read_dir(to).map_err(io(format!("cannot read {}", to.display())))? {
        let entry = entry.map_err(io("cannot read a directory entry"))?;
        if !wanted.contains(&entry.file_name()) {
            let p = entry.path();
            let _ = if p.is_dir() && !p.is_symlink() { fs::remove_dir_all(&p) } else { fs::remove_file(&p) };
        }
    }
    Ok(())
}

/// Compiles and links a one-file C++ program against a variant's prefix the
/// plain way (`c++ -std=c++20 prog.cpp -I$P/include -L$P/lib -lmlx`), with an
/// rpath so it runs without `LD_LIBRARY_PATH`. `$CXX` picks the compiler.
pub fn compile_program(mlx: &Artifacts, src: &Path, exe: &Path, env: &Env) -> Result<(), Error> {
    let cxx = env.var_os("CXX").unwrap_or_else(|| "c++".into());
    let lib = &mlx.lib_dir;
    let out = Command::new(&cxx)
        .args(["-std=c++20", "-O2"])
        .arg(src)
        .arg(format!("-I{}", mlx.include_dir.display()))
        .arg(format!("-L{}", lib.display()))
        .arg("-lmlx")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(exe)
        .output()
        .map_err(|e| Error::new(format!("cannot run the C++ compiler {}: {e}", cxx.to_string_lossy())))?;
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
