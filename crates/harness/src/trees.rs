//! The upstream tree of a target: a checkout, or a carrier version's tree.

use crate::error::{anyhow, Result};
use mlx_patched::pin;
use std::path::Path;

/// The target tree: a directory, or upstream's tree recovered from a
/// carrier version (its own patches reversed, as for the pin).
pub fn target_tree(to: &str, work: &Path) -> Result<mlx_patched::Upstream> {
    let dir = Path::new(to);
    if dir.is_dir() {
        return Ok(mlx_patched::from_override(dir.to_path_buf())?);
    }
    if !to.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(anyhow!(
            "`{to}` is neither a directory nor a version of {}",
            pin::CARRIER_CRATE
        ));
    }
    let probe = work.join("carrier");
    std::fs::create_dir_all(probe.join("src"))?;
    std::fs::write(probe.join("src/lib.rs"), "")?;
    std::fs::write(
        probe.join("Cargo.toml"),
        format!(
            "[package]\nname = \"rebase-probe\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[workspace]\n\n\
             [target.'cfg(any())'.dependencies]\n{} = \"={to}\"\n",
            pin::CARRIER_CRATE
        ),
    )
    ?;
    let package = mlx_patched::carrier_dir(
        &mlx_patched::Env::process().cargo(),
        &probe.join("Cargo.toml"),
        to,
    )?;
    Ok(mlx_patched::recover_upstream(
        &package,
        to,
        &work.join("upstream-tree"),
        None,
    )?)
}
