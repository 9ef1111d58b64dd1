//! The CMake build of a variant, its cache key and stamp, and the cheap
//! build of a variant on top of its base's build.

use crate::progress::{self, Progress};
use crate::source::{Origin, Upstream};
use crate::system::{self, check_system};
use crate::variant::{Variant, VARIANTS};
use crate::CommandVars;
use crate::{copy_tree, describe, io, lock_file, patch, sync_tree, Env, Error, Fingerprint};
use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Bumped whenever the build logic below changes what ends up in a prefix.
const BUILD_LOGIC_VERSION: u32 = 5;

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

/// A sanitizer build of the variants, each in `<root>/<variant>-<suffix>`,
/// with the fork-only patches (the live-descriptor census) applied and on.
/// Uses upstream's own `USE_ASAN`/`USE_UBSAN`/`USE_TSAN` options, which put
/// the flags on the `mlx` target publicly, so MLX's tests and anything
/// built through its CMake package are instrumented too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sanitizer {
    /// AddressSanitizer with UndefinedBehaviorSanitizer; LeakSanitizer is
    /// part of AddressSanitizer on Linux.
    Address,
    /// ThreadSanitizer.
    Thread,
}

impl Sanitizer {
    pub fn parse(s: &str) -> Result<Self, Error> {
        match s {
            "address" => Ok(Sanitizer::Address),
            "thread" => Ok(Sanitizer::Thread),
            _ => Err(Error::new(format!(
                "unknown sanitizer `{s}`: expected `address` or `thread`"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Sanitizer::Address => "address",
            Sanitizer::Thread => "thread",
        }
    }

    /// The suffix of a sanitizer build's variant directories.
    pub fn suffix(self) -> &'static str {
        match self {
            Sanitizer::Address => "asan",
            Sanitizer::Thread => "tsan",
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
        }
    }

    /// The sanitizer's runtime libraries, which objects compiled with
    /// [`Sanitizer::compile_flags`] need at link time.
    pub fn runtime_libs(self) -> &'static [&'static str] {
        match self {
            Sanitizer::Address => &["asan", "ubsan"],
            Sanitizer::Thread => &["tsan"],
        }
    }

    fn cmake_args(self) -> Vec<String> {
        let on: &[&str] = match self {
            Sanitizer::Address => &["-DUSE_ASAN=ON", "-DUSE_UBSAN=ON"],
            Sanitizer::Thread => &["-DUSE_TSAN=ON"],
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

impl Backend {
    pub fn for_host(cuda: bool) -> Self {
        Self::for_target(None, cuda)
    }

    /// The backend for the target whose `target_os` a build script reads
    /// (`CARGO_CFG_TARGET_OS`); `None` is the host, for a program that
    /// builds for where it runs. A cross build from Linux to macOS gets
    /// Metal, and the reverse gets the CPU backend.
    pub fn for_target(target_os: Option<&str>, cuda: bool) -> Self {
        let macos = match target_os {
            Some(os) => os == "macos",
            None => cfg!(target_os = "macos"),
        };
        if cuda {
            Backend::Cuda
        } else if macos {
            Backend::Metal
        } else {
            Backend::Cpu
        }
    }
}

/// What a finished variant provides.
#[derive(Clone, Debug)]
pub struct Artifacts {
    /// `patched`, `pristine`, `suggested`, or `experiment-<name>`.
    pub name: String,
    pub backend: Backend,
    /// Install prefix with `include/`, `lib/` and `lib/cmake/MLX`.
    pub prefix: PathBuf,
    pub include_dir: PathBuf,
    pub lib_dir: PathBuf,
    /// The variant's tree (upstream's with its patches applied).
    pub source_dir: PathBuf,
    /// Runs MLX's own doctest suite built from this variant's tree against
    /// the installed library (a small script; built by `Options::tests`).
    pub mlx_tests: PathBuf,
    /// Git tree id of upstream's tree, before any patch.
    pub upstream_tree_id: String,
    pub origin: Origin,
    /// Patch files applied, with the paths each was limited to.
    pub patches: Vec<(PathBuf, Option<&'static str>)>,
    /// The variant whose build this one was compiled in, if any.
    pub built_on: Option<String>,
    /// The sanitizer the library (and anything built against it) carries.
    pub sanitizer: Option<Sanitizer>,
    /// The cache key the variant was built with (empty for a prefix built
    /// elsewhere): what anything built from it is keyed on.
    pub build_key: String,
    /// True when the stamp matched and nothing was rebuilt.
    pub cached: bool,
}

impl Artifacts {
    /// An MLX installed by someone else in `prefix` (as `cargo xtask prefix`
    /// prints, or any `cmake --install` of MLX): checked for the headers, the
    /// library and the CMake package, nothing built.
    pub fn from_prefix(prefix: &Path) -> Result<Artifacts, Error> {
        let lib_dir = prefix.join("lib");
        let lib = if Backend::for_target(Env::process().target_cfg("target_os").as_deref(), false)
            == Backend::Metal
        {
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
        Ok(Artifacts {
            name: format!("the MLX in {}", prefix.display()),
            backend: Backend::for_host(false),
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
        let lib = self.lib_dir.display();
        println!("cargo:lib_dir={lib}");
        println!("cargo:prefix={}", self.prefix.display());
        println!("cargo:include={}", self.include_dir.display());
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

fn print_rpath(lib: &str) {
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
    /// Holds `upstream/`, `<variant>/src`, `<variant>/build`, `<variant>/prefix`.
    pub root: PathBuf,
    pub backend: Backend,
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
        let root = env.build_dir().unwrap_or_else(|| target_dir.join("mlx"));
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
            root,
            backend: Backend::for_target(env.target_cfg("target_os").as_deref(), cuda),
            jobs,
            extra_cmake_args,
            patches_dir,
            env,
            tests: false,
            progress: Progress::Quiet,
            sanitizer,
        })
    }
}

/// Builds (or finds up to date) one variant.
pub fn build(variant: Variant, opts: &Options) -> Result<Artifacts, Error> {
    build_from(variant, &crate::upstream(opts)?, opts)
}

/// Builds one variant from a given upstream tree (`cargo xtask rebase`
/// builds trees other than the pinned one this way).
pub fn build_from(
    variant: Variant,
    upstream: &Upstream,
    opts: &Options,
) -> Result<Artifacts, Error> {
    build_recipe(&recipe(variant, opts)?, upstream, opts)
}

/// Builds `variants` (in order) from one look-up of the upstream tree.
pub fn build_all(variants: &[Variant], opts: &Options) -> Result<Vec<Artifacts>, Error> {
    let upstream = crate::upstream(opts)?;
    variants
        .iter()
        .map(|v| build_from(*v, &upstream, opts))
        .collect()
}

/// Builds the control plus candidate `patches` (a fix under evaluation),
/// so MLX's suite runs the series' tests against the candidate. Lives beside
/// the variants as `experiment-<name>`, built on the control's build.
pub fn build_experiment(
    name: &str,
    patches: &[PathBuf],
    opts: &Options,
) -> Result<Artifacts, Error> {
    let base = recipe(Variant::PRISTINE, opts)?;
    let n = base.patches.len();
    let mut stages = base.patches;
    stages.extend(patches.iter().map(|p| (p.clone(), None)));
    let r = Recipe {
        name: format!("experiment-{name}"),
        patches: stages,
        base: Some((Variant::PRISTINE, n)),
    };
    build_recipe(&r, &crate::upstream(opts)?, opts)
}

/// What a build is made of: a name (its directory) and the patches applied
/// to the upstream tree, in order, each limited to some paths or not.
struct Recipe {
    name: String,
    patches: Vec<(PathBuf, Option<&'static str>)>,
    /// The variant this one extends, and how many of `patches` are its own.
    base: Option<(Variant, usize)>,
}

fn recipe(variant: Variant, opts: &Options) -> Result<Recipe, Error> {
    let workspace = patch::series_dir()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let extra: Vec<(PathBuf, Option<&'static str>)> = variant
        .extra_patches
        .iter()
        .map(|p| (workspace.join(p), None))
        .collect();
    // The series directory itself, so that an added or removed patch counts.
    opts.env.track_file(&opts.patches_dir);
    for (p, _) in &extra {
        opts.env.track_file(p);
    }
    if let Some(base_name) = variant.base {
        let base = VARIANTS
            .iter()
            .copied()
            .find(|v| v.name == base_name)
            .ok_or_else(|| {
                Error::new(format!(
                    "variant {variant} is built on `{base_name}`, which is not a variant"
                ))
            })?;
        let mut r = recipe(base, opts)?;
        let n = r.patches.len();
        r.patches.extend(extra);
        return Ok(Recipe {
            name: variant.name.to_string(),
            patches: r.patches,
            base: Some((base, n)),
        });
    }
    let series = patch::fix_series(&opts.patches_dir)?;
    for p in patch::series(&opts.patches_dir)? {
        opts.env.track_file(&p);
    }
    if variant.series_paths.is_none() && series.is_empty() {
        let msg = format!(
            "{} holds no patch: the {variant} variant is the upstream tree",
            opts.patches_dir.display()
        );
        if opts.env.is_build_script() {
            println!("cargo:warning={msg}");
        } else {
            eprintln!("{msg}");
        }
    }
    let mut patches: Vec<_> = extra
        .into_iter()
        .chain(series.into_iter().map(|p| (p, variant.series_paths)))
        .collect();
    // The debug aids go whole into every variant of a sanitizer build, the
    // control too, so that they measure the same thing on each.
    if opts.sanitizer.is_some() {
        patches.extend(
            patch::fork_only(&opts.patches_dir)?
                .into_iter()
                .map(|p| (p, None)),
        );
    }
    Ok(Recipe {
        name: variant.name.to_string(),
        patches,
        base: None,
    })
}

/// What a variant directory's stamp says: the cache key it was built with,
/// and whether MLX's tests were built too.
struct Stamp {
    key: String,
    tests: bool,
}

fn read_stamp(path: &Path) -> Option<Stamp> {
    let text = fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    let key = lines.next()?.to_string();
    let tests = lines.next() == Some("tests yes");
    Some(Stamp { key, tests })
}

fn write_stamp(path: &Path, key: &str, tests: bool, about: &str) -> Result<(), Error> {
    fs::write(
        path,
        format!("{key}\ntests {}\n{about}", if tests { "yes" } else { "no" }),
    )
    .map_err(io("cannot write the stamp"))
}

/// The identity of a program: its path as given and the first line of its
/// `--version`, so another compiler (or another version of it) is another key.
fn tool_identity(program: &std::ffi::OsStr) -> String {
    let first = program
        .to_string_lossy()
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string();
    let version = Command::new(&first).arg("--version").output().map(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()
    });
    format!(
        "{first}: {}",
        version.unwrap_or_else(|e| format!("not runnable ({e})"))
    )
}

/// Everything that changes what a build produces, hashed: the logic
/// version, upstream's tree, every patch's bytes, the CMake arguments, the
/// compilers and CMake, and the system packages standing in for MLX's
/// downloaded dependencies.
fn cache_key(
    recipe: &Recipe,
    upstream: &Upstream,
    args: &[String],
    opts: &Options,
    tests: bool,
) -> Result<String, Error> {
    let mut key = Fingerprint::new(&format!("build {BUILD_LOGIC_VERSION}"));
    key.text("tree", &upstream.tree_id);
    for (p, only) in &recipe.patches {
        key.file(p)?.text("only", format!("{only:?}"));
    }
    key.text("configure", configure_inputs(args, opts, tests));
    Ok(key.finish())
}

/// The CMake arguments of a variant installed into `prefix`, with MLX's
/// tests configured or not: the host's, gguflib's source, and the system
/// packages that stand in for MLX's downloads.
fn configure_args(
    upstream: &Upstream,
    opts: &Options,
    prefix: &Path,
    tests: bool,
) -> Result<Vec<String>, Error> {
    let mut args = cmake_args(opts, prefix, tests);
    // GGUF support compiles gguflib in: from the pinned package, not git.
    let gguflib = crate::source::gguflib_source(&opts.env, &upstream.dir)?;
    args.push(format!(
        "-DFETCHCONTENT_SOURCE_DIR_GGUFLIB={}",
        gguflib.display()
    ));
    args.extend(system::offline_dep_dirs(&opts.root, opts.backend, tests)?);
    Ok(args)
}

/// What a variant's build is made of, as its cache key hashes it, but with
/// the paths of this checkout's build directory and of the source packages
/// left out: two checkouts of one commit on one machine agree. It covers
/// upstream's tree, every patch applied (the series, the fork-only ones of
/// a sanitizer build, the variant's own), the CMake arguments (sanitizer
/// flags and optimisation level included), the compilers and CMake, and the
/// system packages. Evidence recorded for a build is keyed on this: the
/// inputs of the build with MLX's tests configured, a superset of the
/// library's, whether or not the run needed the tests.
pub fn build_inputs(
    variant: Variant,
    upstream: &Upstream,
    opts: &Options,
) -> Result<String, Error> {
    let recipe = recipe(variant, opts)?;
    let root = opts.root.display().to_string();
    let gguflib = crate::source::gguflib_source(&opts.env, &upstream.dir)?
        .display()
        .to_string();
    let args: Vec<String> = configure_args(
        upstream,
        opts,
        &variant_dir(opts, &recipe.name).join("prefix"),
        true,
    )?
    .into_iter()
    .map(|a| {
        a.replace(&gguflib, "<gguflib>")
            .replace(&root, "<build dir>")
    })
    .collect();
    let mut f = Fingerprint::new(&format!("build inputs {BUILD_LOGIC_VERSION}"));
    f.text("variant", &recipe.name).text(
        "base",
        format!("{:?}", recipe.base.map(|(b, n)| (b.name, n))),
    );
    f.text("key", cache_key(&recipe, upstream, &args, opts, true)?);
    Ok(f.finish())
}

fn build_recipe(recipe: &Recipe, upstream: &Upstream, opts: &Options) -> Result<Artifacts, Error> {
    if let Some((base, own)) = recipe.base {
        let base_recipe = self::recipe(base, opts)?;
        let base_art = build_recipe(&base_recipe, upstream, opts)?;
        if let Some(art) = build_on_base(recipe, own, &base_recipe, &base_art, upstream, opts)? {
            return Ok(art);
        }
        // Not derivable: a build of its own, from upstream's tree.
    }
    let name = &recipe.name;
    // A CUDA build of a variant lives beside the host-default one, so that
    // switching the feature does not rebuild either.
    let dir = variant_dir(opts, name);
    fs::create_dir_all(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
    let (src, build, prefix) = (dir.join("src"), dir.join("build"), dir.join("prefix"));
    // Two keys: of the library alone, and of the library with MLX's tests
    // configured, which serves a request for the library too. The second
    // reads doctest's files, so it is computed only where it can matter.
    let lib_args = configure_args(upstream, opts, &prefix, false)?;
    let lib_key = cache_key(recipe, upstream, &lib_args, opts, false)?;
    let with_tests = || -> Result<(Vec<String>, String), Error> {
        let args = configure_args(upstream, opts, &prefix, true)?;
        let key = cache_key(recipe, upstream, &args, opts, true)?;
        Ok((args, key))
    };
    // Whether CMake must configure afresh: the library's inputs only, so
    // that configuring the tests later is done in place.
    let inputs = configure_inputs(&lib_args, opts, false);

    // One build per variant at a time: build scripts of several packages and
    // xtask may all ask for the same variant concurrently.
    let _lock = lock_file(&dir.join("lock"))?;
    let stamp_path = dir.join("stamp");
    // The directory's name says the build (`patched`, `patched-asan`, ...).
    let shown = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| name.clone());
    let label = format!("MLX {shown}");
    let what = format!("MLX {shown} ({})", describe(upstream));
    let log_path = dir.join("build.log");
    let found = read_stamp(&stamp_path).filter(|_| prefix.join("lib").is_dir());
    if let Some(found) = &found {
        let tested = if found.key == lib_key {
            None
        } else {
            with_tests().ok().filter(|(_, k)| *k == found.key)
        };
        if found.key == lib_key || tested.is_some() {
            let artifacts = artifacts_in(&dir, recipe, upstream, opts, &found.key, None);
            if !opts.tests || (tested.is_some() && found.tests) {
                return Ok(artifacts);
            }
            // The library is current; only MLX's tests are missing. Configured
            // in place when they are not yet, they compile alone.
            check_system(opts.backend, true)?;
            let log = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .map_err(io("cannot open build.log"))?;
            let key = match tested {
                Some((_, key)) => key,
                None => {
                    let (args, key) = with_tests()?;
                    configure(
                        &src,
                        &build,
                        &args,
                        &inputs,
                        &log,
                        &log_path,
                        &format!("{label}: configuring MLX's tests"),
                        opts.progress,
                        &what,
                    )?;
                    key
                }
            };
            build_targets(
                &build,
                true,
                opts,
                &log,
                &log_path,
                &format!("{label}: building MLX's tests"),
                &what,
            )?;
            write_tests_script(
                &artifacts.mlx_tests,
                &build.join("tests/tests"),
                &artifacts.lib_dir,
            )?;
            write_stamp(&stamp_path, &key, true, &about(upstream, recipe))?;
            return Ok(Artifacts {
                cached: false,
                build_key: key,
                ..artifacts
            });
        }
    }

    // A build from the sources: with MLX's tests when asked for, or when the
    // directory had them, so that a request for the library alone does not
    // take them away from the suite's build.
    let tests = opts.tests || found.as_ref().is_some_and(|s| s.tests);
    let (args, key) = if tests {
        with_tests()?
    } else {
        (lib_args.clone(), lib_key.clone())
    };
    let artifacts = artifacts_in(&dir, recipe, upstream, opts, &key, None);
    check_system(opts.backend, tests)?;
    let what = if tests {
        "the library and MLX's tests"
    } else {
        "the library"
    };
    opts.progress.say(&format!(
        "{label}: building {what} from {} (log: {})",
        describe(upstream),
        log_path.display()
    ));
    let started = std::time::Instant::now();

    materialize(
        &upstream.dir,
        &src,
        &dir.join("src.next"),
        &recipe.patches,
        &describe(upstream),
        &stamp_path,
    )?;
    let log = fs::File::create(&log_path).map_err(io("cannot create build.log"))?;
    configure(
        &src,
        &build,
        &args,
        &inputs,
        &log,
        &log_path,
        &format!("{label}: configuring"),
        opts.progress,
        what,
    )?;
    build_targets(
        &build,
        tests,
        opts,
        &log,
        &log_path,
        &format!("{label}: compiling"),
        what,
    )?;
    let mut install = Command::new("cmake");
    install.arg("--install").arg(&build);
    run_cmake(
        &mut install,
        &log,
        &log_path,
        &format!("{label}: installing"),
        Progress::Quiet,
        what,
        "install",
    )?;
    link_cmake_package(&prefix)?;
    write_tests_script(
        &artifacts.mlx_tests,
        &build.join("tests/tests"),
        &artifacts.lib_dir,
    )?;
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
    write_stamp(&stamp_path, &key, tests, &about(upstream, recipe))?;
    Ok(Artifacts {
        cached: false,
        ..artifacts
    })
}

/// What a variant directory holds once built (`cached` until rebuilt).
fn artifacts_in(
    dir: &Path,
    recipe: &Recipe,
    upstream: &Upstream,
    opts: &Options,
    key: &str,
    built_on: Option<String>,
) -> Artifacts {
    let prefix = dir.join("prefix");
    Artifacts {
        name: recipe.name.clone(),
        backend: opts.backend,
        include_dir: prefix.join("include"),
        lib_dir: prefix.join("lib"),
        mlx_tests: dir.join("mlx-tests"),
        prefix,
        source_dir: dir.join("src"),
        upstream_tree_id: upstream.tree_id.clone(),
        origin: upstream.origin.clone(),
        patches: recipe.patches.clone(),
        built_on,
        sanitizer: opts.sanitizer,
        build_key: key.to_string(),
        cached: true,
    }
}

fn variant_dir(opts: &Options, name: &str) -> PathBuf {
    let mut dir = name.to_string();
    if opts.backend == Backend::Cuda {
        dir += "-cuda";
    }
    if let Some(s) = opts.sanitizer {
        dir = format!("{dir}-{}", s.suffix());
    }
    opts.root.join(dir)
}

fn about(upstream: &Upstream, recipe: &Recipe) -> String {
    let names: Vec<String> = recipe
        .patches
        .iter()
        .map(|(p, only)| {
            format!(
                "{}{}",
                p.file_name().unwrap_or_default().to_string_lossy(),
                only.map(|o| format!("[{o}]")).unwrap_or_default()
            )
        })
        .collect();
    format!("from {}\npatches {}\n", describe(upstream), names.join(" "))
}

/// Runs a CMake step; a failure is an error naming `what` was built, with
/// the log's tail.
pub(crate) fn run_cmake(
    cmd: &mut Command,
    log: &fs::File,
    log_path: &Path,
    label: &str,
    progress: Progress,
    what: &str,
    step: &str,
) -> Result<(), Error> {
    // Relative paths in ccache's key let a variant reuse another's objects
    // for every file the patches do not touch.
    if let Some(root) = log_path.parent().and_then(Path::parent) {
        cmd.var(crate::other_vars::CCACHE_BASEDIR, root)
            .var(crate::other_vars::CCACHE_NOHASHDIR, "1");
    }
    let status = progress::run_step(cmd, log, label, progress)
        .map_err(io(format!("cannot run cmake ({step} step)")))?;
    if status.success() {
        return Ok(());
    }
    let text = fs::read_to_string(log_path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(40).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(Error::new(format!(
        "{what}: the {step} step failed; full log: {}\n{}",
        log_path.display(),
        tail.join("\n")
    )))
}

/// Where a build directory keeps the hash of what its last configure was given.
const CONFIGURE_INPUTS: &str = "fork-configure-inputs";

/// What a configure step is made of, hashed: its arguments, the compilers
/// (as the environment names them, and their versions), CMake's version and
/// the system packages that stand in for MLX's downloads. The patches are
/// not in it: ninja sees what they change from the sources' mtimes.
pub(crate) fn configure_inputs(args: &[String], opts: &Options, tests: bool) -> String {
    let mut key = Fingerprint::new("configure 1");
    for a in args {
        key.text("arg", a);
    }
    let env = &opts.env;
    key.text("CC", format!("{:?}", env.cc()))
        .text("CXX", format!("{:?}", env.cxx()));
    key.text("c", tool_identity(&env.cc().unwrap_or_else(|| "cc".into())))
        .text("c++", tool_identity(&env.cxx_or_default()));
    key.text("cmake", tool_identity("cmake".as_ref()));
    key.text(
        "system",
        system::dependency_fingerprint(opts.backend, tests),
    );
    key.finish()
}

/// Configures `build` from `src`. CMake reads `CC`/`CXX` only on a build
/// directory's first configure and keeps every `-D` option of the earlier
/// ones, so a directory last configured from other `inputs` is configured
/// afresh (`--fresh`: a new cache, a full recompile); with the same inputs
/// it is reconfigured in place and ninja recompiles only what changed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn configure(
    src: &Path,
    build: &Path,
    args: &[String],
    inputs: &str,
    log: &fs::File,
    log_path: &Path,
    label: &str,
    progress: Progress,
    what: &str,
) -> Result<(), Error> {
    let stamp = build.join(CONFIGURE_INPUTS);
    let same = fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == inputs);
    let _ = fs::remove_file(&stamp);
    let mut cmd = Command::new("cmake");
    if !same && build.join("CMakeCache.txt").exists() {
        progress.say(&format!(
            "{label}: its compilers, CMake options or system packages changed: configuring afresh"
        ));
        cmd.arg("--fresh");
    }
    cmd.arg("-S").arg(src).arg("-B").arg(build).args(args);
    run_cmake(&mut cmd, log, log_path, label, progress, what, "configure")?;
    fs::write(&stamp, inputs).map_err(io(format!("cannot write {}", stamp.display())))
}

/// Builds the library (target `mlx`), or everything including MLX's tests.
fn build_targets(
    build: &Path,
    tests: bool,
    opts: &Options,
    log: &fs::File,
    log_path: &Path,
    label: &str,
    what: &str,
) -> Result<(), Error> {
    // Inside a build script, within Cargo's jobserver; held to the end.
    let tokens = crate::jobs::acquire(
        crate::jobs::cargo_jobserver(&opts.env),
        opts.jobs,
        crate::jobs::WAIT,
    );
    let _ = writeln!(
        &*log,
        "-- compiling with {} jobs ({} tokens from Cargo's jobserver, limit {})",
        tokens.jobs(),
        tokens.acquired(),
        opts.jobs
    );
    let mut compile = Command::new("cmake");
    compile
        .arg("--build")
        .arg(build)
        .arg("--parallel")
        .arg(tokens.jobs().to_string());
    if !tests {
        compile.args(["--target", "mlx"]);
    }
    let built = run_cmake(
        &mut compile,
        log,
        log_path,
        label,
        opts.progress,
        what,
        "build",
    );
    drop(tokens);
    built
}

/// `<dir>/mlx-tests`: runs MLX's doctest binary against the installed
/// library of the variant (the library path takes precedence over the
/// binary's own runpath), so the suite tests what users link.
fn write_tests_script(script: &Path, tests: &Path, lib: &Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let var = crate::other_vars::LIBRARY_PATH.name;
    let text = format!(
        "#!/bin/sh\n# MLX's own C++ tests, run against the library installed in {lib}.\n\
         {var}='{lib}'${{{var}:+:${var}}} exec '{tests}' \"$@\"\n",
        lib = lib.display(),
        tests = tests.display()
    );
    fs::write(script, text).map_err(io(format!("cannot write {}", script.display())))?;
    fs::set_permissions(script, fs::Permissions::from_mode(0o755))
        .map_err(io("cannot make the tests script executable"))
}

/// Files that differ between two trees: (changed, added or removed).
fn tree_diff(
    a: &Path,
    b: &Path,
    rel: &Path,
    changed: &mut Vec<PathBuf>,
    other: &mut Vec<PathBuf>,
) -> Result<(), Error> {
    let names = |d: &Path| -> Result<BTreeSet<std::ffi::OsString>, Error> {
        Ok(fs::read_dir(d)
            .map_err(io(format!("cannot read {}", d.display())))?
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect())
    };
    let (na, nb) = (names(&a.join(rel))?, names(&b.join(rel))?);
    for name in na.symmetric_difference(&nb) {
        other.push(rel.join(name));
    }
    for name in na.intersection(&nb) {
        let r = rel.join(name);
        let (ma, mb) = (
            fs::symlink_metadata(a.join(&r)),
            fs::symlink_metadata(b.join(&r)),
        );
        let (ma, mb) = (
            ma.map_err(io("cannot stat"))?,
            mb.map_err(io("cannot stat"))?,
        );
        if ma.is_dir() && mb.is_dir() {
            tree_diff(a, b, &r, changed, other)?;
        } else if ma.is_file() && mb.is_file() {
            if fs::read(a.join(&r)).ok() != fs::read(b.join(&r)).ok() {
                changed.push(r);
            }
        } else if ma.file_type() != mb.file_type()
            || fs::read_link(a.join(&r)).ok() != fs::read_link(b.join(&r)).ok()
        {
            other.push(r);
        }
    }
    Ok(())
}

/// The sources compiled into libmlx, from the base build's compile
/// commands (relative to the source tree).
fn library_sources(build: &Path, src: &Path) -> Result<BTreeSet<PathBuf>, Error> {
    let path = build.join("compile_commands.json");
    let text = fs::read_to_string(&path).map_err(io(format!("cannot read {}", path.display())))?;
    let entries: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::new(format!("cannot parse {}: {e}", path.display())))?;
    Ok(entries
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["command"]
                .as_str()
                .is_some_and(|c| c.contains("CMakeFiles/mlx.dir/"))
        })
        .filter_map(|e| {
            e["file"]
                .as_str()
                .and_then(|f| Path::new(f).strip_prefix(src).ok().map(Path::to_path_buf))
        })
        .collect())
}

/// The cache key of a variant built on `base` (whose own key is `base_key`)
/// with the `extra` patches.
fn key_on_base(
    base: &str,
    base_key: &str,
    extra: &[(PathBuf, Option<&'static str>)],
) -> Result<String, Error> {
    let mut key = Fingerprint::new(&format!("build on a base {BUILD_LOGIC_VERSION}"));
    key.text("base", base).text("base key", base_key);
    for (p, _) in extra {
        key.file(p)?;
    }
    Ok(key.finish())
}

/// Builds a variant that extends `base` with patches touching only sources
/// of the library: those few files are compiled in the base's own build,
/// the library is linked and installed into this variant's prefix, and the
/// base's build is put back. MLX's tests are the base's binary run against
/// this variant's library. Returns None when the patches touch anything
/// else (headers, build files, tests): then the variant needs a build of
/// its own.
fn build_on_base(
    recipe: &Recipe,
    own: usize,
    base_recipe: &Recipe,
    base: &Artifacts,
    upstream: &Upstream,
    opts: &Options,
) -> Result<Option<Artifacts>, Error> {
    let name = &recipe.name;
    let dir = variant_dir(opts, name);
    fs::create_dir_all(&dir).map_err(io(format!("cannot create {}", dir.display())))?;
    let shown = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| name.clone());
    let base_dir = variant_dir(opts, &base.name);
    let (base_src, base_build) = (base_dir.join("src"), base_dir.join("build"));
    let base_stamp_path = base_dir.join("stamp");
    let base_stamp = read_stamp(&base_stamp_path).ok_or_else(|| {
        Error::new(format!(
            "the {} variant has no stamp after its build",
            base.name
        ))
    })?;
    let extra = &recipe.patches[own..];
    let key = key_on_base(&base.name, &base_stamp.key, extra)?;

    let _lock = lock_file(&dir.join("lock"))?;
    let prefix = dir.join("prefix");
    let artifacts = artifacts_in(&dir, recipe, upstream, opts, &key, Some(base.name.clone()));
    let stamp_path = dir.join("stamp");
    if read_stamp(&stamp_path).is_some_and(|s| s.key == key) && prefix.join("lib").is_dir() {
        write_tests_script(
            &artifacts.mlx_tests,
            &base_build.join("tests/tests"),
            &artifacts.lib_dir,
        )?;
        return Ok(Some(artifacts));
    }

    // The variant's tree: the base's tree plus the extra patches.
    let staging = dir.join("src.next");
    let _ = fs::remove_dir_all(&staging);
    copy_tree(&base_src, &staging)?;
    let what = format!("{} (the {} variant's tree)", describe(upstream), base.name);
    for (p, only) in extra {
        patch::apply_series(&staging, std::slice::from_ref(p), &what, *only)?;
    }
    let (mut changed, mut other) = (Vec::new(), Vec::new());
    tree_diff(&base_src, &staging, Path::new(""), &mut changed, &mut other)?;
    let sources = library_sources(&base_build, &base_src)?;
    if !other.is_empty() || changed.iter().any(|f| !sources.contains(f)) {
        let _ = fs::remove_dir_all(&staging);
        opts.progress.say(&format!(
            "MLX {shown}: its patches change more than library sources; building it on its own"
        ));
        return Ok(None);
    }

    let log_path = dir.join("build.log");
    let what = format!(
        "MLX {shown} on the {} build ({})",
        base.name,
        describe(upstream)
    );
    let log = fs::File::create(&log_path).map_err(io("cannot create build.log"))?;
    let files: Vec<String> = changed.iter().map(|f| f.display().to_string()).collect();
    opts.progress.say(&format!(
        "MLX {shown}: the {} build with {} recompiled (log: {})",
        base.name,
        files.join(", "),
        log_path.display()
    ));
    let _ = fs::remove_file(&stamp_path);

    // Under the base's lock: its sources are swapped while this runs. Its
    // stamp goes first, so an interruption leaves it marked for a rebuild.
    let base_lock = lock_file(&base_dir.join("lock"))?;
    fs::remove_file(&base_stamp_path).map_err(io("cannot remove the base's stamp"))?;
    let originals: Vec<(PathBuf, Vec<u8>)> = changed
        .iter()
        .map(|f| {
            (
                base_src.join(f),
                fs::read(base_src.join(f)).unwrap_or_default(),
            )
        })
        .collect();
    let swap = || -> Result<(), Error> {
        for f in &changed {
            fs::write(
                base_src.join(f),
                fs::read(staging.join(f)).map_err(io("cannot read a patched file"))?,
            )
            .map_err(io("cannot write into the base's tree"))?;
        }
        build_targets(
            &base_build,
            false,
            opts,
            &log,
            &log_path,
            &format!("MLX {shown}: compiling on the {} build", base.name),
            &what,
        )?;
        let _ = fs::remove_dir_all(&prefix);
        let mut install = Command::new("cmake");
        install
            .arg("--install")
            .arg(&base_build)
            .arg("--prefix")
            .arg(&prefix);
        run_cmake(
            &mut install,
            &log,
            &log_path,
            &format!("MLX {shown}: installing"),
            Progress::Quiet,
            &what,
            "install",
        )
    };
    let result = swap();
    // Put the base back whatever happened, and rebuild what it had.
    for (path, bytes) in &originals {
        fs::write(path, bytes).map_err(io(format!("cannot restore {}", path.display())))?;
    }
    let label = format!("MLX {}: restoring its build", base.name);
    build_targets(
        &base_build,
        base_stamp.tests,
        opts,
        &log,
        &log_path,
        &label,
        &format!("MLX {} ({})", base.name, describe(upstream)),
    )?;
    let base_text = format!(
        "{}\ntests {}\n{}",
        base_stamp.key,
        if base_stamp.tests { "yes" } else { "no" },
        about(upstream, base_recipe)
    );
    fs::write(&base_stamp_path, base_text).map_err(io("cannot restore the base's stamp"))?;
    drop(base_lock);
    result?;

    sync_tree(&staging, &dir.join("src"))?;
    let _ = fs::remove_dir_all(&staging);
    link_cmake_package(&prefix)?;
    write_tests_script(
        &artifacts.mlx_tests,
        &base_build.join("tests/tests"),
        &artifacts.lib_dir,
    )?;
    write_stamp(
        &stamp_path,
        &key,
        false,
        &format!("built on {}\n{}", base.name, about(upstream, recipe)),
    )?;
    Ok(Some(Artifacts {
        cached: false,
        ..artifacts
    }))
}

/// MLX installs its CMake package to `share/cmake/MLX`; `lib/cmake/MLX` links
/// to it so the prefix has the layout tools expect either way. The package
/// locates the prefix relative to its own path, which has the same depth.
fn link_cmake_package(prefix: &Path) -> Result<(), Error> {
    let link = prefix.join("lib/cmake/MLX");
    if prefix.join("share/cmake/MLX").is_dir() && fs::symlink_metadata(&link).is_err() {
        fs::create_dir_all(prefix.join("lib/cmake")).map_err(io("cannot create lib/cmake"))?;
        std::os::unix::fs::symlink("../../share/cmake/MLX", &link)
            .map_err(io("cannot link lib/cmake/MLX"))?;
    }
    Ok(())
}

/// CMake arguments for this host, with MLX's tests configured or not; part
/// of the cache key. MLX's CMake configures its tests unless told not to,
/// and they need doctest, which a library build must not.
fn cmake_args(opts: &Options, prefix: &Path, tests: bool) -> Vec<String> {
    let mut args: Vec<String> = [
        "-G",
        "Ninja",
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=ON",
        "-DCMAKE_INSTALL_LIBDIR=lib",
        "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
        if tests {
            "-DMLX_BUILD_TESTS=ON"
        } else {
            "-DMLX_BUILD_TESTS=OFF"
        },
        "-DMLX_BUILD_EXAMPLES=OFF",
        "-DMLX_BUILD_BENCHMARKS=OFF",
        "-DMLX_BUILD_PYTHON_BINDINGS=OFF",
        "-DMLX_BUILD_GGUF=ON",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.push(format!("-DCMAKE_INSTALL_PREFIX={}", prefix.display()));
    match opts.backend {
        // Offline: every dependency comes from system packages.
        Backend::Cpu => args.extend(
            [
                "-DMLX_BUILD_METAL=OFF",
                "-DMLX_BUILD_CUDA=OFF",
                "-DUSE_SYSTEM_FMT=ON",
                "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
            ]
            .map(String::from),
        ),
        // CUDA fetches cuDNN frontend and friends through FetchContent.
        Backend::Cuda => args.extend(
            [
                "-DMLX_BUILD_METAL=OFF",
                "-DMLX_BUILD_CUDA=ON",
                "-DUSE_SYSTEM_FMT=ON",
            ]
            .map(String::from),
        ),
        // Metal needs metal-cpp, which MLX's CMake fetches; Accelerate is found by MLX on macOS.
        Backend::Metal => {
            args.extend(["-DMLX_BUILD_METAL=ON", "-DMLX_BUILD_CUDA=OFF"].map(String::from))
        }
    }
    if let Some(s) = opts.sanitizer {
        args.extend(s.cmake_args());
    }
    args.extend(opts.extra_cmake_args.iter().cloned());
    args
}

/// Makes `src` hold upstream plus `patches`, rewriting only files whose bytes
/// change, so that an incremental ninja build recompiles exactly what a patch
/// touched. The new tree is staged in `staging` first: a patch that does not
/// apply leaves `src`, the build and the prefix (and their stamp) as they were.
fn materialize(
    upstream: &Path,
    src: &Path,
    staging: &Path,
    patches: &[(PathBuf, Option<&str>)],
    what: &str,
    stamp: &Path,
) -> Result<(), Error> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What a build script computes for an `aarch64-apple-darwin` target
    /// while running on Linux: the backend comes from the target's cfg
    /// (`CARGO_CFG_TARGET_OS=macos`), never the host's, and so do the CMake
    /// arguments (the link lines' frameworks: `archive`'s test).
    #[test]
    fn a_macos_target_gets_metal_whatever_the_host() {
        assert_eq!(Backend::for_target(Some("macos"), false), Backend::Metal);
        assert_eq!(Backend::for_target(Some("linux"), false), Backend::Cpu);
        assert_eq!(Backend::for_target(Some("macos"), true), Backend::Cuda);
        let opts = Options {
            root: PathBuf::from("/nowhere"),
            backend: Backend::for_target(Some("macos"), false),
            jobs: 1,
            extra_cmake_args: Vec::new(),
            patches_dir: PathBuf::from("/nowhere/patches"),
            env: Env::process(),
            tests: false,
            progress: Progress::Quiet,
            sanitizer: None,
        };
        let args = cmake_args(&opts, Path::new("/nowhere/prefix"), false);
        for want in [
            "-DMLX_BUILD_METAL=ON",
            "-DMLX_BUILD_CUDA=OFF",
            "-DBUILD_SHARED_LIBS=ON",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} not in {args:?}");
        }
        // The CPU build's offline switches are not for Metal, whose CMake
        // fetches metal-cpp.
        assert!(!args
            .iter()
            .any(|a| a.starts_with("-DFETCHCONTENT_FULLY_DISCONNECTED")));
        let linux = Options {
            backend: Backend::for_target(Some("linux"), false),
            ..opts
        };
        let args = cmake_args(&linux, Path::new("/nowhere/prefix"), false);
        assert!(
            args.iter().any(|a| a == "-DMLX_BUILD_METAL=OFF"),
            "{args:?}"
        );
    }

    fn cache_entry(build: &Path, name: &str) -> Option<String> {
        let text = fs::read_to_string(build.join("CMakeCache.txt")).unwrap();
        text.lines().find_map(|l| {
            l.strip_prefix(&format!("{name}:"))
                .and_then(|r| r.split_once('='))
                .map(|(_, v)| v.to_string())
        })
    }

    /// A build directory configured once with an option and one compiler,
    /// then with the option removed and another compiler: the cache must
    /// hold the second configure's values, not the first's.
    #[test]
    fn a_changed_configure_starts_a_fresh_cache() {
        let dir =
            std::env::temp_dir().join(format!("mlx-patched-configure-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let (src, build) = (dir.join("src"), dir.join("build"));
        fs::create_dir_all(&src).unwrap();
        fs::write(
            src.join("CMakeLists.txt"),
            "cmake_minimum_required(VERSION 3.20)\nproject(t C)\n",
        )
        .unwrap();
        // Another compiler: a wrapper of the system's, at another path.
        let other = dir.join("other-cc");
        fs::write(&other, "#!/bin/sh\nexec cc \"$@\"\n").unwrap();
        fs::set_permissions(&other, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let log_path = dir.join("log");
        let log = fs::File::create(&log_path).unwrap();
        let run = |cc: &Path, args: &[&str], inputs: &str| {
            // This test binary reads CC nowhere else.
            std::env::set_var(crate::vars::CC.name, cc);
            let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            configure(
                &src,
                &build,
                &args,
                inputs,
                &log,
                &log_path,
                "test",
                Progress::Quiet,
                "the test project",
            )
            .unwrap_or_else(|e| panic!("{e}"));
        };
        let cc = Path::new("/usr/bin/cc");
        run(cc, &["-G", "Ninja", "-DFORK_TEST_OPTION=1"], "first");
        assert_eq!(
            cache_entry(&build, "FORK_TEST_OPTION").as_deref(),
            Some("1")
        );
        assert_eq!(
            cache_entry(&build, "CMAKE_C_COMPILER").as_deref(),
            Some("/usr/bin/cc")
        );
        run(&other, &["-G", "Ninja"], "second");
        std::env::remove_var(crate::vars::CC.name);
        assert_eq!(
            cache_entry(&build, "FORK_TEST_OPTION"),
            None,
            "a removed -D option must not survive in the cache"
        );
        assert_eq!(
            cache_entry(&build, "CMAKE_C_COMPILER").as_deref(),
            Some(other.to_str().unwrap()),
            "the new compiler must be the cache's"
        );
        assert_eq!(
            fs::read_to_string(build.join(CONFIGURE_INPUTS)).unwrap(),
            "second"
        );
    }
}
