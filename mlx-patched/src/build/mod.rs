//! The build of a variant: what it does on each host, as data (`plan`),
//! its recipe and cache key (`recipe`), CMake (`cmake`), the cheap build
//! on a base's build (`on_base`), and the types a build is asked for and
//! gives (`types`). The entry points are here.

mod cmake;
mod on_base;
pub mod plan;
mod recipe;
mod types;

pub(crate) use cmake::{configure, configure_inputs, run_cmake};
pub use recipe::build_inputs;
pub use plan::{Backend, BuildPlan, Host, Layout, LinkKind};
pub use types::{print_rpath_of_dependency, Artifacts, Options, Sanitizer};

use crate::progress::Progress;
use crate::source::Upstream;
use crate::system::check_system;
use mlx_facts::variants::Variant;
use crate::{describe, io, lock_file, Error};
use cmake::*;
use on_base::*;
use recipe::*;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

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

pub(crate) fn build_recipe(
    recipe: &Recipe,
    upstream: &Upstream,
    opts: &Options,
) -> Result<Artifacts, Error> {
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
    let lib_layout = layout(recipe, upstream, opts, &dir, false)?;
    let lib_args = configure_args(upstream, opts, &lib_layout)?;
    let lib_key = cache_key(recipe, upstream, &lib_args, opts, false)?;
    // The tests change no output of the library's: its plan serves both.
    let lib_plan = plan::plan(&opts.host, &lib_layout);
    let with_tests = || -> Result<(Vec<String>, String), Error> {
        let tested = Layout {
            tests: true,
            ..lib_layout.clone()
        };
        let args = configure_args(upstream, opts, &tested)?;
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
            let artifacts =
                artifacts_in(&dir, recipe, upstream, opts, &found.key, None, &lib_plan);
            if !opts.tests || (tested.is_some() && found.tests) {
                return Ok(artifacts);
            }
            // The library is current; only MLX's tests are missing. Configured
            // in place when they are not yet, they compile alone.
            check_system(opts.backend(), true)?;
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
    let artifacts = artifacts_in(&dir, recipe, upstream, opts, &key, None, &lib_plan);
    check_system(opts.backend(), tests)?;
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
