//! What a variant is made of (its recipe), and the key and stamp that
//! say when a build of it is current.

use super::cmake::*;
use super::plan::{self, Backend, BuildPlan, Layout};
use crate::source::Upstream;
use crate::system::{self};
use mlx_facts::variants::{Variant, VARIANTS};
use crate::{describe, io, patch, Error, Fingerprint};
use std::fs;
use std::path::{Path, PathBuf};

/// Bumped whenever the build logic changes what ends up in a prefix.
pub(crate) const BUILD_LOGIC_VERSION: u32 = 5;
use super::types::*;

/// What a build is made of: a name (its directory) and the patches applied
/// to the upstream tree, in order, each limited to some paths or not.
pub(crate) struct Recipe {
    pub(crate) name: String,
    pub(crate) patches: Vec<(PathBuf, Option<&'static str>)>,
    /// The variant this one extends, and how many of `patches` are its own.
    pub(crate) base: Option<(Variant, usize)>,
}

pub(crate) fn recipe(variant: Variant, opts: &Options) -> Result<Recipe, Error> {
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
    let all = opts.series()?;
    if opts.patches_dir == patch::series_dir() {
        // The base's ports, so that an added or removed port counts.
        opts.env
            .track_file(&patch::ports_dir(&opts.patches_dir, opts.base.version));
    }
    for p in all.iter().chain(&opts.sanitizer.map(|s| s.build_files()).unwrap_or_default()) {
        opts.env.track_file(p);
    }
    let mut series = patch::fix_series(&all)?;
    for stem in variant.leaves_out {
        let before = series.len();
        series.retain(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(stem))
        });
        if series.len() == before {
            return Err(Error::new(format!(
                "variant {variant} leaves out `{stem}*`, which is no patch of {}",
                opts.patches_dir.display()
            )));
        }
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
            patch::fork_only(&all)?
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
pub(crate) struct Stamp {
    pub(crate) key: String,
    pub(crate) tests: bool,
}

pub(crate) fn read_stamp(path: &Path) -> Option<Stamp> {
    let text = fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    let key = lines.next()?.to_string();
    let tests = lines.next() == Some("tests yes");
    Some(Stamp { key, tests })
}

pub(crate) fn write_stamp(path: &Path, key: &str, tests: bool, about: &str) -> Result<(), Error> {
    fs::write(
        path,
        format!("{key}\ntests {}\n{about}", if tests { "yes" } else { "no" }),
    )
    .map_err(io("cannot write the stamp"))
}

/// Everything that changes what a build produces, hashed: the logic
/// version, upstream's tree, every patch's bytes, the CMake arguments, the
/// compilers and CMake, and the system packages standing in for MLX's
/// downloaded dependencies.
pub(crate) fn cache_key(
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
    for f in opts.sanitizer.map(|s| s.build_files()).unwrap_or_default() {
        key.file(&f)?;
    }
    key.text("configure", configure_inputs(args, opts, tests));
    Ok(key.finish())
}

/// Where a variant in `dir` puts its outputs, with MLX's tests configured
/// or not. A Metal build's metallib goes to a folder of the user's named
/// by [`metallib_key`] (see `plan::metallib_dir`); without one, a warning
/// says that an installed binary will not find it.
pub(crate) fn layout(
    recipe: &Recipe,
    upstream: &Upstream,
    opts: &Options,
    dir: &Path,
    tests: bool,
) -> Result<Layout, Error> {
    // Only a Metal build reads the homes: no rerun trigger elsewhere.
    let metallib_dir = if opts.backend() == Backend::Metal {
        let found = plan::metallib_dir(
            opts.env.cargo_home().as_deref(),
            opts.env.home().as_deref(),
            opts.base.version,
            &metallib_key(recipe, upstream, opts)?,
        );
        if found.is_none() && opts.env.is_build_script() {
            println!("cargo:warning=neither CARGO_HOME nor HOME is an absolute path: mlx.metallib stays in the build folder, and a binary finds it only while that folder exists or beside itself");
        }
        found
    } else {
        None
    };
    Ok(Layout {
        prefix: dir.join("prefix"),
        build: dir.join("build"),
        tests,
        metallib_dir,
    })
}

/// What a metallib is built from: upstream's tree, the patches, and the
/// options that change its kernels. Not the paths of the build, so that
/// every build of the same inputs (each `cargo install` in its own
/// temporary target directory) names the same file.
pub(crate) fn metallib_key(
    recipe: &Recipe,
    upstream: &Upstream,
    opts: &Options,
) -> Result<String, Error> {
    let mut key = Fingerprint::new("metallib 1");
    key.text("tree", &upstream.tree_id);
    for (p, only) in &recipe.patches {
        key.file(p)?.text("only", format!("{only:?}"));
    }
    key.text("jit", opts.host.metal_jit)
        .text("sanitizer", format!("{:?}", opts.sanitizer));
    for a in &opts.extra_cmake_args {
        key.text("arg", a);
    }
    Ok(key.finish())
}

/// The CMake arguments of a variant laid out as `layout`: the host's,
/// gguflib's source, and the system packages that stand in for MLX's
/// downloads.
pub(crate) fn configure_args(
    upstream: &Upstream,
    opts: &Options,
    layout: &Layout,
) -> Result<Vec<String>, Error> {
    let mut args = cmake_args(opts, layout);
    // GGUF support compiles gguflib in: from the pinned package, not git.
    let gguflib = crate::source::gguflib_source(&opts.env, &upstream.dir)?;
    args.push(format!(
        "-DFETCHCONTENT_SOURCE_DIR_GGUFLIB={}",
        gguflib.display()
    ));
    args.extend(system::offline_dep_dirs(
        &opts.root,
        opts.backend(),
        layout.tests,
    )?);
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
    let layout = layout(&recipe, upstream, opts, &variant_dir(opts, &recipe.name), true)?;
    let args: Vec<String> = configure_args(upstream, opts, &layout)?
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

/// What a variant directory holds once built (`cached` until rebuilt).
pub(crate) fn artifacts_in(
    dir: &Path,
    recipe: &Recipe,
    upstream: &Upstream,
    opts: &Options,
    key: &str,
    built_on: Option<String>,
    plan: &BuildPlan,
) -> Artifacts {
    let prefix = dir.join("prefix");
    Artifacts {
        name: recipe.name.clone(),
        plan: plan.clone(),
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

pub(crate) fn variant_dir(opts: &Options, name: &str) -> PathBuf {
    let mut dir = name.to_string();
    if opts.backend() == Backend::Cuda {
        dir += "-cuda";
    }
    if let Some(s) = opts.sanitizer {
        dir = format!("{dir}-{}", s.suffix());
    }
    opts.root.join(dir)
}

pub(crate) fn about(upstream: &Upstream, recipe: &Recipe) -> String {
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
