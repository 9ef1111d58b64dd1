//! Where a rebase keeps its work (`target/rebase/<label>/`) and builds the
//! target's variants.

use mlx_harness::error::{Context, Result};
use mlx_harness::paths::target_dir;
use mlx_patched::CommandVars;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `cargo xtask rebase --to <label>` works, and `cargo xtask fuzz
/// --target <label>` builds the target untouched.
pub fn work_dir(label: &str) -> Result<PathBuf> {
    Ok(rebase_dir()?.join(label))
}

pub(crate) fn rebase_dir() -> Result<PathBuf> {
    Ok(target_dir()?.join("rebase"))
}

/// The MLX build root of a rebase's folder `work` (its variants with the
/// replayed series).
pub(crate) fn series_root(work: &Path) -> PathBuf {
    work.join("mlx")
}

/// The MLX build root of the target untouched (an empty series): the
/// rebase's control, and the fuzzer's `--target` builds.
pub fn upstream_root(work: &Path) -> PathBuf {
    series_root(&work.join("upstream"))
}

/// Both build roots of every rebase folder there is now: MLX builds there
/// are where the layout puts them (`mlx_harness::builds`).
pub fn existing_build_roots() -> Result<Vec<PathBuf>> {
    let parent = rebase_dir()?;
    let mut roots = Vec::new();
    if parent.is_dir() {
        let entries =
            std::fs::read_dir(&parent).with_context(|| format!("{}", parent.display()))?;
        for entry in entries {
            let work = entry?.path();
            if work.is_dir() {
                roots.push(series_root(&work));
                roots.push(upstream_root(&work));
            }
        }
    }
    roots.sort();
    Ok(roots)
}

/// The environment that points a build at the target tree and series.
pub(crate) fn target_env(cmd: &mut Command, tree: &Path, series: &Path, work: &Path) {
    cmd.var(mlx_patched::vars::MLX_SOURCE_DIR, tree)
        .var(mlx_patched::vars::MLX_PATCHED_SERIES_DIR, series)
        .var(mlx_patched::vars::MLX_PATCHED_BUILD_DIR, series_root(work));
}

/// Builds `variant` of the upstream `tree` with `series`, under `work/mlx`.
pub(crate) fn build_variant(
    variant: mlx_patched::Variant,
    tree: &Path,
    series: &Path,
    work: &Path,
) -> Result<mlx_patched::Artifacts> {
    let mut opts = mlx_harness::config::options()?;
    opts.root = series_root(work);
    opts.patches_dir = series.to_path_buf();
    let upstream = mlx_patched::from_override(tree.to_path_buf())?;
    Ok(mlx_patched::build_from(variant, &upstream, &opts)?)
}
