//! What a build is asked for and what it gives: the backend, the
//! sanitizer, the options, and a finished variant (`Artifacts`).

use super::plan::{self, Backend, BuildPlan, Host, Layout};
use crate::progress::Progress;
use crate::source::Origin;
use crate::{patch, Env, Error};
use std::path::{Path, PathBuf};

/// A sanitizer build of the variants, each in `<root>/<variant>-<suffix>`,
/// with the fork-only patches (the live-descriptor census) applied and on.
/// Address and thread use upstream's own `USE_ASAN`/`USE_UBSAN`/`USE_TSAN`
/// options, which put the flags on the `mlx` target publicly, so MLX's
/// tests and anything built through its CMake package are instrumented too.
/// Coverage is the fuzzer's instrumentation: see [`Sanitizer::Coverage`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sanitizer {
    /// AddressSanitizer with UndefinedBehaviorSanitizer; LeakSanitizer is
    /// part of AddressSanitizer on Linux.
    Address,
    /// ThreadSanitizer.
    Thread,
    /// Coverage: every block of libmlx's graph code (not `mlx/backend/`)
    /// counts the edge it was reached by (`-fsanitize-coverage=trace-pc` and
    /// our counter, `coverage/edges.cpp`, which a guided fuzzer reads
    /// through a shared map), and all of libmlx has gcov's line and branch
    /// counters (`--coverage`, written as `.gcda` files at exit, for the
    /// coverage map). GCC and Clang both take these flags, on a stable
    /// toolchain; the programs built against the prefix are not instrumented.
    Coverage,
}

impl Sanitizer {
    pub fn parse(s: &str) -> Result<Self, Error> {
        match s {
            "address" => Ok(Sanitizer::Address),
            "thread" => Ok(Sanitizer::Thread),
            "coverage" => Ok(Sanitizer::Coverage),
            _ => Err(Error::new(format!(
                "unknown sanitizer `{s}`: expected `address`, `thread` or `coverage`"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Sanitizer::Address => "address",
            Sanitizer::Thread => "thread",
            Sanitizer::Coverage => "coverage",
        }
    }

    /// The suffix of a sanitizer build's variant directories.
    pub fn suffix(self) -> &'static str {
        match self {
            Sanitizer::Address => "asan",
            Sanitizer::Thread => "tsan",
            Sanitizer::Coverage => "cov",
        }
    }

    /// Compiler flags for programs built against such a prefix: the same
    /// instrumentation, frame pointers kept and line tables, for stacks.
    pub fn compile_flags(self) -> &'static [&'static str] {
        match self {
            Sanitizer::Address => &[
                "-fsanitize=address,undefined",
                "-fno-omit-frame-pointer",
                "-g1",
            ],
            Sanitizer::Thread => &["-fsanitize=thread", "-fno-omit-frame-pointer", "-g1"],
            // libmlx carries its counters and their runtime.
            Sanitizer::Coverage => &[],
        }
    }

    /// The sanitizer's runtime libraries, which objects compiled with
    /// [`Sanitizer::compile_flags`] need at link time.
    pub fn runtime_libs(self) -> &'static [&'static str] {
        match self {
            Sanitizer::Address => &["asan", "ubsan"],
            Sanitizer::Thread => &["tsan"],
            Sanitizer::Coverage => &[],
        }
    }

    /// Our own files the coverage variant's build reads (rerun triggers
    /// and cache-key inputs): the edge counter and the CMake that adds it.
    pub fn build_files(self) -> Vec<PathBuf> {
        match self {
            Sanitizer::Coverage => ["edges.cpp", "inject.cmake"]
                .iter()
                .map(|f| coverage_dir().join(f))
                .collect(),
            _ => Vec::new(),
        }
    }

    pub(crate) fn cmake_args(self) -> Vec<String> {
        if self == Sanitizer::Coverage {
            return coverage_cmake_args();
        }
        let on: &[&str] = match self {
            Sanitizer::Address => &["-DUSE_ASAN=ON", "-DUSE_UBSAN=ON"],
            Sanitizer::Thread => &["-DUSE_TSAN=ON"],
            Sanitizer::Coverage => unreachable!(),
        };
        let mut args: Vec<String> = on.iter().map(|s| s.to_string()).collect();
        // Stacks that name every frame: no omitted frame pointers or
        // sibling calls, and line tables (-g1 keeps the objects small).
        // -O1 (instead of Release's -O3) is the usual level for sanitizer
        // builds: inlining keeps fewer frames out of the stacks.
        for lang in ["C", "CXX"] {
            args.push(format!(
                "-DCMAKE_{lang}_FLAGS=-fno-omit-frame-pointer -fno-optimize-sibling-calls -g1"
            ));
            args.push(format!("-DCMAKE_{lang}_FLAGS_RELEASE=-O1 -DNDEBUG"));
        }
        args.push("-DMLX_FORK_DESC_CENSUS=ON".into());
        args
    }
}

fn coverage_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("coverage")
}

/// Both instrumentations on libmlx's sources (`coverage/inject.cmake`), at
/// -O1 as the sanitizer builds are (line tables that match the source, a
/// worker fast enough to fuzz), and the census on, as in every sanitizer
/// build.
fn coverage_cmake_args() -> Vec<String> {
    let mut args = Vec::new();
    for lang in ["C", "CXX"] {
        args.push(format!("-DCMAKE_{lang}_FLAGS=-g1"));
        args.push(format!("-DCMAKE_{lang}_FLAGS_RELEASE=-O1 -DNDEBUG"));
    }
    args.push(format!(
        "-DCMAKE_PROJECT_mlx_INCLUDE={}",
        coverage_dir().join("inject.cmake").display()
    ));
    args.push("-DMLX_FORK_DESC_CENSUS=ON".into());
    args.push(format!(
        "-DMLX_FORK_COVERAGE_MAP_SIZE={}",
        mlx_facts::coverage::MAP_SIZE
    ));
    args
}

/// What a finished variant provides.
#[derive(Clone, Debug)]
pub struct Artifacts {
    /// `patched`, `pristine`, `suggested`, or `experiment-<name>`.
    pub(crate) name: String,
    /// Install prefix with `include/`, `lib/` and `lib/cmake/MLX`.
    pub(crate) prefix: PathBuf,
    pub(crate) include_dir: PathBuf,
    pub(crate) lib_dir: PathBuf,
    /// The variant's tree (upstream's with its patches applied).
    pub(crate) source_dir: PathBuf,
    /// Runs MLX's own doctest suite built from this variant's tree against
    /// the installed library (a small script; built by `Options::tests`).
    pub(crate) mlx_tests: PathBuf,
    /// Git tree id of upstream's tree, before any patch.
    pub(crate) upstream_tree_id: String,
    pub(crate) origin: Origin,
    /// Patch files applied, with the paths each was limited to.
    pub(crate) patches: Vec<(PathBuf, Option<&'static str>)>,
    /// The variant whose build this one was compiled in, if any.
    pub(crate) built_on: Option<String>,
    /// The sanitizer the library (and anything built against it) carries.
    pub(crate) sanitizer: Option<Sanitizer>,
    /// The cache key the variant was built with (empty for a prefix built
    /// elsewhere): what anything built from it is keyed on.
    pub(crate) build_key: String,
    /// True when the stamp matched and nothing was rebuilt.
    pub(crate) cached: bool,
    /// What the build did on its host (a prefix built elsewhere: what
    /// linking it takes).
    pub(crate) plan: BuildPlan,
}

impl Artifacts {
    // Read-only outside the build: a variant is what its build made.
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn backend(&self) -> Backend {
        self.plan.backend
    }
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }
    pub fn include_dir(&self) -> &Path {
        &self.include_dir
    }
    pub fn lib_dir(&self) -> &Path {
        &self.lib_dir
    }
    pub fn source_dir(&self) -> &Path {
        &self.source_dir
    }
    pub fn mlx_tests(&self) -> &Path {
        &self.mlx_tests
    }
    pub fn upstream_tree_id(&self) -> &str {
        &self.upstream_tree_id
    }
    pub fn origin(&self) -> &Origin {
        &self.origin
    }
    pub fn patches(&self) -> &[(PathBuf, Option<&'static str>)] {
        &self.patches
    }
    pub fn built_on(&self) -> Option<&str> {
        self.built_on.as_deref()
    }
    pub fn sanitizer(&self) -> Option<Sanitizer> {
        self.sanitizer
    }
    pub fn build_key(&self) -> &str {
        &self.build_key
    }
    pub fn cached(&self) -> bool {
        self.cached
    }
    pub fn plan(&self) -> &BuildPlan {
        &self.plan
    }

    /// An MLX installed by someone else in `prefix` (as `cargo xtask prefix`
    /// prints, or any `cmake --install` of MLX): checked for the headers, the
    /// library and the CMake package, nothing built.
    pub fn from_prefix(prefix: &Path) -> Result<Artifacts, Error> {
        let lib_dir = prefix.join("lib");
        let host = Host::of_target(&Env::process(), false);
        let lib = if host.backend() == Backend::Metal {
            "libmlx.dylib"
        } else {
            "libmlx.so"
        };
        for (what, path) in [
            ("headers", prefix.join("include/mlx/array.h")),
            ("library", lib_dir.join(lib)),
            (
                "CMake package",
                prefix.join("share/cmake/MLX/MLXConfig.cmake"),
            ),
        ] {
            if !path.exists() {
                return Err(Error::new(format!(
                    "{} is not an MLX install prefix: its {what} ({}) are missing",
                    prefix.display(),
                    path.display()
                )));
            }
        }
        // MLX installs its metallib beside the library.
        let plan = BuildPlan {
            metallib: (host.backend() == Backend::Metal).then(|| lib_dir.join("mlx.metallib")),
            ..plan::plan(
                &host,
                &Layout {
                    prefix: prefix.to_path_buf(),
                    build: prefix.to_path_buf(),
                    tests: false,
                    metallib_dir: None,
                },
            )
        };
        Ok(Artifacts {
            plan,
            name: format!("the MLX in {}", prefix.display()),
            prefix: prefix.to_path_buf(),
            include_dir: prefix.join("include"),
            lib_dir,
            source_dir: prefix.join("include"),
            mlx_tests: PathBuf::new(),
            upstream_tree_id: String::new(),
            origin: Origin::Override,
            patches: Vec::new(),
            built_on: None,
            sanitizer: None,
            build_key: String::new(),
            cached: true,
        })
    }

    /// Tells Cargo, once, how to link this variant's libmlx: search path,
    /// library, an rpath so binaries run without `LD_LIBRARY_PATH`, and the
    /// metadata dependents read as `DEP_<links>_LIB_DIR`, `_PREFIX`,
    /// `_INCLUDE` and `_VARIANT`.
    pub fn print_cargo_metadata(&self) {
        self.print_dynamic_link();
        println!("cargo:include={}", self.include_dir.display());
        self.print_fork_metadata();
    }

    /// The metadata of this fork's own that every crate linking a variant
    /// gives its dependents: `lib_dir`, `prefix` and `variant`.
    pub fn print_fork_metadata(&self) {
        println!("cargo:lib_dir={}", self.lib_dir.display());
        println!("cargo:prefix={}", self.prefix.display());
        println!("cargo:variant={}", self.name);
    }

    /// The link lines for the shared libmlx: its folder, the library, the
    /// sanitizer's runtime if any, and an rpath for this package's own
    /// binaries (Cargo passes none on to dependents).
    pub fn print_dynamic_link(&self) {
        println!("cargo:rustc-link-search=native={}", self.lib_dir.display());
        println!("cargo:rustc-link-lib=dylib=mlx");
        self.print_sanitizer_runtime();
        print_rpath(&self.lib_dir.to_string_lossy());
    }

    /// A sanitizer build's dependents compile instrumented C++ against it
    /// (the bridge does), which needs the runtime at link time.
    pub fn print_sanitizer_runtime(&self) {
        for lib in self.sanitizer.map(|s| s.runtime_libs()).unwrap_or_default() {
            println!("cargo:rustc-link-lib=dylib={lib}");
        }
    }
}

pub(crate) fn print_rpath(lib: &str) {
    println!("cargo:rustc-link-arg=-Wl,-rpath,{lib}");
}

/// For a package that depends on the crate linking MLX (`links`): the rpath
/// of the linked library for this package's own binaries and tests, which
/// Cargo does not pass on from the dependency.
pub fn print_rpath_of_dependency(env: &Env, links: &str) -> Result<(), Error> {
    let lib = env
        .dependency_metadata(links, "lib_dir")
        .ok_or_else(|| Error::new(format!("DEP_{}_LIB_DIR is not set: does this package depend on the crate with `links = \"{links}\"`?", links.to_uppercase())))?;
    print_rpath(&lib);
    Ok(())
}

#[derive(Clone, Debug)]
pub struct Options {
    /// The upstream release built on.
    pub base: &'static crate::pin::Base,
    /// Holds `upstream/`, `<variant>/src`, `<variant>/build`, `<variant>/prefix`.
    pub root: PathBuf,
    /// The target built for; its backend is [`Options::backend`].
    pub host: Host,
    pub jobs: usize,
    pub extra_cmake_args: Vec<String>,
    pub patches_dir: PathBuf,
    pub env: Env,
    /// Also build MLX's own C++ tests (the suite runs them; the demo and
    /// the Rust API do not need them).
    pub tests: bool,
    pub progress: Progress,
    /// Build the sanitizer variants instead of the normal ones.
    pub sanitizer: Option<Sanitizer>,
}

impl Options {
    /// Reads the options through `env` (so a build script tracks each
    /// variable). `target_dir` is the Cargo target directory the default
    /// root goes under. Builds the library only, quietly: set `tests` and
    /// `progress` for more.
    pub fn from_env(env: Env, target_dir: &Path, cuda: bool) -> Result<Self, Error> {
        let base = env.base()?;
        // Each base's builds apart, so that switching bases rebuilds neither.
        // A folder given by `MLX_PATCHED_BUILD_DIR` is the root itself: the
        // workflows hand a build's root to the builds they start that way.
        let root = env
            .build_dir()
            .unwrap_or_else(|| target_dir.join("mlx").join(base.dir_name()));
        let jobs = match env.jobs()? {
            Some(j) => j,
            None => env.cargo_jobs().unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(2)
            }),
        };
        let extra_cmake_args = env.cmake_args()?;
        let patches_dir = env.series_dir().unwrap_or_else(patch::series_dir);
        let sanitizer = env.sanitizer()?;
        Ok(Options {
            base,
            root,
            host: Host::of_target(&env, cuda),
            jobs,
            extra_cmake_args,
            patches_dir,
            env,
            tests: false,
            progress: Progress::Quiet,
            sanitizer,
        })
    }

    pub fn backend(&self) -> Backend {
        self.host.backend()
    }

    /// The patches applied to upstream's tree, in order, fork-only ones
    /// included: the base's series of `patches/`, or every patch of the
    /// directory `MLX_PATCHED_SERIES_DIR` names.
    pub fn series(&self) -> Result<Vec<PathBuf>, Error> {
        patch::series_on(self.base, &self.patches_dir)
    }
}
