//! The bugs each fix of the series is there for, and whether the target's
//! control still shows them: a patch whose bug the control no longer shows
//! is redundant there.

use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::paths::workspace_root;
use mlx_patched::pin;
use std::path::Path;
use std::process::Command;

/// Retained bytes per cycle of the report's scenario on a built prefix.
pub(crate) fn scenario_on(mlx: &mlx_patched::Artifacts, work: &Path) -> Result<Vec<i64>> {
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
pub(crate) fn retains(cycles: &[i64]) -> bool {
    cycles.iter().any(|&b| b > 0)
}

/// The bug a fix exists for, as a check that runs on a build of any base.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Bug {
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
pub(crate) const BUGS: &[(&str, Bug)] = &[
    (pin::LEAK_FIX, Bug::ReportLeak),
    (pin::RELEASE_RACE_FIX, Bug::ReleaseRace),
    (pin::KERNEL_CACHE_FIX, Bug::KernelCacheRace),
];

pub(crate) fn bug_of(patch_file: &str) -> Option<Bug> {
    let stem = patch_file.strip_suffix(".patch").unwrap_or(patch_file);
    BUGS.iter().find(|(s, _)| *s == stem).map(|(_, b)| *b)
}

/// Whether a bug shows on a build, and the figure that says so.
pub(crate) struct Shown {
    pub(crate) shows: bool,
    pub(crate) figure: String,
}

/// Trials per scenario of the release race on a rebase target: the control
/// of 0.32.2 leaks in about one in a hundred race-only trials.
pub(crate) const RELEASE_RACE_TRIALS: u32 = 2000;

pub(crate) fn shows(bug: Bug, mlx: &mlx_patched::Artifacts, work: &Path) -> Result<Shown> {
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
pub(crate) fn shown_path(path: &Path) -> String {
    let path = path.canonicalize().unwrap_or(path.to_path_buf());
    let root = workspace_root();
    let root = root.canonicalize().unwrap_or(root);
    path.strip_prefix(&root)
        .unwrap_or(&path)
        .display()
        .to_string()
}
