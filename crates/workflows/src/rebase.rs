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

use mlx_harness::process::git;
use mlx_harness::error::{anyhow, Context};
use mlx_harness::process::cargo;
use mlx_harness::paths::{target_dir, workspace_root};
use mlx_harness::error::Result;
use mlx_patched::CommandVars;
use mlx_patched::{patch, pin};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

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

#[derive(Debug, PartialEq)]
enum Replay {
    Clean,
    ThreeWay,
    /// It conflicts; its port to the target (`patches/v<version>/`) applies.
    Ported,
    Conflict(String),
}

/// `git format-patch` of the last `series.len()` commits into `out`, each
/// file keeping the name of the patch it refreshes.
fn write_refreshed(repo: &Path, series: &[PathBuf], out: &Path) -> Result<()> {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out)?;
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
    let written = patch::series(&fresh)?;
    for (new, old) in written.iter().zip(series) {
        std::fs::rename(new, out.join(old.file_name().unwrap()))?;
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
    ports: &Path,
    repo: &Path,
    out: &Path,
) -> Result<Vec<(String, Replay)>> {
    let _ = std::fs::remove_dir_all(repo);
    std::fs::create_dir_all(repo)?;
    git(repo, &["init", "-q", "-b", "pinned"])?;
    let load = |tree: &Path, message: &str| -> Result<()> {
        // Replace the work tree with `tree`, keep .git.
        for entry in std::fs::read_dir(repo)? {
            let p = entry?.path();
            if p.file_name() != Some(".git".as_ref()) {
                if p.is_dir() {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                }?;
            }
        }
        mlx_patched::copy_tree(tree, repo)?;
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
                results.push((name, Replay::Conflict(format!("{e:#}"))));
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
        git(repo, &am).context("the series does not apply to the pinned tree itself")?;
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
        let clean = mlx_patched::git::command(repo)
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
                // A fix whose code upstream changed, ported to the target by
                // hand, goes in its place (three-way: it is written against
                // the target's own files).
                let port = ports.join(&name);
                if port.is_file() {
                    let path = port.display().to_string();
                    if git(repo, &["am", "-3", "--quiet", &path]).is_ok() {
                        results.push((name, Replay::Ported));
                        applied.push(port);
                        continue;
                    }
                    let _ = git(repo, &["am", "--abort"]);
                }
                results.push((name, Replay::Conflict(hunks)));
            }
        }
    }
    write_refreshed(repo, &applied, out)?;
    Ok(results)
}

/// Retained bytes per cycle of the report's scenario on a built prefix.
fn scenario_on(mlx: &mlx_patched::Artifacts, work: &Path) -> Result<Vec<i64>> {
    let exe = work.join(format!("leak_scenario-{}", mlx.name()));
    let src = workspace_root().join("crates/probes/cpp/leak_scenario.cpp");
    mlx_patched::compile_program(mlx, &src, &exe, &mlx_patched::Env::process())?;
    let out = Command::new(&exe).args(["--cycles", "3"]).output()?;
    if !out.status.success() {
        return Err(anyhow!(
            "{} failed: {}",
            exe.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let cycles: Vec<i64> = stdout
        .lines()
        .filter(|l| l.starts_with("cycle "))
        .map(|l| l.split_whitespace().nth(3).and_then(|b| b.parse().ok()))
        .collect::<Option<_>>()
        .ok_or_else(|| {
            anyhow!(
                "{} printed a cycle without a byte count:\n{stdout}",
                exe.display()
            )
        })?;
    // No verdict may rest on a probe that measured nothing.
    if cycles.len() != 3 {
        return Err(anyhow!(
            "{} printed {} cycles, expected 3:\n{stdout}",
            exe.display(),
            cycles.len()
        ));
    }
    Ok(cycles)
}

/// Whether the report's scenario retained anything in any cycle: a target
/// that leaks less than the weights, or in some cycles only, still leaks.
fn retains(cycles: &[i64]) -> bool {
    cycles.iter().any(|&b| b > 0)
}

/// Where `cargo xtask rebase --to <label>` works, and `cargo xtask fuzz
/// --target <label>` builds the target untouched.
pub fn work_dir(label: &str) -> Result<PathBuf> {
    Ok(rebase_dir()?.join(label))
}

fn rebase_dir() -> Result<PathBuf> {
    Ok(target_dir()?.join("rebase"))
}

/// The MLX build root of a rebase's folder `work` (its variants with the
/// replayed series).
fn series_root(work: &Path) -> PathBuf {
    work.join("mlx")
}

/// The MLX build root of the target untouched (an empty series): the
/// rebase's control, and the fuzzer's `--target` builds.
pub fn upstream_root(work: &Path) -> PathBuf {
    series_root(&work.join("upstream"))
}

/// Both build roots of every rebase folder there is now: MLX builds there
/// are where the layout puts them (`mlx_harness::builds`).
pub fn existing_build_roots() -> Result<Vec<PathBuf>> {
    let parent = rebase_dir()?;
    let mut roots = Vec::new();
    if parent.is_dir() {
        let entries =
            std::fs::read_dir(&parent).with_context(|| format!("{}", parent.display()))?;
        for entry in entries {
            let work = entry?.path();
            if work.is_dir() {
                roots.push(series_root(&work));
                roots.push(upstream_root(&work));
            }
        }
    }
    roots.sort();
    Ok(roots)
}

/// The environment that points a build at the target tree and series.
fn target_env(cmd: &mut Command, tree: &Path, series: &Path, work: &Path) {
    cmd.var(mlx_patched::vars::MLX_SOURCE_DIR, tree)
        .var(mlx_patched::vars::MLX_PATCHED_SERIES_DIR, series)
        .var(mlx_patched::vars::MLX_PATCHED_BUILD_DIR, series_root(work));
}

/// Builds `variant` of the upstream `tree` with `series`, under `work/mlx`.
fn build_variant(
    variant: mlx_patched::Variant,
    tree: &Path,
    series: &Path,
    work: &Path,
) -> Result<mlx_patched::Artifacts> {
    let mut opts = mlx_harness::config::options()?;
    opts.root = series_root(work);
    opts.patches_dir = series.to_path_buf();
    let upstream = mlx_patched::from_override(tree.to_path_buf())?;
    Ok(mlx_patched::build_from(variant, &upstream, &opts)?)
}

/// The bug a fix exists for, as a check that runs on a build of any base.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bug {
    /// The report's scenario retains the captured weights every cycle.
    ReportLeak,
    /// Two threads releasing one group at once orphan it.
    ReleaseRace,
    /// Processes building one CPU kernel cache at once load half-written
    /// libraries.
    KernelCacheRace,
}

/// The fixes whose bug a check here can show on any base, by patch stem.
/// The fuzzer's fixes are judged by the suite's replays of their findings.
const BUGS: &[(&str, Bug)] = &[
    (pin::LEAK_FIX, Bug::ReportLeak),
    (pin::RELEASE_RACE_FIX, Bug::ReleaseRace),
    (pin::KERNEL_CACHE_FIX, Bug::KernelCacheRace),
];

fn bug_of(patch_file: &str) -> Option<Bug> {
    let stem = patch_file.strip_suffix(".patch").unwrap_or(patch_file);
    BUGS.iter().find(|(s, _)| *s == stem).map(|(_, b)| *b)
}

/// Whether a bug shows on a build, and the figure that says so.
struct Shown {
    shows: bool,
    figure: String,
}

/// Trials per scenario of the release race on a rebase target: the control
/// of 0.32.2 leaks in about one in a hundred race-only trials.
const RELEASE_RACE_TRIALS: u32 = 2000;

fn shows(bug: Bug, mlx: &mlx_patched::Artifacts, work: &Path) -> Result<Shown> {
    let probe = |name: &str| mlx_harness::cpp_probe::cpp_probe_in(mlx, name, &work.join("probes"));
    match bug {
        Bug::ReportLeak => {
            let cycles = scenario_on(mlx, work)?;
            Ok(Shown {
                shows: retains(&cycles),
                figure: format!("the report's scenario retains {cycles:?} bytes per cycle"),
            })
        }
        Bug::ReleaseRace => {
            let exe = probe(mlx_patched::probes::RELEASE_RACE)?;
            let out = Command::new(&exe)
                .arg(RELEASE_RACE_TRIALS.to_string())
                .output()
                .with_context(|| format!("cannot run {}", exe.display()))?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                return Err(anyhow!(
                    "{} failed ({}):\n{stdout}{}",
                    exe.display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            let (mut trials, mut leaked) = (0, 0);
            for r in mlx_expectations::record::parse_records(&stdout)
                .iter()
                .filter(|r| r.kind == "race" && mlx_expectations::RACE.race_only(r.get("race")))
            {
                trials += r.int("trials");
                leaked += r.int("leaked");
            }
            if trials == 0 {
                return Err(anyhow!("{} ran no race-only scenario", exe.display()));
            }
            Ok(Shown {
                shows: leaked > 0,
                figure: format!(
                    "{leaked} of {trials} trials of threads letting go of one group at once orphaned it"
                ),
            })
        }
        Bug::KernelCacheRace => {
            let exe = probe(mlx_patched::probes::KERNEL_CACHE_RACE)?;
            let race = mlx_expectations::KERNEL_CACHE_RACE;
            let (mut failed, mut processes) = (0, 0);
            for round in 0..race.rounds {
                let dir = work.join(format!("kernel-cache-{}-{round}", mlx.name()));
                for outcome in mlx_patched::probes::kernel_cache_round(
                    &exe,
                    &dir,
                    race.processes,
                    race.kernels,
                )? {
                    processes += 1;
                    if let Err(e) = outcome {
                        if !mlx_patched::probes::is_kernel_cache_race(&e) {
                            return Err(anyhow!(
                                "{} failed otherwise than by the race: {e:#}",
                                exe.display()
                            ));
                        }
                        failed += 1;
                    }
                }
            }
            Ok(Shown {
                shows: failed > 0,
                figure: format!(
                    "{failed} of {processes} processes building one kernel cache at once failed"
                ),
            })
        }
    }
}

/// `path` relative to the workspace when it is inside it.
fn shown_path(path: &Path) -> String {
    let path = path.canonicalize().unwrap_or(path.to_path_buf());
    let root = workspace_root();
    let root = root.canonicalize().unwrap_or(root);
    path.strip_prefix(&root)
        .unwrap_or(&path)
        .display()
        .to_string()
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

/// Adds the target as a base: its row in `crates/facts/src/bases.rs`, its
/// carrier manifest and lock under `sources/mlx-<version>/`, and, as its
/// ports under `patches/v<version>/`, the fixes that applied only by a
/// three-way merge (refreshed, so that they apply as they are). The fixes
/// found redundant are the row's `fixed_upstream`. Restores every file on
/// failure.
fn add_base(target: &NewBase, replayed: &[(String, Replay)], refreshed: &Path) -> Result<()> {
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
struct NewBase {
    version: String,
    carrier: String,
    carrier_tree_id: String,
    upstream_tree_id: String,
    wheels: (String, String),
    /// Patch stems upstream fixed itself (their bug no longer shows).
    fixed_upstream: Vec<String>,
}

/// `bases.rs` with `target`'s row added: its constant before the default
/// base's accessor, and its name at the end of `BASES`.
fn with_base_row(pin_rs: &str, t: &NewBase) -> Result<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bug_check_names_a_patch_of_the_series() {
        let names = patch::names(&patch::series(&patch::series_dir()).unwrap());
        for (stem, bug) in BUGS {
            let file = format!("{stem}.patch");
            assert!(names.contains(&file), "{stem} is not in patches/");
            assert_eq!(bug_of(&file), Some(*bug));
        }
        assert_eq!(bug_of("0003-divmod-vmap-one-axis-per-output.patch"), None);
    }

    #[test]
    fn a_new_base_row_goes_into_the_table_inside_impl_base() {
        let pin_rs = std::fs::read_to_string(workspace_root().join("crates/facts/src/bases.rs")).unwrap();
        let t = NewBase {
            version: "0.33.0".into(),
            carrier: "0.3.0".into(),
            carrier_tree_id: "a".repeat(40),
            upstream_tree_id: "b".repeat(40),
            wheels: ("c".repeat(64), "d".repeat(64)),
            fixed_upstream: vec!["0003-divmod-vmap-one-axis-per-output".into()],
        };
        let text = with_base_row(&pin_rs, &t).unwrap();
        assert!(text.contains("pub const V0_33_0: Base = Base {"));
        assert!(text.contains(", Base::V0_33_0];"), "the table lists it last");
        assert!(text.contains("patch: \"0003-divmod-vmap-one-axis-per-output\","));
        // The row sits inside `impl Base`, before the accessors.
        let row = text.find("pub const V0_33_0").unwrap();
        assert!(row < text.find("pub fn default_base").unwrap());
        assert!(with_base_row("no table here", &t).is_err());
    }

    #[test]
    fn any_retained_byte_in_any_cycle_is_a_leak() {
        assert!(!retains(&[0, 0, 0]));
        assert!(retains(&[12 << 20, 12 << 20, 12 << 20]));
        assert!(retains(&[0, 24 << 20, 0]));
        assert!(!retains(&[-4096, 0, 0]));
    }

    #[test]
    fn every_port_replaces_a_patch_of_the_series() {
        let dir = patch::series_dir();
        let names: Vec<_> = patch::series(&dir)
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_owned())
            .collect();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let ports = entry.unwrap().path();
            if !ports.is_dir() {
                continue;
            }
            for port in patch::series(&ports).unwrap() {
                assert!(
                    names.contains(&port.file_name().unwrap().to_owned()),
                    "{} ports no patch of the series",
                    port.display()
                );
            }
        }
    }
}
