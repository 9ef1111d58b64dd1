//! Cargo projects outside the workspace (`tests/mlx-rs`,
//! `tests/mlx-sys-dependent`, `crates/mossformer2`) as the checks build
//! them: dependencies fetched once, then offline, with the drop-in's
//! environment, and vendored copies.

use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::process::cargo;
use mlx_harness::paths::{target_dir, workspace_root};
use mlx_patched::CommandVars;
use mlx_patched::{vars, Artifacts, Variant};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The patched prefix, built if needed.
pub fn prefix_of(variant: Variant) -> Result<Artifacts> {
    Ok(mlx_patched::build(variant, &mlx_harness::config::options()?)?)
}

/// The environment that makes mlx-sys link `variant`: the patched variant
/// through mlx-patched (sharing this checkout's build of it), the control
/// through `MLX_SYS_PREFIX`. Both share this checkout's build folder, where
/// mlx-c is compiled once per variant for every project that builds it.
pub fn sys_env(
    variant: Variant,
    mlx: &Artifacts,
) -> Result<Vec<(mlx_patched::Variable, PathBuf)>> {
    let root = mlx_harness::config::options()?.root;
    Ok(if variant == Variant::PATCHED {
        vec![(vars::MLX_PATCHED_BUILD_DIR, root)]
    } else {
        vec![
            (vars::MLX_SYS_PREFIX, mlx.prefix().to_path_buf()),
            (vars::MLX_PATCHED_BUILD_DIR, root),
        ]
    })
}

/// `cargo fetch --locked` of a test project, once per process: the only
/// step of these checks that may use the network. Every build after it is
/// offline.
pub fn fetch_once(manifest: &Path) -> Result<()> {
    static FETCHED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut fetched = FETCHED.lock().unwrap_or_else(|e| e.into_inner());
    if fetched.iter().any(|m| m == manifest) {
        return Ok(());
    }
    mlx_harness::process::run(
        cargo()
            .args(["fetch", "--locked", "--quiet", "--manifest-path"])
            .arg(manifest),
    )?;
    fetched.push(manifest.to_path_buf());
    Ok(())
}

/// `--offline`, and a proxy that refuses every connection, so that any
/// download in the build, a nested `cargo` included, fails it: what a user
/// gets from `cargo build --offline` once the crates are in Cargo's cache.
pub fn without_network(cmd: &mut Command) {
    cmd.arg("--offline")
        .var(
            mlx_patched::other_vars::CARGO_HTTP_PROXY,
            "http://127.0.0.1:9",
        )
        .var(mlx_patched::other_vars::CARGO_NET_RETRY, "0");
}

/// A copy of `tests/<name>` (the listed files) in the target directory,
/// its `[patch]` path made absolute and every crate vendored with `cargo
/// vendor`, which prints the source replacement written to the copy's
/// `.cargo/config.toml`. The one step that may use the network.
pub fn vendored_copy(name: &str, files: &[&str]) -> Result<PathBuf> {
    let from = workspace_root().join("tests").join(name);
    let copy = target_dir()?.join(format!("{name}-vendored"));
    let _ = std::fs::remove_dir_all(&copy);
    std::fs::create_dir_all(copy.join(".cargo"))?;
    for f in files {
        let (a, b) = (from.join(f), copy.join(f));
        if a.is_dir() {
            mlx_patched::copy_tree(&a, &b)?;
        } else {
            std::fs::copy(&a, &b).with_context(|| format!("{}", a.display()))?;
        }
    }
    let manifest = std::fs::read_to_string(from.join("Cargo.toml"))?;
    let sys = workspace_root().join("crates/mlx-sys");
    let patched = manifest.replace(
        "\"../../crates/mlx-sys\"",
        &format!("{:?}", sys.display().to_string()),
    );
    if patched == manifest {
        return Err(anyhow!(
            "tests/{name}/Cargo.toml has no `[patch]` path ../../crates/mlx-sys"
        ));
    }
    std::fs::write(copy.join("Cargo.toml"), patched)?;
    let out = cargo()
        .current_dir(&copy)
        .args(["vendor", "--locked", "vendor"])
        .output()?;
    if !out.status.success() {
        return Err(anyhow!(
            "cargo vendor in {}: {}",
            copy.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::write(copy.join(".cargo/config.toml"), &out.stdout)?;
    Ok(copy)
}
