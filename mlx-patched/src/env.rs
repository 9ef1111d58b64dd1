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

pub use mlx_facts::variables::{other_vars, vars, Variable, OTHER_VARIABLES, VARIABLES, VARIABLES_PAGE, variables_markdown};
use vars::*;

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
            println!("cargo:rerun-if-changed={}", watched(path).display());
            TRACKED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(path.to_path_buf());
        }
    }

    /// Every path this process's build-script reads have told Cargo to watch
    /// (as read: a missing one is watched through [`watched`]).
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

    /// `CARGO_HOME`, Cargo's home (set by rustup, or by the user): where a
    /// Metal build keeps `mlx.metallib` for installed binaries.
    pub fn cargo_home(&self) -> Option<PathBuf> {
        self.other(other_vars::CARGO_HOME).map(PathBuf::from)
    }

    /// `HOME`: the user's home, whose `.cargo` is Cargo's default home.
    pub fn home(&self) -> Option<PathBuf> {
        self.other(other_vars::HOME).map(PathBuf::from)
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

/// What Cargo watches for `path`: the path, or, while it is missing, the
/// nearest folder above it that exists, whose listing changes when it
/// appears. Cargo reruns a build script on every build while a path it
/// watches is missing: a base's folder of ports that does not exist did so
/// for every build of mlx-sys, and recompiled everything above it.
pub fn watched(path: &Path) -> &Path {
    path.ancestors().find(|p| p.exists()).unwrap_or(path)
}
