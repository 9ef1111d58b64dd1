//! The MLX builds themselves: a variant's install prefix, MLX's own suite.

use mlx_harness::config::options;
use mlx_harness::process::run;
use mlx_harness::error::Result;
use mlx_patched::Variant;
use std::process::Command;

/// Prints a variant's install prefix, building it if needed.
pub fn prefix(variant: Variant) -> Result<()> {
    let mlx = mlx_patched::build(variant, &options()?)?;
    println!("{}", mlx.prefix().display());
    Ok(())
}

/// MLX's doctest suite of one variant, as built with that variant.
pub fn mlx_tests(variant: Variant, doctest_args: &[String]) -> Result<()> {
    let mut opts = options()?;
    opts.tests = true;
    let mlx = mlx_patched::build(variant, &opts)?;
    run(Command::new(mlx.mlx_tests()).args(doctest_args))
}
