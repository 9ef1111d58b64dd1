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
//! 4. `--apply` (only after "still needed" with the suite passing) runs
//!    `cargo xtask sanitize address --record` on the target and refreshed
//!    series, then moves the pin and writes the refreshed series; on any
//!    failure it restores every file it touched, the recorded report too.
//!
//! Everything lands in `target/rebase/<label>/`, including `report.md`.

use crate::upstream::git;
use crate::{cargo, target_dir, workspace_root, Result};
use mlx_patched::{patch, pin};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const USAGE: &str = "usage: cargo xtask rebase --to <carrier-version | upstream-dir> [--series DIR] [--apply] [--no-suite]";

struct Args {
    to: String,
    series: Option<PathBuf>,
    apply: bool,
    suite: bool,
}

fn parse(args: &[String]) -> Result<Args> {
    let mut a = Args {
        to: String::new(),
        series: None,
        apply: false,
        suite: true,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--to" => a.to = it.next().ok_or(USAGE)?.clone(),
            "--series" => {
                let dir = PathBuf::from(it.next().ok_or(USAGE)?);
                a.series = Some(
                    dir.canonicalize()
                        .map_err(|e| format!("--series {}: {e}", dir.display()))?,
                );
            }
            "--apply" => a.apply = true,
            "--no-suite" => a.suite = false,
            // The old form: `rebase <carrier-version>`.
            v if a.to.is_empty() && !v.starts_with('-') => a.to = v.to_string(),
            _ => return Err(USAGE.into()),
        }
    }
    if a.to.is_empty() {
        return Err(USAGE.into());
    }
    Ok(a)
}

/// The target tree: a directory, or upstream's tree recovered from a
/// carrier version (its own patches reversed, as for the pin).
pub(crate) fn target_tree(to: &str, work: &Path) -> Result<mlx_patched::Upstream> {
    let dir = Path::new(to);
    if dir.is_dir() {
        return mlx_patched::from_override(dir.to_path_buf()).map_err(|e| e.to_string());
    }
    if !to.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "`{to}` is neither a directory nor a version of {}",
            pin::CARRIER_CRATE
        ));
    }
    let probe = work.join("carrier");
    std::fs::create_dir_all(probe.join("src")).map_err(|e| e.to_string())?;
    std::fs::write(probe.join("src/lib.rs"), "").map_err(|e| e.to_string())?;
    std::fs::write(
        probe.join("Cargo.toml"),
        format!(
            "[package]\nname = \"rebase-probe\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[workspace]\n\n\
             [target.'cfg(any())'.dependencies]\n{} = \"={to}\"\n",
            pin::CARRIER_CRATE
        ),
    )
    .map_err(|e| e.to_string())?;
    let package = mlx_patched::carrier_dir(
        &mlx_patched::Env::process().cargo(),
        &probe.join("Cargo.toml"),
        to,
    )
    .map_err(|e| e.to_string())?;
    mlx_patched::recover_upstream(&package, to, &work.join("upstream-tree"), None)
        .map_err(|e| e.to_string())
}

#[derive(Debug, PartialEq)]
enum Replay {
    Clean,
    ThreeWay,
    Conflict(String),
}

/// `git format-patch` of the last `series.len()` commits into `out`, each
/// file keeping the name of the patch it refreshes.
fn write_refreshed(repo: &Path, series: &[PathBuf], out: &Path) -> Result<()> {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).map_err(|e| e.to_string())?;
    if series.is_empty() {
        return Ok(());
    }
    let fresh = out.with_extension("format-patch");
    let _ = std::fs::remove_dir_all(&fresh);
    git(
        repo,
        &[
            "format-patch",
            "-q",
            "--zero-commit",
            "-o",
            &fresh.display().to_string(),
            &format!("HEAD~{}", series.len()),
        ],
    )?;
    let written = patch::series(&fresh).map_err(|e| e.to_string())?;
    for (new, old) in written.iter().zip(series) {
        std::fs::rename(new, out.join(old.file_name().unwrap())).map_err(|e| e.to_string())?;
    }
    let _ = std::fs::remove_dir_all(&fresh);
    Ok(())
}

/// Replays `series` (written against the tree `base`) onto `target` in a
/// scratch repository, leaving out each patch that conflicts; writes the
/// refreshed patches that applied to `out`. With `base`
/// None the series is written for `target` and applied to it directly.
fn replay(
    base: Option<&Path>,
    target: &Path,
    series: &[PathBuf],
    repo: &Path,
    out: &Path,
) -> Result<Vec<(String, Replay)>> {
    let _ = std::fs::remove_dir_all(repo);
    std::fs::create_dir_all(repo).map_err(|e| e.to_string())?;
    git(repo, &["init", "-q", "-b", "pinned"])?;
    let load = |tree: &Path, message: &str| -> Result<()> {
        // Replace the work tree with `tree`, keep .git.
        for entry in std::fs::read_dir(repo).map_err(|e| e.to_string())? {
            let p = entry.map_err(|e| e.to_string())?.path();
            if p.file_name() != Some(".git".as_ref()) {
                if p.is_dir() {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                }
                .map_err(|e| e.to_string())?;
            }
        }
        mlx_patched::copy_tree(tree, repo).map_err(|e| e.to_string())?;
        git(repo, &["add", "-A"])?;
        git(repo, &["commit", "-q", "--allow-empty", "-m", message])?;
        Ok(())
    };
    let Some(base) = base else {
        load(target, "target upstream")?;
        let mut results = Vec::new();
        for file in series {
            let name = file.file_name().unwrap().to_string_lossy().to_string();
            let path = file.display().to_string();
            if let Err(e) = git(repo, &["am", "--quiet", &path]) {
                let _ = git(repo, &["am", "--abort"]);
                results.push((name, Replay::Conflict(e)));
                return Ok(results);
            }
            results.push((name, Replay::Clean));
        }
        write_refreshed(repo, series, out)?;
        return Ok(results);
    };
    load(base, "pinned upstream")?;
    if !series.is_empty() {
        let mut am = vec!["am", "--quiet"];
        let paths: Vec<String> = series.iter().map(|p| p.display().to_string()).collect();
        am.extend(paths.iter().map(String::as_str));
        git(repo, &am)
            .map_err(|e| format!("the series does not apply to the pinned tree itself: {e}"))?;
    }
    let range = format!("HEAD~{}..HEAD", series.len());
    let commits: Vec<String> = git(repo, &["rev-list", "--reverse", &range])?
        .lines()
        .map(String::from)
        .collect();
    git(repo, &["checkout", "-q", "--orphan", "target"])?;
    load(target, "target upstream")?;
    let mut results = Vec::new();
    // A patch that conflicts is left out and the replay goes on: the other
    // fixes may still be needed on the target (upstream may have fixed
    // one bug in its own way and not the others).
    let mut applied = Vec::new();
    for (file, commit) in series.iter().zip(&commits) {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let clean = Command::new("git")
            .current_dir(repo)
            .args(["apply", "--check"])
            .arg(file)
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        match git(repo, &["cherry-pick", "--allow-empty", commit]) {
            Ok(_) => {
                results.push((
                    name,
                    if clean {
                        Replay::Clean
                    } else {
                        Replay::ThreeWay
                    },
                ));
                applied.push(file.clone());
            }
            Err(_) => {
                let merged = git(
                    repo,
                    &["diff", "--cached", "--name-only", "--diff-filter=M"],
                )
                .unwrap_or_default();
                let unmerged =
                    git(repo, &["diff", "--name-only", "--diff-filter=U"]).unwrap_or_default();
                let merged: Vec<&str> = merged
                    .lines()
                    .filter(|f| !unmerged.lines().any(|u| u == *f))
                    .collect();
                let merged = if merged.is_empty() {
                    "none".to_string()
                } else {
                    merged.join(", ")
                };
                let hunks = format!(
                    "merged without conflict: {merged}\n{}",
                    git(repo, &["diff"]).unwrap_or_default()
                );
                let _ = git(repo, &["cherry-pick", "--abort"]);
                results.push((name, Replay::Conflict(hunks)));
            }
        }
    }
    write_refreshed(repo, &applied, out)?;
    Ok(results)
}

/// Retained bytes per cycle of the report's scenario on a built prefix.
fn scenario_on(mlx: &mlx_patched::Artifacts, work: &Path) -> Result<Vec<i64>> {
    let exe = work.join(format!("leak_scenario-{}", mlx.name));
    let src = workspace_root().join("crates/probes/cpp/leak_scenario.cpp");
    mlx_patched::compile_program(mlx, &src, &exe, &mlx_patched::Env::process())
        .map_err(|e| e.to_string())?;
    let out = Command::new(&exe)
        .args(["--cycles", "3"])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            exe.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.first() == Some(&"cycle")).then(|| w[3].parse().unwrap_or(-1))
        })
        .collect())
}

/// The environment that points a build at the target tree and series.
fn target_env(cmd: &mut Command, tree: &Path, series: &Path, work: &Path) {
    cmd.env("MLX_SOURCE_DIR", tree)
        .env("MLX_PATCHED_SERIES_DIR", series)
        .env("MLX_PATCHED_BUILD_DIR", work.join("mlx"));
}

/// Builds `variant` of the upstream `tree` with `series`, under `work/mlx`.
fn build_variant(
    variant: mlx_patched::Variant,
    tree: &Path,
    series: &Path,
    work: &Path,
) -> Result<mlx_patched::Artifacts> {
    let mut opts = crate::options()?;
    opts.root = work.join("mlx");
    opts.patches_dir = series.to_path_buf();
    let upstream = mlx_patched::from_override(tree.to_path_buf()).map_err(|e| e.to_string())?;
    mlx_patched::build_from(variant, &upstream, &opts).map_err(|e| e.to_string())
}

pub fn run(args: &[String]) -> Result<()> {
    let a = parse(args)?;
    let root = target_dir()?.join("rebase");
    let label =
        a.to.trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or("target")
            .to_string();
    let work = root.join(&label);
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let mut report = String::new();

    let target = target_tree(&a.to, &work)?;
    let tree = target.dir.clone();
    let tree_id = target.tree_id.clone();
    let carrier_version = match &target.origin {
        mlx_patched::Origin::Carrier(v) => Some(v.clone()),
        _ => None,
    };
    let version = mlx_patched::version_of(&tree).map_err(|e| e.to_string())?;
    let pinned = mlx_patched::upstream(&crate::options()?).map_err(|e| e.to_string())?;
    writeln!(
        report,
        "# Rebase from MLX v{} to v{version}\n",
        pin::UPSTREAM_VERSION
    )
    .unwrap();
    writeln!(
        report,
        "- from: upstream tree `{}` ({} ={}, carrier tree `{}`)",
        pinned.tree_id,
        pin::CARRIER_CRATE,
        pin::CARRIER_VERSION,
        pin::CARRIER_TREE_ID
    )
    .unwrap();
    match &target.carrier {
        Some(c) => {
            let names: Vec<String> = c
                .patches
                .iter()
                .map(|p| {
                    p.file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned()
                })
                .collect();
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
        match crate::provenance::check(&version, &tree, false, &work.join("provenance"))? {
            crate::provenance::Outcome::Skipped(why) => {
                writeln!(report, "- provenance: skipped: {why}").unwrap()
            }
            crate::provenance::Outcome::Checked(f) => {
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
    let series = patch::series(&series_dir).map_err(|e| e.to_string())?;
    let shown = series_dir.canonicalize().unwrap_or(series_dir.clone());
    let shown = shown
        .strip_prefix(workspace_root())
        .unwrap_or(&shown)
        .display()
        .to_string();
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
    let replayed = replay(base, &tree, &series, &work.join("repo"), &refreshed)?;
    let mut conflict = false;
    for (name, r) in &replayed {
        match r {
            Replay::Clean if a.series.is_some() => {
                writeln!(report, "- `{name}` (ported): applies cleanly with `git am`").unwrap()
            }
            Replay::Clean => writeln!(report, "- `{name}`: applies cleanly").unwrap(),
            Replay::ThreeWay => writeln!(report, "- `{name}`: applies with a 3-way merge").unwrap(),
            Replay::Conflict(hunks) => {
                conflict = true;
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
    std::fs::create_dir_all(&empty).map_err(|e| e.to_string())?;
    let control = build_variant(
        mlx_patched::Variant::PRISTINE,
        &tree,
        &empty,
        &work.join("upstream"),
    )?;
    let control_leak = scenario_on(&control, &work)?;
    let control_leaks = control_leak.iter().all(|&b| b >= 24 << 20);
    let mut section = format!("\n## Measured on the target\n\n- upstream v{version} untouched, report's scenario: {control_leak:?} bytes retained per cycle\n");

    let verdict;
    let mut suite_ok = false;
    // The whole suite against the target, with a series (`None`: none, and
    // every variant expected leak-free, since upstream itself is fixed).
    let run_suite = |series: &Path, upstream_fixed: bool, section: &mut String| -> Result<bool> {
        let mut test = cargo();
        test.args(["xtask", "test"])
            .env("CARGO_TARGET_DIR", root.join("cargo-target"));
        target_env(&mut test, &tree, series, &work);
        if upstream_fixed {
            test.env("MLX_FORK_UPSTREAM_FIXED", "1");
        }
        let out = test.output().map_err(|e| e.to_string())?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        std::fs::write(
            work.join("suite.log"),
            format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr)),
        )
        .map_err(|e| e.to_string())?;
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
    if !control_leaks {
        // The leak is fixed upstream; the patches that still apply (fixes of
        // other bugs) are checked there, with every variant expected
        // leak-free.
        let names = |keep: bool| -> Vec<String> {
            replayed
                .iter()
                .filter(|(_, r)| matches!(r, Replay::Conflict(_)) != keep)
                .map(|(n, _)| n.clone())
                .collect()
        };
        let (kept, dropped) = (names(true), names(false));
        if a.suite {
            writeln!(section, "- the regression suite against the target with the patches that apply ({}), every variant expected leak-free:", if kept.is_empty() { "none".to_string() } else { kept.join(", ") }).unwrap();
            suite_ok = run_suite(&refreshed, true, &mut section)?;
        }
        let dropped = match dropped.len() {
            0 => "no patch conflicts".to_string(),
            1 => format!(
                "{} conflicts with the target, where upstream's own leak fix replaces it",
                dropped[0]
            ),
            _ => format!(
                "{} conflict with the target, where upstream's own leak fix replaces them",
                dropped.join(", ")
            ),
        };
        let kept = if kept.is_empty() {
            "nothing else to keep".to_string()
        } else {
            format!("keep {}", kept.join(", "))
        };
        verdict = match (a.suite, suite_ok) {
            (true, true) => format!("upstream no longer leaks: {dropped}; {kept}: the suite passes with them"),
            (true, false) => format!("upstream no longer leaks: {dropped}; {kept}, but the suite fails with them (see suite.log)"),
            (false, _) => format!("upstream no longer leaks: {dropped}; {kept}"),
        };
    } else if conflict && a.series.is_some() {
        verdict = "broken: the ported series does not apply to the target".to_string();
    } else if conflict {
        verdict = "broken: the series conflicts and upstream still leaks; port the patch and rerun with --series".to_string();
    } else {
        let patched = build_variant(mlx_patched::Variant::PATCHED, &tree, &refreshed, &work)?;
        let patched_leak = scenario_on(&patched, &work)?;
        writeln!(
            section,
            "- patched v{version}: {patched_leak:?} bytes retained per cycle"
        )
        .unwrap();
        if a.suite {
            section +=
                "- the regression suite against the target (pristine and patched of the target):\n";
            suite_ok = run_suite(&refreshed, false, &mut section)?;
        }
        verdict = if patched_leak.iter().all(|&b| b == 0) && (suite_ok || !a.suite) {
            "still needed: upstream leaks, the patched target does not".to_string()
        } else {
            "broken: the patched target still leaks or the suite fails".to_string()
        };
    }
    section += &format!("\n## Verdict\n\n{verdict}\n");
    print!("{section}");
    report += &section;
    std::fs::write(work.join("report.md"), &report).map_err(|e| e.to_string())?;
    println!("\n(report in {})", work.join("report.md").display());
    if verdict.starts_with("broken") {
        return Err(format!("verdict: {verdict}"));
    }

    if a.apply {
        if !verdict.starts_with("still needed") || !suite_ok {
            return Err(
                "--apply needs the verdict `still needed` with the suite passing; nothing changed"
                    .into(),
            );
        }
        let carrier = carrier_version.ok_or("--apply needs a carrier version (--to X.Y.Z), the pin must come from a published crate")?;
        let carrier_tree = target
            .carrier
            .as_ref()
            .map(|c| c.tree_id.clone())
            .unwrap_or_default();
        if !provenance_ok {
            return Err("--apply needs a target whose files match the official wheels of its release; nothing changed".into());
        }
        let wheels = wheel_hashes.ok_or("--apply needs the provenance check of the target (pip must reach the package index); nothing changed")?;
        // Memory safety on the target before the pin moves. The run records
        // its report for the target's tree and refreshed series, which are
        // the pin's once it moves, so CI's check of it holds.
        let recorded: Vec<PathBuf> = ["md", "json"]
            .iter()
            .map(|ext| crate::sanitize::recorded_path(mlx_patched::Sanitizer::Address, ext))
            .collect();
        let previous: Vec<Option<Vec<u8>>> =
            recorded.iter().map(|p| std::fs::read(p).ok()).collect();
        let mut sanitize = cargo();
        sanitize
            .args(["xtask", "sanitize", "address", "--record"])
            .env("CARGO_TARGET_DIR", root.join("cargo-target"));
        target_env(&mut sanitize, &tree, &refreshed, &work);
        println!("running the sanitizers on the target before moving the pin ...");
        let status = sanitize.status().map_err(|e| e.to_string())?;
        let restore_record = || {
            for (path, before) in recorded.iter().zip(&previous) {
                match before {
                    Some(bytes) => drop(std::fs::write(path, bytes)),
                    None => drop(std::fs::remove_file(path)),
                }
            }
        };
        if !status.success() {
            restore_record();
            return Err(format!("the sanitizer run on the target does not show what it must (report in {}); nothing changed", root.join("cargo-target/sanitize/address/report.md").display()));
        }
        if let Err(e) = apply(
            &version,
            &tree_id,
            &carrier_tree,
            &carrier,
            &wheels,
            &refreshed,
        ) {
            restore_record();
            return Err(e);
        }
        println!("moved the pin to MLX v{version} ({} ={carrier}, tree {tree_id}) and refreshed patches/", pin::CARRIER_CRATE);
    }
    Ok(())
}

/// Moves the pin and replaces the series, restoring every file on failure.
fn apply(
    version: &str,
    tree_id: &str,
    carrier_tree: &str,
    carrier: &str,
    wheels: &(String, String),
    refreshed: &Path,
) -> Result<()> {
    let root = workspace_root();
    let files = [
        "mlx-patched/src/pin.rs",
        "mlx-patched/sources/mlx/Cargo.toml",
        "mlx-patched/sources/mlx/Cargo.lock",
    ];
    let saved: Vec<(PathBuf, Vec<u8>)> = files
        .iter()
        .map(|f| root.join(f))
        .map(|p| (p.clone(), std::fs::read(&p).unwrap_or_default()))
        .collect();
    let patches = patch::series_dir();
    let saved_series: Vec<(PathBuf, Vec<u8>)> = patch::series(&patches)
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|p| (p.clone(), std::fs::read(&p).unwrap_or_default()))
        .collect();
    let restore = || {
        for (p, bytes) in saved.iter().chain(&saved_series) {
            let _ = std::fs::write(p, bytes);
        }
        if let Ok(now) = patch::series(&patches) {
            for p in now
                .iter()
                .filter(|p| !saved_series.iter().any(|(s, _)| s == *p))
            {
                let _ = std::fs::remove_file(p);
            }
        }
    };
    let result = (|| -> Result<()> {
        let pin_rs = root.join(files[0]);
        let mut text = std::fs::read_to_string(&pin_rs).map_err(|e| e.to_string())?;
        let set = |text: &mut String, name: &str, value: &str| {
            let start = text
                .find(&format!("pub const {name}: &str = \""))
                .expect("pin constant");
            let open = start + text[start..].find('"').unwrap() + 1;
            let close = open + text[open..].find('"').unwrap();
            text.replace_range(open..close, value);
        };
        set(&mut text, "UPSTREAM_VERSION", version);
        set(&mut text, "UPSTREAM_TREE_ID", tree_id);
        set(&mut text, "CARRIER_TREE_ID", carrier_tree);
        set(&mut text, "CARRIER_VERSION", carrier);
        set(&mut text, "WHEEL_SHA256_FRONTEND", &wheels.0);
        set(&mut text, "WHEEL_SHA256_CPU", &wheels.1);
        std::fs::write(&pin_rs, text).map_err(|e| e.to_string())?;
        let manifest = root.join(files[1]);
        let m = std::fs::read_to_string(&manifest).map_err(|e| e.to_string())?;
        let old = format!("{} = \"={}\"", pin::CARRIER_CRATE, pin::CARRIER_VERSION);
        if !m.contains(&old) {
            return Err(format!("{} does not declare `{old}`", manifest.display()));
        }
        std::fs::write(
            &manifest,
            m.replace(&old, &format!("{} = \"={carrier}\"", pin::CARRIER_CRATE)),
        )
        .map_err(|e| e.to_string())?;
        for (p, _) in &saved_series {
            std::fs::remove_file(p).map_err(|e| e.to_string())?;
        }
        for p in patch::series(refreshed).map_err(|e| e.to_string())? {
            std::fs::copy(&p, patches.join(p.file_name().unwrap())).map_err(|e| e.to_string())?;
        }
        let status = cargo()
            .args([
                "update",
                "--manifest-path",
                files[1],
                "--package",
                pin::CARRIER_CRATE,
                "--precise",
                carrier,
            ])
            .status()
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!(
                "cargo update of {} to {carrier} failed",
                pin::CARRIER_CRATE
            ));
        }
        Ok(())
    })();
    if let Err(e) = &result {
        restore();
        return Err(format!("{e}; every file was restored"));
    }
    result
}
