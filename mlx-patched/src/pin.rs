//! The bases (`mlx_facts::bases`), and where this crate keeps the source
//! packages that pin each one's carrier.

pub use mlx_facts::bases::*;
use std::path::{Path, PathBuf};

/// The manifest whose lock file pins a source package (`sources/<what>/`).
pub fn sources_manifest(what: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("sources")
        .join(what)
        .join("Cargo.toml")
}

/// The manifest whose lock file pins `base`'s carrier.
pub fn carrier_manifest(base: &Base) -> PathBuf {
    sources_manifest(&format!("mlx-{}", base.version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_base_has_its_carrier_manifest_at_its_version() {
        for b in BASES {
            let manifest = carrier_manifest(b);
            let text = std::fs::read_to_string(&manifest)
                .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
            let wanted = format!("{CARRIER_CRATE} = \"={}\"", b.carrier_version);
            assert!(
                text.contains(&wanted),
                "{} must declare {wanted}",
                manifest.display()
            );
            assert!(manifest.with_file_name("Cargo.lock").is_file());
        }
    }
}
