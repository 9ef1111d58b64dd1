//! The cheap build of a variant on top of its base's build: the few
//! library sources its patches change, compiled in the base's build.

use super::cmake::*;
use super::recipe::*;
use super::types::*;
use crate::progress::Progress;
use crate::source::Upstream;
use crate::{copy_tree, describe, io, lock_file, patch, sync_tree, Error, Fingerprint};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Files that differ between two trees: (changed, added or removed).
pub(crate) fn tree_diff(
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
pub(crate) fn library_sources(build: &Path, src: &Path) -> Result<BTreeSet<PathBuf>, Error> {
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
pub(crate) fn key_on_base(
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
pub(crate) fn build_on_base(
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
    // Compiled in the base's build: its metallib too.
    let artifacts = artifacts_in(
        &dir,
        recipe,
        upstream,
        opts,
        &key,
        Some(base.name.clone()),
        &base.plan,
    );
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
