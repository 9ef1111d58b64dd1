//! Parsers for the command line's values, and `--base`.

use crate::error::{anyhow, Result};
use mlx_patched::Variant;

/// A variant by name, for command lines.
pub fn variant(name: &str) -> Result<Variant> {
    Ok(Variant::parse(name)?)
}

/// A base by release, for command lines (`0.32.4`).
pub fn base(name: &str) -> Result<&'static mlx_patched::pin::Base> {
    Ok(mlx_patched::pin::Base::parse(name)?)
}

/// `--base`'s help, from the table of bases.
pub fn base_help() -> String {
    let names: Vec<String> = mlx_patched::pin::BASES
        .iter()
        .map(|b| {
            if b.is_default() {
                format!("{} (the default)", b.version)
            } else {
                b.version.to_string()
            }
        })
        .collect();
    format!(
        "The upstream release to build on: {} (sets {} for every step)",
        names.join(" or "),
        mlx_patched::vars::MLX_FORK_BASE.name
    )
}

/// Makes `base` this process's base, and so its children's: `--base` sets
/// `MLX_FORK_BASE`, the one place the base is read from. Called once, first.
pub fn select_base(base: &mlx_patched::pin::Base) {
    std::env::set_var(mlx_patched::vars::MLX_FORK_BASE.name, base.version);
}

/// A sanitizer by name, for command lines.
/// A sanitizer that reports (`cargo xtask sanitize`): the coverage build
/// only counts, and is the fuzzer's ([`instrumentation`]).
pub fn sanitizer(name: &str) -> Result<mlx_patched::Sanitizer> {
    match mlx_patched::Sanitizer::parse(name)? {
        mlx_patched::Sanitizer::Coverage => Err(anyhow!(
            "the coverage build reports nothing to judge: `cargo xtask fuzz --sanitizer coverage` and `cargo xtask fuzz coverage` use it"
        )),
        s => Ok(s),
    }
}

/// Any instrumentation of the fuzzer's worker: a sanitizer or coverage.
pub fn instrumentation(name: &str) -> Result<mlx_patched::Sanitizer> {
    Ok(mlx_patched::Sanitizer::parse(name)?)
}
