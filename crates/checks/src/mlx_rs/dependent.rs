//! `tests/mlx-sys-dependent`: a crate that reads the published mlx-sys's
//! `DEP_MLX_*` metadata builds and runs over the drop-in, also vendored and
//! offline.

use mlx_harness::error::{Context, Result};
use mlx_harness::process::{Ran, cargo};
use mlx_harness::paths::target_dir;
use mlx_patched::CommandVars;
use std::process::Command;
use super::judge::Dependent;
use super::project::{vendored_copy, without_network};
/// `tests/mlx-sys-dependent`, a project outside the workspace that adds
/// only the `[patch]` line, as a user gets it: a copy whose every crate is
/// vendored (`cargo vendor`, the source replacement in its own
/// `.cargo/config.toml`), built `--offline` with no network. It must build,
/// run its binary directly (no rpath, no `LD_LIBRARY_PATH`), `cargo run`,
/// `cargo test`, link no shared libmlx, and build again with no warning.
/// Its build script reads `DEP_MLX_INCLUDE`, `DEP_MLX_DEFINES` and
/// `DEP_MLX_VERSION` and compiles C against mlx-c. The patched variant's
/// build is shared through `MLX_PATCHED_BUILD_DIR`, as in the other checks.
pub fn dependent() -> Result<Dependent> {
    let target = target_dir()?.join("mlx-sys-dependent");
    let copy = vendored_copy(
        "mlx-sys-dependent",
        &["src", "csrc", "build.rs", "Cargo.lock"],
    )?;
    let project = |args: &[&str]| {
        let mut c = cargo();
        c.current_dir(&copy)
            .args(args)
            .var(mlx_patched::vars::CARGO_TARGET_DIR, &target)
            .unset(mlx_patched::vars::MLX_SYS_PREFIX)
            .unset(mlx_patched::other_vars::LD_LIBRARY_PATH)
            .unset(mlx_patched::other_vars::RUSTFLAGS);
        if let Ok(o) = mlx_harness::config::options() {
            c.var(mlx_patched::vars::MLX_PATCHED_BUILD_DIR, o.root);
        }
        without_network(&mut c);
        c
    };
    eprintln!(
        "building a vendored copy of tests/mlx-sys-dependent offline (only the [patch] line)"
    );
    mlx_harness::process::run(&mut project(&["build", "--quiet"]))?;
    let exe = target.join("debug/mlx-sys-dependent");
    let direct = Ran::from(
        &Command::new(&exe)
            .unset(mlx_patched::other_vars::LD_LIBRARY_PATH)
            .output()
            .with_context(|| format!("cannot run {}", exe.display()))?,
    );
    println!(
        "{} run directly: {} {}",
        exe.display(),
        direct.status,
        direct.stdout.trim().replace('\n', "; ")
    );
    let dynamic_section = if cfg!(target_os = "linux") {
        Some(Ran::from(
            &Command::new("readelf")
                .arg("-d")
                .arg(&exe)
                .output()
                .context("cannot run readelf")?,
        ))
    } else {
        None
    };
    let mut cargo_runs = Vec::new();
    for args in [&["run", "--quiet"][..], &["test", "--quiet"][..]] {
        let out = project(args).output().context("cannot run cargo")?;
        cargo_runs.push((args[0], Ran::from(&out)));
    }
    let again = Ran::from(&project(&["build"]).output().context("cannot run cargo")?);
    Ok(Dependent {
        exe,
        direct,
        dynamic_section,
        cargo_runs,
        again,
    })
}
