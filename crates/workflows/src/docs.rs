//! Pages and fragments generated from the code's own tables.
//!
//! A fragment is a figure or a phrase inside a hand-written page that a
//! table decides: the series of a base, how many of upstream's fixes the
//! default base carries. It sits between `<!-- facts:<key> -->` and
//! `<!-- /facts -->`, `cargo xtask docs` fills it, and the tidy test fails
//! where it is not what the table says now.

use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::paths::workspace_root;
use mlx_patched::pin::{Base, BASES};
use mlx_patched::upstream_fixes::{Area, Carried, FIXES};

/// The hand-written pages that hold fragments.
pub const FRAGMENT_PAGES: &[&str] = &["README.md", "docs/bases.md", "tests/README.md"];

const OPEN: &str = "<!-- facts:";
const CLOSE: &str = "<!-- /facts -->";

/// Writes the pages rendered from the code's own tables, and fills the
/// fragments of the hand-written ones.
pub fn write() -> Result<()> {
    let pages = [
        (mlx_patched::VARIABLES_PAGE, mlx_patched::variables_markdown()),
        (mlx_fuzz::primitives::PAGE, mlx_fuzz::primitives::markdown()),
        (
            mlx_patched::upstream_fixes::PAGE,
            mlx_patched::upstream_fixes::markdown(),
        ),
    ];
    for (page, text) in pages {
        let path = workspace_root().join(page);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        println!("{}", path.display());
    }
    for page in FRAGMENT_PAGES {
        let path = workspace_root().join(page);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let filled = fill(&text).with_context(|| format!("{}", path.display()))?;
        if filled != text {
            std::fs::write(&path, filled)
                .with_context(|| format!("cannot write {}", path.display()))?;
            println!("{}", path.display());
        }
    }
    Ok(())
}

/// `text` with every fragment rendered anew.
pub fn fill(text: &str) -> Result<String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(OPEN) {
        let after = &rest[i + OPEN.len()..];
        let end = after
            .find(" -->")
            .ok_or_else(|| anyhow!("a fragment's opening `{OPEN}` has no ` -->`"))?;
        let key = &after[..end];
        let body = &after[end + " -->".len()..];
        let close = body
            .find(CLOSE)
            .ok_or_else(|| anyhow!("the fragment `{key}` has no `{CLOSE}`"))?;
        out.push_str(&rest[..i + OPEN.len() + end + " -->".len()]);
        out.push_str(&render(key)?);
        out.push_str(CLOSE);
        rest = &body[close + CLOSE.len()..];
    }
    out.push_str(rest);
    Ok(out)
}

/// One fragment's text.
pub fn render(key: &str) -> Result<String> {
    let carried: Vec<&str> = FIXES
        .iter()
        .filter_map(|f| match f.carried {
            Carried::Backport(stem) => Some(stem),
            _ => None,
        })
        .collect();
    let count = |areas: &[Area]| FIXES.iter().filter(|f| areas.contains(&f.area)).count();
    Ok(match key.split_once(' ') {
        Some(("series", version)) => series(Base::parse(version)?)?,
        None if key == "carried-count" => carried.len().to_string(),
        None if key == "carried-range" => ranges(&carried),
        None if key == "slow-checks" => format!("\n{}", crate::claims::table()),
        None if key == "fix-counts" => format!(
            "{}: {} in the core and the CPU backend, {} in the Python bindings, {} in Metal or CUDA alone",
            FIXES.len(),
            count(&[Area::Core, Area::Cpu]),
            count(&[Area::Python]),
            count(&[Area::Metal, Area::Cuda])
        ),
        _ => {
            let bases: Vec<&str> = BASES.iter().map(|b| b.version).collect();
            return Err(anyhow!(
                "no fragment `{key}`: `series <base>` ({}), `carried-count`, `carried-range`, `fix-counts` or `slow-checks`",
                bases.join(", ")
            ));
        }
    })
}

/// A base's series as ranges of patch numbers, and the patches it takes as
/// ports (`patches/v<version>/`).
fn series(base: &Base) -> Result<String> {
    let dir = mlx_patched::patch::series_dir();
    let all = mlx_patched::patch::base_series(base, &dir)?;
    let stems: Vec<String> = all
        .iter()
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    let stems: Vec<&str> = stems.iter().map(String::as_str).collect();
    let ports: Vec<String> = all
        .iter()
        .filter(|p| p.parent() != Some(dir.as_path()))
        .filter_map(|p| p.file_name().map(|n| format!("`{}`", &n.to_string_lossy()[..4])))
        .collect();
    let mut text = ranges(&stems);
    if !ports.is_empty() {
        text += &format!(
            ": {} as their ports in `patches/{}/`",
            list(&ports),
            base.dir_name()
        );
    }
    Ok(text)
}

/// Patch stems (`0015-…`) as ranges of their numbers: "`0002` to `0008`
/// and `0010` to `0014`".
fn ranges(stems: &[&str]) -> String {
    let mut numbers: Vec<u32> = stems
        .iter()
        .filter_map(|s| s.get(..4).and_then(|n| n.parse().ok()))
        .collect();
    numbers.sort_unstable();
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for n in numbers {
        match runs.last_mut() {
            Some((_, hi)) if *hi + 1 == n => *hi = n,
            _ => runs.push((n, n)),
        }
    }
    let parts: Vec<String> = runs
        .iter()
        .map(|&(lo, hi)| {
            if lo == hi {
                format!("`{lo:04}`")
            } else {
                format!("`{lo:04}` to `{hi:04}`")
            }
        })
        .collect();
    list(&parts)
}

/// "a", "a and b", "a, b and c".
fn list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_numbers_become_ranges_and_lists() {
        assert_eq!(
            ranges(&["0002-a", "0003-b", "0004-c", "0010-d", "0012-e", "0013-f"]),
            "`0002` to `0004`, `0010` and `0012` to `0013`"
        );
        assert_eq!(ranges(&["0001-a"]), "`0001`");
    }

    #[test]
    fn a_fragment_is_filled_and_an_unknown_one_is_an_error() {
        let text = "carries <!-- facts:carried-count -->7<!-- /facts --> fixes";
        let filled = fill(text).unwrap();
        assert!(filled.starts_with("carries <!-- facts:carried-count -->"));
        assert!(filled.ends_with("<!-- /facts --> fixes"));
        assert_ne!(filled, text, "7 is not the table's count");
        assert_eq!(fill(&filled).unwrap(), filled);
        assert!(fill("<!-- facts:nonsense -->x<!-- /facts -->").is_err());
        assert!(fill("<!-- facts:carried-count -->x").is_err());
    }
}
