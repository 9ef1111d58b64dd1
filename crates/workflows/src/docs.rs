//! Pages generated from the code's own tables.

use crate::workspace::Context;
use crate::workspace::{workspace_root, Result};

/// Writes the pages rendered from the code's own tables.
pub fn write() -> Result<()> {
    let path = workspace_root().join(mlx_patched::VARIABLES_PAGE);
    std::fs::write(&path, mlx_patched::variables_markdown())
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!("{}", path.display());
    let path = workspace_root().join(mlx_fuzz::primitives::PAGE);
    std::fs::write(&path, mlx_fuzz::primitives::markdown())
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!("{}", path.display());
    let path = workspace_root().join(mlx_patched::upstream_fixes::PAGE);
    std::fs::write(&path, mlx_patched::upstream_fixes::markdown())
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!("{}", path.display());
    Ok(())
}
