//! `cargo xtask rebase --to <carrier-version | path> [--series DIR] [--apply] [--no-suite]`
//!
//! 1. Materializes the target upstream tree (a carrier crate version, fetched
//!    by cargo, with the carrier's own patches reversed, or an upstream
//!    checkout) and records its git tree ids; for a carrier version, compares
//!    it with the official wheels of that release (`provenance`).
//! 2. Replays the series onto it in a scratch repository: the pinned tree
//!    with the series committed by `git am`, then each commit cherry-picked
//!    onto the target tree. Each patch is reported as applying cleanly, with
//!    a 3-way merge, or with conflicts (the conflicting hunks are printed).
//!    `--series DIR` takes a series already ported to the target instead:
//!    it is applied with `git am` onto the target tree directly.
//! 3. Builds the target's control (upstream untouched) and, if the series
//!    applies, its patched variant, and measures the report's scenario on
//!    both. With `--series` or a clean replay it runs the whole suite against
//!    the target too. Verdict: still needed, redundant, or broken.
//! 4. `--apply` (only after "still needed" or "partly redundant" with the
//!    suite passing) adds the target as a base: its row in `bases.rs`, its
//!    carrier manifest, and ports of the fixes that needed a merge; on any
//!    failure it restores every file it touched.
//!
//! Everything lands in `target/rebase/<label>/`, including `report.md`.

mod bugs;
pub mod dirs;
mod new_base;
mod replay;

use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::process::cargo;
use mlx_patched::CommandVars;
use mlx_patched::{patch, pin};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use bugs::*;
use dirs::*;
use new_base::*;
use replay::*;

/// `cargo xtask rebase`: the series replayed onto another upstream tree.
#[derive(clap::Args, Debug)]
pub struct RebaseArgs {
    /// The target: a carrier crate version or an upstream checkout.
    #[arg(long)]
    pub to: String,
    /// Another series directory to replay instead of patches/.
    #[arg(long)]
    pub series: Option<PathBuf>,
    /// Add the target as a base when the verdict allows it.
    #[arg(long)]
    pub apply: bool,
    /// Skip the regression suite on the target.
    #[arg(long)]
    pub no_suite: bool,
}

struct Args {
    to: String,
    series: Option<PathBuf>,
    apply: bool,
    suite: bool,
}

fn parse(r: RebaseArgs) -> Result<Args> {
    let series = match r.series {
        Some(dir) => Some(
            dir.canonicalize()
                .with_context(|| format!("--series {}", dir.display()))?,
        ),
        None => None,
    };
    Ok(Args {
        to: r.to,
        series,
        apply: r.apply,
        suite: !r.no_suite,
    })
}

pub fn run(r: RebaseArgs) -> Result<()> {
    let a = parse(r)?;
    let label =
        a.to.trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or("target")
            .to_string();
    let work = work_dir(&label)?;
    std::fs::create_dir_all(&work)?;
    let mut report = String::new();

    let target = mlx_harness::trees::target_tree(&a.to, &work)?;
    let tree = target.dir.clone();
    let tree_id = target.tree_id.clone();
    let carrier_version = match &target.origin {
        mlx_patched::Origin::Carrier(v) => Some(v.clone()),
        _ => None,
    };
    let version = mlx_patched::version_of(&tree)?;
    // The series is written against the default base: it replays from there.
    let opts = mlx_harness::config::options()?;
    let from = opts.base;
    if !from.is_default() {
        return Err(anyhow!(
            "a rebase replays the series from the default base, where it is written: unset {} (it says {})",
            mlx_patched::vars::MLX_FORK_BASE.name,
            from.version
        ));
    }
    let pinned = mlx_patched::upstream(&opts)?;
    writeln!(report, "# Rebase from MLX v{} to v{version}\n", from.version).unwrap();
    writeln!(
        report,
        "- from: upstream tree `{}` ({} ={}, carrier tree `{}`)",
        pinned.tree_id,
        pin::CARRIER_CRATE,
        from.carrier_version,
        from.carrier_tree_id
    )
    .unwrap();
    match &target.carrier {
        Some(c) => {
            let names = patch::names(&c.patches);
            let reversed = if names.is_empty() {
                "none: its tree is upstream's as shipped".to_string()
            } else {
                names.join(", ")
            };
            writeln!(report, "- to: upstream tree `{tree_id}` ({} ={}, carrier tree `{}`; carrier patches reversed: {reversed})", pin::CARRIER_CRATE, c.version, c.tree_id).unwrap();
        }
        None => writeln!(report, "- to: tree `{tree_id}` ({})", tree.display()).unwrap(),
    }
    // Independent evidence that the target is the release it says it is.
    let mut wheel_hashes = None;
    let mut provenance_ok = true;
    if carrier_version.is_some() {
        match mlx_checks::provenance::check(&version, &tree, None, &work.join("provenance"))? {
            mlx_checks::provenance::Outcome::Skipped(why) => {
                writeln!(report, "- provenance: skipped: {why}").unwrap()
            }
            mlx_checks::provenance::Outcome::Checked(f) => {
                writeln!(
                    report,
                    "- provenance: {}",
                    f.summary().replace('\n', "\n  ")
                )
                .unwrap();
                provenance_ok = f.identical();
                if f.wheels.len() == 2 {
                    wheel_hashes = Some((f.wheels[0].1.clone(), f.wheels[1].1.clone()));
                }
            }
        }
    }

    let series_dir = a.series.clone().unwrap_or_else(patch::series_dir);
    let series = patch::series(&series_dir)?;
    let shown = shown_path(&series_dir);
    writeln!(
        report,
        "- series: `{shown}` ({} patches)\n\n## Replay onto the target\n",
        series.len()
    )
    .unwrap();
    let refreshed = work.join("series");
    let base = if a.series.is_some() {
        None
    } else {
        Some(pinned.dir.as_path())
    };
    let ports = patch::ports_dir(&series_dir, &version);
    let replayed = replay(base, &tree, &series, &ports, &work.join("repo"), &refreshed)?;
    for (name, r) in &replayed {
        match r {
            Replay::Clean if a.series.is_some() => {
                writeln!(report, "- `{name}` (ported): applies cleanly with `git am`").unwrap()
            }
            Replay::Clean => writeln!(report, "- `{name}`: applies cleanly").unwrap(),
            Replay::ThreeWay => writeln!(report, "- `{name}`: applies with a 3-way merge").unwrap(),
            Replay::Ported => writeln!(
                report,
                "- `{name}`: conflicts; its port `{}/{name}` applies",
                shown_path(&ports)
            )
            .unwrap(),
            Replay::Conflict(hunks) => {
                // The hunks quote upstream code: print them, but keep only
                // the files and hunk headers in the report.
                println!("conflicting hunks of {name}:\n{}\n", hunks.trim());
                let headers: Vec<&str> = hunks
                    .lines()
                    .filter(|l| {
                        l.starts_with("merged") || l.starts_with("diff --") || l.starts_with("@@")
                    })
                    .collect();
                writeln!(
                    report,
                    "- `{name}`: **conflicts**\n\n```\n{}\n```",
                    headers.join("\n")
                )
                .unwrap();
            }
        }
    }
    print!("{report}");

    // The control: the target upstream with no patch at all.
    let empty = work.join("empty-series");
    std::fs::create_dir_all(&empty)?;
    let control = build_variant(
        mlx_patched::Variant::PRISTINE,
        &tree,
        &empty,
        &work.join("upstream"),
    )?;
    let control_leak = scenario_on(&control, &work)?;
    let control_leaks = retains(&control_leak);
    let mut section = format!("\n## Measured on the target\n\n- upstream v{version} untouched, report's scenario: {control_leak:?} bytes retained per cycle\n");

    // Each fix is judged by its bug on the control: one that conflicts is
    // redundant where its bug no longer shows, and must be ported where it
    // still does (or where nothing here can show it).
    let (mut kept, mut redundant, mut unported) = (Vec::new(), Vec::new(), Vec::new());
    for (name, r) in &replayed {
        let on_control = match bug_of(name) {
            Some(bug) => Some(shows(bug, &control, &work)?),
            None => None,
        };
        if let Some(o) = &on_control {
            writeln!(
                section,
                "- the bug of `{name}`, on upstream v{version} untouched: {}",
                o.figure
            )
            .unwrap();
        }
        match (r, on_control) {
            (Replay::Conflict(_), Some(o)) if !o.shows => redundant.push(name.clone()),
            (Replay::Conflict(_), Some(_)) => unported.push(format!(
                "{name} (its bug shows on the target: port it to {}/)",
                shown_path(&ports)
            )),
            (Replay::Conflict(_), None) => unported.push(format!(
                "{name} (nothing here shows its bug: port it, or show it redundant)"
            )),
            _ => kept.push(name.clone()),
        }
    }

    let verdict;
    let mut suite_ok = false;
    // The whole suite against the target, with the series that applies
    // (`upstream_fixed`: the control no longer leaks, so no variant may).
    let run_suite = |series: &Path, upstream_fixed: bool, section: &mut String| -> Result<bool> {
        let mut test = cargo();
        test.args(["xtask", "test"]).var(
            mlx_patched::vars::CARGO_TARGET_DIR,
            rebase_dir()?.join("cargo-target"),
        );
        target_env(&mut test, &tree, series, &work);
        if upstream_fixed {
            test.var(mlx_patched::vars::MLX_FORK_UPSTREAM_FIXED, "1");
        }
        let out = test.output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        std::fs::write(
            work.join("suite.log"),
            format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr)),
        )?;
        let tail: Vec<&str> = stdout
            .lines()
            .skip_while(|l| !l.starts_with("Retained per cycle"))
            .collect();
        let tail = if tail.is_empty() {
            vec![stdout
                .lines()
                .last()
                .unwrap_or("the suite printed nothing; see suite.log")]
        } else {
            tail
        };
        writeln!(section, "\n```\n{}\n```", tail.join("\n")).unwrap();
        Ok(out.status.success())
    };
    if !unported.is_empty() {
        verdict = format!(
            "broken: {} cannot be dropped and does not apply: {}",
            if unported.len() == 1 {
                "a fix"
            } else {
                "fixes"
            },
            unported.join("; ")
        );
    } else {
        // The fixes that apply (ports included), on the target: none of
        // their bugs may show.
        let patched = build_variant(mlx_patched::Variant::PATCHED, &tree, &refreshed, &work)?;
        let patched_leak = scenario_on(&patched, &work)?;
        writeln!(
            section,
            "- patched v{version}: {patched_leak:?} bytes retained per cycle"
        )
        .unwrap();
        let mut still_shows = Vec::new();
        for name in &kept {
            if let Some(bug) = bug_of(name) {
                let o = shows(bug, &patched, &work)?;
                writeln!(
                    section,
                    "- the bug of `{name}`, on patched v{version}: {}",
                    o.figure
                )
                .unwrap();
                if o.shows {
                    still_shows.push(name.clone());
                }
            }
        }
        if a.suite {
            writeln!(
                section,
                "- the regression suite against the target with {}:",
                kept.join(", ")
            )
            .unwrap();
            suite_ok = run_suite(&refreshed, !control_leaks, &mut section)?;
        }
        let redundant = if redundant.is_empty() {
            String::new()
        } else {
            format!(
                "; redundant (their bugs do not show on upstream v{version} untouched): {}",
                redundant.join(", ")
            )
        };
        let suite = match (a.suite, suite_ok) {
            (true, true) => "; the suite passes",
            (true, false) => "; the suite fails (see suite.log)",
            (false, _) => "",
        };
        verdict = if retains(&patched_leak) || !still_shows.is_empty() {
            format!(
                "broken: the patched target still shows the bug of {}",
                if still_shows.is_empty() {
                    "the report's scenario".to_string()
                } else {
                    still_shows.join(", ")
                }
            )
        } else if a.suite && !suite_ok {
            format!("broken: keep {}{redundant}{suite}", kept.join(", "))
        } else if redundant.is_empty() {
            format!("still needed: keep every patch{suite}")
        } else {
            format!(
                "partly redundant: keep {}{redundant}{suite}",
                kept.join(", ")
            )
        };
    }
    section += &format!("\n## Verdict\n\n{verdict}\n");
    print!("{section}");
    report += &section;
    std::fs::write(work.join("report.md"), &report)?;
    println!("\n(report in {})", work.join("report.md").display());
    if verdict.starts_with("broken") {
        return Err(anyhow!("verdict: {verdict}"));
    }

    if a.apply {
        if verdict.starts_with("broken") || !suite_ok {
            return Err(anyhow!(
                "--apply needs the verdict `still needed` or `partly redundant` with the suite passing; nothing changed"
            ));
        }
        if a.series.is_some() {
            return Err(anyhow!("--apply takes the series of patches/, with hand ports under patches/v{version}/: put them there and rebase without --series; nothing changed"));
        }
        let carrier = carrier_version.context("--apply needs a carrier version (--to X.Y.Z): a base comes from a published crate")?;
        if !provenance_ok {
            return Err(anyhow!("--apply needs a target whose files match the official wheels of its release; nothing changed"));
        }
        let wheels = wheel_hashes.context("--apply needs the provenance check of the target (pip must reach the package index); nothing changed")?;
        let new = NewBase {
            version: version.clone(),
            carrier: carrier.clone(),
            carrier_tree_id: target
                .carrier
                .as_ref()
                .map(|c| c.tree_id.clone())
                .unwrap_or_default(),
            upstream_tree_id: tree_id.clone(),
            wheels,
            fixed_upstream: redundant
                .iter()
                .map(|n: &String| n.trim_end_matches(".patch").to_string())
                .collect(),
        };
        add_base(&new, &replayed, &refreshed)?;
        println!(
            "added the base MLX v{version} ({} ={carrier}, tree {tree_id}): crates/facts/src/bases.rs, mlx-patched/sources/mlx-{version}/; record its run with `cargo xtask test --base {version} --record`",
            pin::CARRIER_CRATE
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
