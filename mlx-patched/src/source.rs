//! Obtaining upstream's tree and identifying it by its git tree id.
//!
//! The published carrier ships MLX in `vendor/mlx` with patches of its own
//! applied, and ships those patches in its `patches/` folder. Upstream's tree
//! is recovered by reversing them, newest first, on a fresh copy; the result
//! must hash to the pinned tree id. The carrier's folder is never modified.

use crate::pin::{self, Base};
use crate::{lock_file, patch, Env, Error};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the upstream tree came from.
#[derive(Clone, Debug)]
pub enum Origin {
    /// A base's carrier with its own patches reversed; both tree ids
    /// (carrier's and upstream's) were checked against the base's row.
    Pinned(&'static Base),
    /// `MLX_SOURCE_DIR`; built whatever it holds, tree id reported.
    Override,
    /// A carrier version other than the pin (`cargo xtask rebase --to`),
    /// recovered the same way; its ids are reported, not checked.
    Carrier(String),
}

#[derive(Clone, Debug)]
pub struct Upstream {
    pub dir: PathBuf,
    /// `git write-tree` of `dir`: upstream's tree.
    pub tree_id: String,
    pub origin: Origin,
    /// For trees recovered from a carrier: what was recovered from.
    pub carrier: Option<CarrierTree>,
}

/// A carrier's MLX tree as published, and the carrier patches reversed on it.
#[derive(Clone, Debug)]
pub struct CarrierTree {
    pub version: String,
    /// `vendor/mlx` in the carrier package (read only).
    pub dir: PathBuf,
    /// `git write-tree` of `dir`.
    pub tree_id: String,
    /// The carrier's own patches, in the order the carrier applies them.
    pub patches: Vec<PathBuf>,
}

pub use pin::sources_manifest;

/// Locates upstream's tree: the override if set, else the base's carrier's
/// tree with the carrier's patches reversed, recovered under `root`.
pub fn locate(env: &Env, base: &'static Base, root: &Path) -> Result<Upstream, Error> {
    if let Some(dir) = env.source_dir() {
        env.track_file(&dir);
        return from_override(dir);
    }
    let package = pinned_package(
        env,
        &pin::carrier_manifest(base),
        pin::CARRIER_CRATE,
        base.carrier_version,
    )?;
    let mut upstream = recover_upstream(
        &package,
        base.carrier_version,
        &root.join("upstream"),
        Some((base.carrier_tree_id, base.upstream_tree_id)),
    )?;
    upstream.origin = Origin::Pinned(base);
    Ok(upstream)
}

/// An upstream checkout named by `MLX_SOURCE_DIR`: any tree id is accepted
/// (and reported), but it must be an MLX source tree.
pub fn from_override(dir: PathBuf) -> Result<Upstream, Error> {
    if !is_mlx_tree(&dir) {
        return Err(Error::new(format!(
            "MLX_SOURCE_DIR={} is not an MLX source tree (expected CMakeLists.txt and mlx/array.h in it)",
            dir.display()
        )));
    }
    let tree_id = tree_id(&dir)?;
    Ok(Upstream {
        dir,
        tree_id,
        origin: Origin::Override,
        carrier: None,
    })
}

fn is_mlx_tree(dir: &Path) -> bool {
    dir.join("mlx/array.h").is_file() && dir.join("CMakeLists.txt").is_file()
}

/// Accepts `dir` only if it hashes to `expected`, naming both ids otherwise.
pub fn verify_tree(dir: &Path, expected: &str, what: &str) -> Result<String, Error> {
    let tree_id = tree_id(dir)?;
    if tree_id != expected {
        return Err(Error::new(format!(
            "refusing {what} in {}: its git tree id is {tree_id}, but the pin says {expected}. \
             Fix the pin in crates/facts/src/bases.rs (cargo xtask rebase writes a base's row) \
             or point MLX_SOURCE_DIR at an upstream checkout.",
            dir.display(),
        )));
    }
    Ok(tree_id)
}

/// The carrier's own patches, in the order it applies them (file name).
pub fn carrier_patches(package: &Path) -> Result<Vec<PathBuf>, Error> {
    patch::series(&package.join(pin::CARRIER_PATCHES_SUBDIR))
}

/// Recovers upstream's tree from the carrier package at `package`: a fresh
/// copy of its `vendor/mlx` with the carrier's patches reversed, newest
/// first, kept in `<dir>/<upstream tree id>`. With `expected` (carrier tree
/// id, upstream tree id), both are checked and a mismatch is an error naming
/// both ids; an earlier recovery that still hashes right is reused.
pub fn recover_upstream(
    package: &Path,
    version: &str,
    dir: &Path,
    expected: Option<(&str, &str)>,
) -> Result<Upstream, Error> {
    let vendored = package.join(pin::CARRIER_SUBDIR);
    if !is_mlx_tree(&vendored) {
        return Err(Error::new(format!(
            "the carrier package {} has no MLX tree at {}",
            package.display(),
            vendored.display()
        )));
    }
    let patches = carrier_patches(package)?;
    fs::create_dir_all(dir)
        .map_err(|e| Error::new(format!("cannot create {}: {e}", dir.display())))?;
    // Several build scripts may recover the tree at once.
    let _lock = lock_file(&dir.join("lock"))?;
    let origin = Origin::Carrier(version.to_string());

    if let Some((_, upstream_id)) = expected {
        let done = dir.join(upstream_id);
        if done.is_dir() && tree_id(&done).ok().as_deref() == Some(upstream_id) {
            let carrier = CarrierTree {
                version: version.to_string(),
                dir: vendored,
                tree_id: expected.unwrap().0.to_string(),
                patches,
            };
            return Ok(Upstream {
                dir: done,
                tree_id: upstream_id.to_string(),
                origin,
                carrier: Some(carrier),
            });
        }
    }
    let carrier_id = match expected {
        Some((carrier_id, _)) => verify_tree(
            &vendored,
            carrier_id,
            &format!("the MLX tree of {} {version}", pin::CARRIER_CRATE),
        )?,
        None => tree_id(&vendored)?,
    };
    let staging = dir.join("staging");
    let _ = fs::remove_dir_all(&staging);
    crate::copy_tree(&vendored, &staging)?;
    for p in patches.iter().rev() {
        patch::reverse(&staging, p).map_err(|e| {
            Error::new(format!(
                "cannot recover upstream's tree: the carrier {} {version} patch {} does not reverse cleanly on its own \
                 vendor/mlx (tree {carrier_id}); nothing was built.\n{e}",
                pin::CARRIER_CRATE,
                p.file_name().unwrap_or_default().to_string_lossy()
            ))
        })?;
    }
    let upstream_id = tree_id(&staging)?;
    if let Some((_, want)) = expected {
        if upstream_id != want {
            let names = crate::patch::names(&patches);
            return Err(Error::new(format!(
                "refusing the recovered upstream tree: the carrier {} {version} (tree {carrier_id}) with its patches \
                 [{}] reversed hashes to {upstream_id}, but the pin says upstream's tree is {want}; nothing was built.",
                pin::CARRIER_CRATE,
                names.join(", "),
            )));
        }
    }
    let done = dir.join(&upstream_id);
    let _ = fs::remove_dir_all(&done);
    fs::rename(&staging, &done).map_err(|e| {
        Error::new(format!(
            "cannot move the recovered tree into {}: {e}",
            done.display()
        ))
    })?;
    let carrier = CarrierTree {
        version: version.to_string(),
        dir: vendored,
        tree_id: carrier_id,
        patches,
    };
    Ok(Upstream {
        dir: done,
        tree_id: upstream_id,
        origin,
        carrier: Some(carrier),
    })
}

/// mlx-c's source tree for `base`: `src/mlx-c` of the published package
/// that carries it (the `mlx-sys` crate mlx-rs depends on), accepted only if
/// it hashes to the base's mlx-c tree id. Read only: it is built out of
/// tree. A base with no mlx-c (none compiles against it) is refused.
pub fn mlxc_source(env: &Env, base: &Base) -> Result<PathBuf, Error> {
    let mlxc = base.mlxc.as_ref().ok_or_else(|| {
        Error::new(format!(
            "no mlx-c release compiles against MLX {} (mlx-c 0.7.0, which mlx-rs 0.33 binds, is MLX 0.32.2's), so mlx-rs's drop-in builds on the default base only: unset MLX_FORK_BASE or pass --base {}",
            base.version,
            crate::pin::Base::default_base().version
        ))
    })?;
    let package = pinned_package(
        env,
        &sources_manifest("mlx-c"),
        pin::MLXC_CRATE,
        mlxc.crate_version,
    )?;
    let dir = package.join(pin::MLXC_SUBDIR);
    if !dir.join("CMakeLists.txt").is_file() || !dir.join("mlx/c/mlx.h").is_file() {
        return Err(Error::new(format!(
            "the package {} has no mlx-c tree at {}",
            package.display(),
            dir.display()
        )));
    }
    verify_tree(
        &dir,
        mlxc.tree_id,
        &format!(
            "mlx-c {} from {} {}",
            mlxc.version,
            pin::MLXC_CRATE,
            mlxc.crate_version
        ),
    )?;
    Ok(dir)
}

/// gguflib's source tree for MLX's GGUF support: the folder of the package
/// that carries it, accepted only if it hashes to the pinned tree id and if
/// `tree` (the MLX tree being built) fetches that very commit.
pub fn gguflib_source(env: &Env, tree: &Path) -> Result<PathBuf, Error> {
    let cmake = tree.join("mlx/io/CMakeLists.txt");
    let text = std::fs::read_to_string(&cmake)
        .map_err(|e| Error::new(format!("cannot read {}: {e}", cmake.display())))?;
    let wanted = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("GIT_TAG "))
        .map(|t| t.trim().trim_end_matches(')').trim());
    if wanted != Some(pin::GGUFLIB_COMMIT) {
        return Err(Error::new(format!(
            "{} fetches gguflib at {wanted:?}, but the pinned gguflib is commit {}: move the gguflib pin (crates/facts/src/bases.rs) with the MLX tree",
            cmake.display(),
            pin::GGUFLIB_COMMIT
        )));
    }
    let package = pinned_package(
        env,
        &sources_manifest("gguflib"),
        pin::GGUFLIB_CRATE,
        pin::GGUFLIB_CRATE_VERSION,
    )?;
    let dir = package.join(pin::GGUFLIB_SUBDIR);
    verify_tree(
        &dir,
        pin::GGUFLIB_TREE_ID,
        &format!(
            "gguflib {} from {} {}",
            &pin::GGUFLIB_COMMIT[..12],
            pin::GGUFLIB_CRATE,
            pin::GGUFLIB_CRATE_VERSION
        ),
    )?;
    Ok(dir)
}

/// The package pinned by `manifest` (`sources/<what>/Cargo.toml`), the
/// manifest and its lock file tracked as build inputs.
fn pinned_package(env: &Env, manifest: &Path, name: &str, version: &str) -> Result<PathBuf, Error> {
    env.track_file(manifest);
    env.track_file(&manifest.with_file_name("Cargo.lock"));
    published_package(&env.cargo(), manifest, name, version, true)
}

/// Finds (and on first use downloads) a published package through `cargo
/// metadata` on `manifest`, which declares it at `version`, and returns its
/// folder. With `locked`, the manifest's lock file must already pin it, so
/// the package's checksum is the one committed here.
///
/// The package is outside the caller's dependency graph (see
/// `sources/mlx-<version>/Cargo.toml`), so the caller's `--offline` cannot reach this
/// nested `cargo`. It looks in Cargo's cache first (`--offline`), and only
/// a package not there yet is downloaded, unless the caller's environment
/// says offline (`CARGO_NET_OFFLINE`), where the error says how to fetch it.
pub fn published_package(
    cargo: &std::ffi::OsStr,
    manifest: &Path,
    name: &str,
    version: &str,
    locked: bool,
) -> Result<PathBuf, Error> {
    let metadata = |offline: bool| {
        let mut cmd = Command::new(cargo);
        cmd.args(["metadata", "--format-version", "1", "--manifest-path"])
            .arg(manifest);
        if locked {
            cmd.arg("--locked");
        }
        if offline {
            cmd.arg("--offline");
        }
        cmd.output().map_err(|e| {
            Error::new(format!(
                "cannot run `cargo metadata` to fetch the source package {name} {version}: {e}"
            ))
        })
    };
    let mut out = metadata(true)?;
    if !out.status.success() {
        if crate::Env::process().cargo_net_offline() {
            return Err(Error::new(format!(
                "the source package {name} {version} is not in Cargo's cache, and CARGO_NET_OFFLINE forbids fetching it. Fetch it once with network: `cargo fetch --locked --manifest-path {}`\n{}",
                manifest.display(),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        out = metadata(false)?;
    }
    if !out.status.success() {
        return Err(Error::new(format!(
            "`cargo metadata` failed while fetching the source package {name} {version} ({}):\n{}",
            manifest.display(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| Error::new(format!("cannot parse `cargo metadata` output: {e}")))?;
    let found = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == name && p["version"] == version)
        .and_then(|p| p["manifest_path"].as_str())
        .map(PathBuf::from)
        .ok_or_else(|| {
            Error::new(format!(
                "`cargo metadata` does not list {name} {version}; is it declared in {}?",
                manifest.display()
            ))
        })?;
    Ok(found.parent().unwrap().to_path_buf())
}

/// The carrier package at `version`, declared in `manifest` (a rebase's
/// throwaway manifest: not locked).
pub fn carrier_dir(
    cargo: &std::ffi::OsStr,
    manifest: &Path,
    version: &str,
) -> Result<PathBuf, Error> {
    published_package(cargo, manifest, pin::CARRIER_CRATE, version, false)
}

/// `git write-tree` of a directory, computed in a throwaway git dir so the
/// tree itself (and any repository around it) is left untouched.
pub fn tree_id(dir: &Path) -> Result<String, Error> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let scratch = std::env::temp_dir().join(format!(
        "mlx-patched-tree-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&scratch);
    let git = |args: &[&str]| -> Result<String, Error> {
        crate::git::run(
            crate::git::command(dir)
                .arg("--git-dir")
                .arg(&scratch)
                .arg("--work-tree")
                .arg(dir)
                .args([
                    "-c",
                    "core.excludesFile=/dev/null",
                    "-c",
                    "core.fileMode=true",
                ])
                .args(args),
        )
        .map_err(|e| Error::new(format!("{e}\n(git is needed to hash the MLX tree)")))
    };
    let result = (|| {
        crate::git::run(
            crate::git::command(dir)
                .args(["init", "-q", "--bare"])
                .arg(&scratch),
        )
        .map_err(|e| Error::new(format!("{e}\n(git is needed to hash the MLX tree)")))?;
        git(&["add", "-A", "."])?;
        git(&["write-tree"])
    })();
    let _ = fs::remove_dir_all(&scratch);
    result
}

/// The release an MLX tree declares in `mlx/version.h` ("0.32.2").
pub fn version_of(tree: &Path) -> Result<String, Error> {
    let header = tree.join("mlx/version.h");
    let text = fs::read_to_string(&header)
        .map_err(|e| Error::new(format!("cannot read {}: {e}", header.display())))?;
    let part = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("#define MLX_VERSION_{name} ")))
            .map(|v| v.trim().to_string())
            .ok_or_else(|| {
                Error::new(format!(
                    "{} defines no MLX_VERSION_{name}",
                    header.display()
                ))
            })
    };
    Ok(format!(
        "{}.{}.{}",
        part("MAJOR")?,
        part("MINOR")?,
        part("PATCH")?
    ))
}
