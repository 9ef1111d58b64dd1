//! The claim that MLX was built once per variant and base, over every root
//! a build can have: each base's, this run's, and a rebase's or a `fuzz
//! --target` campaign's (`mlx_harness::builds` holds the rule).

use mlx_harness::error::Result;
use mlx_harness::tally::Tally;

/// Every MLX build under the target directory is `<root>/<variant>/build`.
pub fn check() -> Result<Tally> {
    let opts = mlx_harness::config::options()?;
    let target = mlx_harness::paths::target_dir()?;
    let mut roots: Vec<std::path::PathBuf> = mlx_patched::pin::BASES
        .iter()
        .map(|b| target.join("mlx").join(b.dir_name()))
        .collect();
    roots.push(opts.root.clone());
    roots.extend(crate::rebase::dirs::existing_build_roots()?);
    let mut t = Tally::new();
    match mlx_harness::builds::built_once(&target, &roots)? {
        Ok(n) => {
            println!("MLX built once per variant and base: {n} builds, each in <root>/<variant>/build");
            t.check(true, String::new);
        }
        Err(strays) => t.check(false, || {
            format!("MLX built again outside <root>/<variant>/build: {strays:?}")
        }),
    }
    Ok(t)
}
