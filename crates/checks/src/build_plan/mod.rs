//! The build plan's row for this host (`mlx_patched::plan`) against what
//! the build here did. The plan's unit tests cover every host on made-up
//! paths; this is where a row meets a real build. A slow check: it needs
//! the patched variant built and mlx-sys's build script run, which
//! `cargo xtask test` does before the slow checks.

pub mod judge;

use judge::{cache_value, directives, Evidence};
use mlx_expectations::report::Row;
use mlx_harness::check::Check;
use mlx_harness::error::{Context, Result};
use mlx_harness::paths::target_dir;
use mlx_harness::tally::Tally;
use mlx_patched::plan::{self, dep_metadata, Exported, Linkage};
use mlx_patched::{Expectations, Host, Layout, Variant};
use std::path::{Path, PathBuf};

fn mlx_sys_output(target: &Path) -> Option<(PathBuf, String)> {
    let mut found: Vec<(std::time::SystemTime, PathBuf, String)> =
        std::fs::read_dir(target.join("debug/build"))
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path().join("output")))
            .filter(|p| {
                p.parent()
                    .and_then(|d| d.file_name())
                    .is_some_and(|n| n.to_string_lossy().starts_with("mlx-sys-"))
            })
            .filter_map(|p| {
                let text = std::fs::read_to_string(&p).ok()?;
                let variant = format!("cargo:variant={}", Variant::PATCHED.name);
                (text.contains("cargo:rustc-link-lib=static=mlx\n") && text.contains(&variant))
                    .then_some(())?;
                Some((std::fs::metadata(&p).ok()?.modified().ok()?, p, text))
            })
            .collect();
    found.sort();
    found.pop().map(|(_, p, t)| (p, t))
}

/// The plan against the build.
pub struct BuildPlanCheck;

impl Check for BuildPlanCheck {
    type Evidence = Evidence;

    fn collect(&self, _: &Expectations) -> Result<Evidence> {
        let opts = mlx_harness::config::options()?;
        let target = target_dir()?;
        let variant = opts.root.join(Variant::PATCHED.name);
        let cache_path = variant.join("build/CMakeCache.txt");
        let cache = std::fs::read_to_string(&cache_path)
            .with_context(|| format!("{}: no build of the patched variant", cache_path.display()))?;
        let (output_path, output) = mlx_sys_output(&target).with_context(|| {
            format!(
                "no output of mlx-sys's build script linking the patched variant under {}",
                target.join("debug/build").display()
            )
        })?;
        let layout = Layout {
            prefix: variant.join("prefix"),
            build: variant.join("build"),
            tests: cache_value(&cache, "MLX_BUILD_TESTS") == Some("ON"),
            metallib_dir: None,
        };
        let host = Host::here(false);
        let plan = plan::plan(&host, &layout);
        // mlx-c's folder is the build's own: taken from its include line.
        let include = directives(&output)
            .into_iter()
            .find(|(k, _)| *k == "include")
            .map(|(_, v)| v.to_string())
            .unwrap_or_default();
        let mlxc = std::env::split_paths(&include).nth(1).unwrap_or_default();
        let metadata = dep_metadata(&Exported {
            linkage: Linkage::Static,
            prefix: &layout.prefix,
            mlxc_include: &mlxc,
            version: opts.base.version,
            variant: Variant::PATCHED.name,
            metallib: plan.metallib.as_deref(),
        })?;
        Ok(Evidence {
            host: format!("{host:?}"),
            plan,
            metadata,
            cache_path,
            cache,
            output_path,
            output,
        })
    }

    fn judge(&self, e: &Evidence, _: &Expectations) -> Tally {
        judge::judge(e)
    }

    fn render(&self, e: &Evidence) -> Vec<Row> {
        judge::render(e)
    }
}

/// The check as the suite runs it; on a base without mlx-c, mlx-sys is not
/// built, and there is nothing to compare.
pub fn check(rows: &mut Vec<Row>) -> Result<Tally> {
    mlx_harness::check::outcome_with_mlxc(&BuildPlanCheck, "build plan", rows)
}
