//! Obtaining the upstream tree and identifying it by its git tree id.

use crate::{pin, Env, Error};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the upstream tree came from.
#[derive(Clone, Debug)]
pub enum Origin {
    /// The pinned carrier crate; its tree id was checked against the pin.
    Pinned,
    /// `MLX_SOURCE_DIR`; built whatever it holds, tree id reported.
    Override,
}

#[derive(Clone, Debug)]
pub struct Upstream {
    pub dir: PathBuf,
    pub tree_id: String,
    pub origin: Origin,
}

/// Locates the upstream tree: the override if set, else the pinned carrier,
/// whose tree id must equal the pin.
pub fn locate(env: &Env, workspace_manifest: &Path) -> Result<Upstream, Error> {
    if let Some(dir) = env.var_os("MLX_SOURCE_DIR") {
        return from_override(PathBuf::from(dir));
    }
    let cargo = env.var_os("CARGO").unwrap_or_else(|| "cargo".into());
    verify_pinned(carrier_dir(&cargo, workspace_manifest, pin::CARRIER_VERSION)?, pin::UPSTREAM_TREE_ID)
}

/// An upstream checkout named by `MLX_SOURCE_DIR`: any tree id is accepted
/// (and reported), but it must be an MLX source tree.
pub fn from_override(dir: PathBuf) -> Result<Upstream, Error> {
    if !dir.join("mlx/array.h").is_file() || !dir.join("CMakeLists.txt").is_file() {
        return Err(Error::new(format!(
            "MLX_SOURCE_DIR={} is not an MLX source tree (expected CMakeLists.txt and mlx/array.h in it)",
            dir.display()
        )));
    }
    let tree_id = tree_id(&dir)?;
    Ok(Upstream { dir, tree_id, origin: Origin::Override })
}

/// The carrier's tree, accepted only if it hashes to the pinned tree id.
pub fn verify_pinned(dir: PathBuf, expected: &str) -> Result<Upstream, Error> {
    let tree_id = tree_id(&dir)?;
    if tree_id != expected {
        return Err(Error::new(format!(
            "refusing the upstream tree in {}: its git tree id is {tree_id}, but the pin (MLX v{}) says {}. \
             The carrier {} {} does not hold the pinned tree; fix the pin in mlx-patched/src/pin.rs \
             or point MLX_SOURCE_DIR at an upstream checkout.",
            dir.display(),
            pin::UPSTREAM_VERSION,
            expected,
            pin::CARRIER_CRATE,
            pin::CARRIER_VERSION
        )));
    }
    Ok(Upstream { dir, tree_id, origin: Origin::Pinned })
}

/// Finds (and on first use downloads) the carrier package through `cargo metadata`.
/// `manifest` must declare the carrier at `version` (for the pin, mlx-patched's
/// own manifest; for a rebase dry run, a throwaway one).
pub fn carrier_dir(cargo: &std::ffi::OsStr, manifest: &Path, version: &str) -> Result<PathBuf, Error> {
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(manifest)
        .output()
        .map_err(|e| Error::new(format!("cannot run `cargo metadata` to fetch the MLX source carrier: {e}")))?;
    if !out.status.success() {
        return Err(Error::new(format!(
            "`cargo metadata` failed while fetching the MLX source carrier {} {version}:\n{}",
            pin::CARRIER_CRATE,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| Error::new(format!("cannot parse `cargo metadata` output: {e}")))?;
    let manifest = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == pin::CARRIER_CRATE && p["version"] == version)
        .and_then(|p| p["manifest_path"].as_str())
        .map(PathBuf::from)
        .ok_or_else(|| {
            Error::new(format!(
                "`cargo metadata` does not list {} {version}; is it declared in {}?",
                pin::CARRIER_CRATE,
                manifest.display()
            ))
        })?;
    let dir = manifest.parent().unwrap().join(pin::CARRIER_SUBDIR);
    if !dir.join("mlx/array.h").is_file() {
        return Err(Error::new(format!("the carrier package has no MLX tree at {}", dir.display())));
    }
    Ok(dir)
}

/// `git write-tree` of a directory, computed in a throwaway git dir so the
/// tree itself (and any repository around it) is left untouched.
pub fn tree_id(dir: &Path) -> Result<String, Error> {
    let scratch = std::env::temp_dir().join(format!("mlx-patched-tree-{}-{:?}", std::process::id(), std::thread::current().id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let git = |args: &[&str]| -> Result<String, Error> {
        let out = Command::new("git")
            .arg("--git-dir")
            .arg(&scratch)
            .arg("--work-tree")
            .arg(dir)
            .args(["-c", "core.autocrlf=false", "-c", "core.excludesFile=/dev/null", "-c", "core.fileMode=true"])
            .args(args)
            .output()
            .map_err(|e| Error::new(format!("cannot run git (needed to hash the MLX tree): {e}")))?;
        if !out.status.success() {
            return Err(Error::new(format!("git {} failed in {}: {}", args.join(" "), dir.display(), String::from_utf8_lossy(&out.stderr))));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let result = (|| {
        let init = Command::new("git").args(["init", "-q", "--bare"]).arg(&scratch).output();
        if !init.map(|o| o.status.success()).unwrap_or(false) {
            return Err(Error::new("cannot run `git init` (git is needed to hash the MLX tree)"));
        }
        git(&["add", "-A", "."])?;
        git(&["write-tree"])
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// The release an MLX tree declares in `mlx/version.h` ("0.32.2").
pub fn version_of(tree: &Path) -> Result<String, Error> {
    let header = tree.join("mlx/version.h");
    let text = std::fs::read_to_string(&header).map_err(|e| Error::new(format!("cannot read {}: {e}", header.display())))?;
    let part = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("#define MLX_VERSION_{name} ")))
            .map(|v| v.trim().to_string())
            .ok_or_else(|| Error::new(format!("{} defines no MLX_VERSION_{name}", header.display())))
    };
    Ok(format!("{}.{}.{}", part("MAJOR")?, part("MINOR")?, part("PATCH")?))
}
