//! What this run builds and expects, read once from the environment that
//! `--base` and the variables set.

use crate::error::{Context, Result};
use crate::paths::target_dir;
use mlx_patched::{Env, Expectations, Options, Progress, Variant};

/// Options for builds run by xtask: progress on stderr, library only.
pub fn options() -> Result<Options> {
    let mut opts = Options::from_env(Env::process(), &target_dir()?, false)?;
    opts.progress = Progress::for_stderr();
    Ok(opts)
}

/// `opts` moved to `base`: the same settings, with that base's builds
/// (`target/mlx/v<release>/`).
pub fn options_on(opts: &Options, base: &'static mlx_patched::pin::Base) -> Result<Options> {
    let mut moved = opts.clone();
    moved.root = opts
        .root
        .parent()
        .context("the build directory's parent")?
        .join(base.dir_name());
    moved.base = base;
    Ok(moved)
}

/// What each variant must show in this run (`MLX_FORK_UPSTREAM_FIXED`
/// included), as the suite's build script reads it.
pub fn expectations() -> Expectations {
    Expectations::from_env(&Env::process())
}

/// The variants this run builds and checks.
pub fn variants_to_build() -> Vec<Variant> {
    expectations().variants()
}
