//! `--apply`: the target added as a base (its row in `bases.rs`, its
//! carrier manifest, the ports of the fixes that needed a merge), every
//! touched file restored on failure.

use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::process::cargo;
use mlx_harness::paths::workspace_root;
use mlx_patched::{patch, pin};
use std::path::{Path, PathBuf};
use super::replay::Replay;

/// Adds the target as a base: its row in `crates/facts/src/bases.rs`, its
/// carrier manifest and lock under `sources/mlx-<version>/`, and, as its
/// ports under `patches/v<version>/`, the fixes that applied only by a
/// three-way merge (refreshed, so that they apply as they are). The fixes
/// found redundant are the row's `fixed_upstream`. Restores every file on
/// failure.
pub(crate) fn add_base(target: &NewBase, replayed: &[(String, Replay)], refreshed: &Path) -> Result<()> {
    let root = workspace_root();
    if pin::Base::parse(&target.version).is_ok() {
        return Err(anyhow!(
            "MLX {} is a base already (crates/facts/src/bases.rs); nothing changed",
            target.version
        ));
    }
    let pin_rs = root.join("crates/facts/src/bases.rs");
    let before = std::fs::read_to_string(&pin_rs)?;
    let sources = pin::carrier_manifest(pin::Base::default_base())
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .context("the sources folder")?
        .join(format!("mlx-{}", target.version));
    let ports = patch::ports_dir(&patch::series_dir(), &target.version);
    let mut written: Vec<PathBuf> = Vec::new();
    let result = (|| -> Result<()> {
        std::fs::write(&pin_rs, with_base_row(&before, target)?)?;
        // The manifest: the default base's, declaring this carrier.
        let default = pin::Base::default_base();
        let manifest = std::fs::read_to_string(mlx_patched::pin::carrier_manifest(default))?;
        let old = format!("{} = \"={}\"", pin::CARRIER_CRATE, default.carrier_version);
        if !manifest.contains(&old) {
            return Err(anyhow!("the default base's manifest does not declare `{old}`"));
        }
        std::fs::create_dir_all(&sources)?;
        written.push(sources.clone());
        let name = |v: &str| format!("mlx-source-mlx-{}", v.replace('.', "-"));
        std::fs::write(
            sources.join("Cargo.toml"),
            manifest
                .replace(&old, &format!("{} = \"={}\"", pin::CARRIER_CRATE, target.carrier))
                .replace(&name(default.version), &name(&target.version)),
        )?;
        std::fs::copy(
            mlx_patched::pin::carrier_manifest(default).with_file_name("lib.rs"),
            sources.join("lib.rs"),
        )?;
        let status = cargo()
            .args(["generate-lockfile", "--manifest-path"])
            .arg(sources.join("Cargo.toml"))
            .status()?;
        if !status.success() {
            return Err(anyhow!(
                "cargo generate-lockfile for {} {} failed",
                pin::CARRIER_CRATE,
                target.carrier
            ));
        }
        for (name, r) in replayed {
            if matches!(r, Replay::ThreeWay) {
                std::fs::create_dir_all(&ports)?;
                let port = ports.join(name);
                std::fs::copy(refreshed.join(name), &port)?;
                written.push(port);
            }
        }
        Ok(())
    })();
    if let Err(e) = &result {
        let _ = std::fs::write(&pin_rs, &before);
        for p in written.iter().rev() {
            let _ = if p.is_dir() {
                std::fs::remove_dir_all(p)
            } else {
                std::fs::remove_file(p)
            };
        }
        return Err(anyhow!("{e:#}; every file was restored"));
    }
    result
}

/// A base `rebase --apply` adds.
pub(crate) struct NewBase {
    pub(crate) version: String,
    pub(crate) carrier: String,
    pub(crate) carrier_tree_id: String,
    pub(crate) upstream_tree_id: String,
    pub(crate) wheels: (String, String),
    /// Patch stems upstream fixed itself (their bug no longer shows).
    pub(crate) fixed_upstream: Vec<String>,
}

/// `bases.rs` with `target`'s row added: its constant before the default
/// base's accessor, and its name at the end of `BASES`.
pub(crate) fn with_base_row(pin_rs: &str, t: &NewBase) -> Result<String> {
    let konst = format!("V{}", t.version.replace('.', "_"));
    let fixed: String = t
        .fixed_upstream
        .iter()
        .map(|stem| {
            format!(
                "            FixedUpstream {{\n                patch: \"{stem}\",\n                how: \"upstream's own change: its bug does not show on {} untouched (docs/rebases/v{}.md)\",\n            }},\n",
                t.version, t.version
            )
        })
        .collect();
    let row = format!(
        "    /// MLX {v}, added by `cargo xtask rebase --to {c} --apply`.\n    pub const {konst}: Base = Base {{\n        version: \"{v}\",\n        carrier_version: \"{c}\",\n        carrier_tree_id: \"{ct}\",\n        upstream_tree_id: \"{ut}\",\n        wheel_sha256_frontend: \"{w0}\",\n        wheel_sha256_cpu: \"{w1}\",\n        mlxc: None,\n        fixed_upstream: &[\n{fixed}        ],\n    }};\n\n",
        v = t.version,
        c = t.carrier,
        ct = t.carrier_tree_id,
        ut = t.upstream_tree_id,
        w0 = t.wheels.0,
        w1 = t.wheels.1,
    );
    let anchor = "    /// The default base: the first of [`BASES`].";
    let table = "pub const BASES: &[Base] = &[";
    let (Some(at), Some(t0)) = (pin_rs.find(anchor), pin_rs.find(table)) else {
        return Err(anyhow!("bases.rs has no `{anchor}` or `{table}`: add the row by hand"));
    };
    let close = t0 + pin_rs[t0..].find("];").context("the end of BASES")?;
    let mut text = pin_rs.to_string();
    text.insert_str(close, &format!(", Base::{konst}"));
    text.insert_str(at, &row);
    Ok(text)
}
