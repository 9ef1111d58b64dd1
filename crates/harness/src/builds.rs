//! MLX is built once per variant and base. Every build the suite starts
//! goes to `<root>/<variant>[-<suffix>]/build`, the root being the base's
//! (`<target>/mlx/v<release>`, or `MLX_PATCHED_BUILD_DIR`). A build found
//! anywhere else under the target directory or the root is a second build
//! of something already built: a root joined twice (`v0.32.2/v0.32.2`, which
//! cost a cold run its budget once), or a build script building MLX in
//! Cargo's own folders. `cargo xtask test` ends with this claim.

use crate::error::{Context, Result};
use std::path::{Path, PathBuf};

/// Every CMake build of MLX itself (`CMAKE_PROJECT_NAME` `mlx`; the Python
/// bindings and mlx-c are projects of their own) under `dirs`.
pub fn mlx_builds(dirs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let mut stack: Vec<PathBuf> = dirs.iter().filter(|d| d.is_dir()).cloned().collect();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(dir) = stack.pop() {
        if !seen.insert(dir.clone()) {
            continue;
        }
        let entries = std::fs::read_dir(&dir).with_context(|| format!("{}", dir.display()))?;
        for entry in entries {
            let entry = entry?;
            let kind = entry.file_type()?;
            let path = entry.path();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() && entry.file_name() == "CMakeCache.txt" {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                if text
                    .lines()
                    .any(|l| l.trim() == "CMAKE_PROJECT_NAME:STATIC=mlx")
                {
                    found.push(path);
                }
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The builds of `found` that are not `<root>/<one folder>/build/CMakeCache.txt`
/// for one of `roots` (each base's root), with a folder that is not itself
/// a base's.
pub fn strays(found: &[PathBuf], roots: &[PathBuf]) -> Vec<PathBuf> {
    let is_base_dir = |name: &str| {
        mlx_patched::pin::BASES
            .iter()
            .any(|b| b.dir_name() == name)
    };
    found
        .iter()
        .filter(|cache| {
            !roots.iter().any(|root| {
                let Ok(rel) = cache.strip_prefix(root) else {
                    return false;
                };
                let parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                matches!(parts.as_slice(), [variant, build, file]
                    if build == "build" && file == "CMakeCache.txt" && !is_base_dir(variant))
            })
        })
        .cloned()
        .collect()
}

/// The claim: every MLX build under the target directory and the base
/// roots is one the layout names. The builds it saw, or the strays.
pub fn built_once(target: &Path, roots: &[PathBuf]) -> Result<std::result::Result<usize, Vec<PathBuf>>> {
    let mut dirs = vec![target.to_path_buf()];
    dirs.extend(roots.iter().filter(|r| !r.starts_with(target)).cloned());
    let found = mlx_builds(&dirs)?;
    let bad = strays(&found, roots);
    Ok(if bad.is_empty() { Ok(found.len()) } else { Err(bad) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn a_build_where_the_layout_puts_it_is_no_stray() {
        let roots = [p("/t/mlx/v0.32.2"), p("/t/mlx/v0.32.4")];
        let found = [
            p("/t/mlx/v0.32.2/patched/build/CMakeCache.txt"),
            p("/t/mlx/v0.32.2/pristine-asan/build/CMakeCache.txt"),
            p("/t/mlx/v0.32.4/pristine/build/CMakeCache.txt"),
        ];
        assert!(strays(&found, &roots).is_empty());
    }

    /// The double build once seen: a root given back with the base joined
    /// again; and MLX built by a build script in Cargo's folders.
    #[test]
    fn a_second_build_of_a_variant_is_a_stray() {
        let roots = [p("/t/mlx/v0.32.2")];
        let nested = p("/t/mlx/v0.32.2/v0.32.2/patched/build/CMakeCache.txt");
        let cargo = p("/t/debug/build/mlx-sys-1234/out/mlx/build/CMakeCache.txt");
        let deeper = p("/t/mlx/v0.32.2/patched/build/sub/build/CMakeCache.txt");
        let found = [
            p("/t/mlx/v0.32.2/patched/build/CMakeCache.txt"),
            nested.clone(),
            cargo.clone(),
            deeper.clone(),
        ];
        assert_eq!(strays(&found, &roots), vec![nested, cargo, deeper]);
    }

    #[test]
    fn only_mlx_s_own_project_counts() {
        let dir = std::env::temp_dir().join(format!("mlx-builds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (sub, project) in [("a/build", "mlx"), ("b/build", "mlx_fork_python"), ("c", "mlxc")] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
            std::fs::write(
                dir.join(sub).join("CMakeCache.txt"),
                format!("# x\nCMAKE_PROJECT_NAME:STATIC={project}\n"),
            )
            .unwrap();
        }
        let found = mlx_builds(std::slice::from_ref(&dir)).unwrap();
        assert_eq!(found, vec![dir.join("a/build/CMakeCache.txt")]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
