//! MLX's Python suite in the Python check: the runner's events read into
//! results, the whole suite on patched, the control's part of it, and the
//! repeats that judge a test flaky on patched alone.

use super::judge::{self, Repeats, FLAKY_REPEATS};
use mlx_harness::error::{anyhow, Context, Result};
use mlx_harness::paths::workspace_root;
use mlx_harness::python_env::{python_root, suite_kernel_tmp};
use mlx_patched::CommandVars;
use mlx_patched::Variant;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// Which of MLX's Python tests a run takes.
#[derive(Clone, Copy, Debug)]
pub(super) enum Tests<'a> {
    /// Every test but these (each must exist: a name that matches no test
    /// is an error result); with none, the whole suite.
    Except(&'a [&'a str]),
    /// These only, in one process as the whole suite runs (a name that
    /// does not load is an error result); none at all for no names.
    Only(&'a [String]),
}

/// MLX's Python suite on one interpreter: outcome and detail per test id.
/// A test that failed and passed when run again alone is `flaky`. The
/// runner streams its events, so a crash names the test that was running.
/// `tmp` is its `TMPDIR`, which holds MLX's kernel cache.
pub(super) fn mlx_suite(
    python: &Path,
    tree: &Path,
    tests: Tests,
    log: &Path,
    tmp: &Path,
) -> Result<BTreeMap<String, (String, String)>> {
    let runner = workspace_root().join("tests/python/run_mlx_suite.py");
    let mut cmd = Command::new(python);
    cmd.arg(&runner).arg(tree.join("python/tests"));
    match tests {
        Tests::Except([]) => {}
        Tests::Except(ids) => {
            cmd.arg("--except").args(ids);
        }
        Tests::Only([]) => return Ok(BTreeMap::new()),
        Tests::Only(ids) => {
            cmd.arg("--only").args(ids);
        }
    }
    let out = cmd
        .var(mlx_patched::other_vars::DEVICE, "cpu")
        .var(mlx_patched::other_vars::TMPDIR, tmp)
        .output()?;
    std::fs::write(
        log,
        [out.stdout.as_slice(), b"\n", out.stderr.as_slice()].concat(),
    )?;
    let (results, running) = suite_results(&suite_events(&String::from_utf8_lossy(&out.stdout))?);
    if let Some(id) = running {
        return Err(anyhow!(
            "MLX's Python suite died ({}) while running {id}; see {}",
            out.status,
            log.display()
        ));
    }
    if !out.status.success() {
        return Err(anyhow!(
            "MLX's Python suite exited with {} after {} results; see {}",
            out.status,
            results.len(),
            log.display()
        ));
    }
    if results.is_empty() {
        return Err(anyhow!(
            "MLX's Python suite reported nothing ({}); see {}",
            out.status,
            log.display()
        ));
    }
    Ok(results)
}

/// One line of the suite runner (see `tests/python/run_mlx_suite.py`).
#[derive(Debug, Default)]
pub struct SuiteEvent {
    event: String,
    id: String,
    outcome: String,
    detail: String,
    runs: u64,
    failures: u64,
    unjudged: u64,
    hung: u64,
}

/// The outcome of each test from the runner's events, and the test that
/// had started and not ended when they stop (the one a crash interrupted).
pub fn suite_results(
    events: &[SuiteEvent],
) -> (BTreeMap<String, (String, String)>, Option<String>) {
    let mut results: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut running: Option<String> = None;
    for e in events {
        match e.event.as_str() {
            "start" => running = Some(e.id.clone()),
            "result" => {
                if running.as_deref() == Some(e.id.as_str()) {
                    running = None;
                }
                results.insert(e.id.clone(), (e.outcome.clone(), e.detail.clone()));
            }
            "retry" if e.outcome == "passed" => {
                let first = results
                    .get(&e.id)
                    .map(|(_, d)| d.clone())
                    .unwrap_or_default();
                results.insert(
                    e.id.clone(),
                    (
                        "flaky".into(),
                        format!("failed once ({first}), passed when run again"),
                    ),
                );
            }
            _ => {}
        }
    }
    (results, running)
}

pub fn suite_events(stdout: &str) -> Result<Vec<SuiteEvent>> {
    let mut events = Vec::new();
    for line in stdout.lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("bad line from the suite runner: {line}"))?;
        let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
        events.push(SuiteEvent {
            event: s("event"),
            id: s("id"),
            outcome: s("outcome"),
            detail: s("detail"),
            runs: v["runs"].as_u64().unwrap_or(0),
            failures: v["failures"].as_u64().unwrap_or(0),
            unjudged: v["unjudged"].as_u64().unwrap_or(0),
            hung: v["hung"].as_u64().unwrap_or(0),
        });
    }
    Ok(events)
}

/// Runs each of `ids` alone `times` times, each run in a fresh process (runs
/// in one process are not independent trials: upstream's
/// `test_async_eval_error_in_synchronize`, repeated in one process, hangs
/// it for good after a few hundred runs; finding 010): how many runs
/// failed. A run that does not end within `hang_after` is killed and counts
/// as a failure. A run that gives no result to count (skipped, or the test
/// cannot be loaded alone) makes the comparison impossible: an error.
pub(super) fn repeat_tests(
    python: &Path,
    tree: &Path,
    ids: &[&String],
    times: u32,
    hang_after: std::time::Duration,
) -> Result<BTreeMap<String, Repeats>> {
    let runner = workspace_root().join("tests/python/run_mlx_suite.py");
    let mut found = BTreeMap::new();
    for id in ids {
        let out = Command::new(python)
            .arg(&runner)
            .arg(tree.join("python/tests"))
            .args(["--repeat", &times.to_string()])
            .args(["--hang-after", &hang_after.as_secs().to_string()])
            .arg(id.as_str())
            .var(mlx_patched::other_vars::DEVICE, "cpu")
            .output()?;
        let events = suite_events(&String::from_utf8_lossy(&out.stdout))?;
        let Some(e) = events.iter().find(|e| e.event == "repeat" && &e.id == *id) else {
            return Err(anyhow!(
                "repeating {id} reported nothing ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        };
        if !out.status.success() || e.unjudged > 0 || e.runs != u64::from(times) {
            return Err(anyhow!(
                "{id} alone: {} of {} runs gave no result to compare ({}; {})",
                e.unjudged,
                e.runs,
                e.detail,
                out.status
            ));
        }
        found.insert(
            id.to_string(),
            Repeats {
                runs: e.runs,
                failures: e.failures,
                hung: e.hung,
            },
        );
    }
    Ok(found)
}

/// How long one run of a repeated test may take before it counts as hung
/// (a run takes a fraction of a second; each hang seen costs this much).
const HANG_AFTER: std::time::Duration = std::time::Duration::from_secs(20);

/// MLX's Python suite on one variant, logged in its environment's folder
/// under `log`, its kernels in the suite's cache (`empty`: emptied first).
pub(super) fn suite_on(
    v: Variant,
    python: &Path,
    tests_tree: &Path,
    tests: Tests,
    log: &str,
    empty: bool,
) -> Result<judge::SuiteResults> {
    let log = python_root()?.join(v.name).join(log);
    mlx_suite(
        python,
        tests_tree,
        tests,
        &log,
        &suite_kernel_tmp(v, empty)?,
    )
}

/// Patched's run of MLX's whole Python suite, beside the check's other
/// work: every test but those of [`judge::RUN_APART`], which run after,
/// alone.
pub(super) fn whole_suite_beside(python: &Path, tests_tree: &Path) -> Result<judge::SuiteResults> {
    let v = Variant::PATCHED;
    eprintln!(
        "running MLX's Python test suite on {} (DEVICE=cpu) beside the rest of the check, but for {} timing-dependent tests",
        v.name,
        judge::RUN_APART.len()
    );
    suite_on(
        v,
        python,
        tests_tree,
        Tests::Except(judge::RUN_APART),
        "mlx-python-suite.log",
        true,
    )
}

/// Both variants' suite results, the repeats of the tests flaky on
/// patched, and what the precompiled preamble check saw.
pub(super) type SuitesAndRepeats = (
    BTreeMap<&'static str, judge::SuiteResults>,
    BTreeMap<String, (Repeats, Repeats)>,
    mlx_harness::kernel_preamble::Use,
);

/// After patched's whole run of MLX's Python suite: the control's part, the
/// precompiled preamble's check, and the repeats that judge a test flaky on
/// patched.
pub(super) fn suites_and_repeats(
    pythons: &[(Variant, std::path::PathBuf)],
    tests_tree: &Path,
    show_the_bug: &[(String, String)],
    on_patched: judge::SuiteResults,
) -> Result<SuitesAndRepeats> {
    // MLX's Python suite: the whole of it on patched (`on_patched`), then on
    // the control the tests that did not pass there and the series' tests that must
    // show their bug. Every comparison the judge makes (a lost pass, a
    // failure or flakiness on patched alone, a failure on both, a bug
    // shown) concerns a test that did not pass on patched or a series'
    // test, so the control's other results would decide nothing. Both run
    // the tests of the patched tree, the series' new tests with them, as
    // the control runs the series' C++ tests (`PRISTINE_PATHS`): they are
    // Python, read by either wheel. Each variant builds its kernels in a
    // cache of its own: since `0032` they compute other code under the
    // same names.
    let apart: Vec<String> = judge::RUN_APART.iter().map(|s| s.to_string()).collect();
    eprintln!(
        "running MLX's Python tests that depend on timing on {}, alone: {apart:?}",
        Variant::PATCHED.name
    );
    let mut on_patched = on_patched;
    on_patched.extend(suite_on(
        Variant::PATCHED,
        &pythons[1].1,
        tests_tree,
        Tests::Only(&apart),
        "mlx-python-suite-apart.log",
        false,
    )?);
    let mut suites = BTreeMap::new();
    suites.insert(Variant::PATCHED.name, on_patched);
    let only = judge::control_subset(&suites[Variant::PATCHED.name], show_the_bug);
    eprintln!(
        "running {} tests of MLX's Python suite on {} (DEVICE=cpu): those that did not pass on patched, and the series' own",
        only.len(),
        Variant::PRISTINE.name
    );
    let on_pristine = suite_on(
        Variant::PRISTINE,
        &pythons[0].1,
        tests_tree,
        Tests::Only(&only),
        "mlx-python-suite.log",
        true,
    )?;
    suites.insert(Variant::PRISTINE.name, on_pristine);
    // Patched's environment compiles MLX's kernels from the precompiled
    // preamble, to the same bytes; one of the suite's kernels shows it.
    let preamble = mlx_harness::kernel_preamble::check_use(
        &pythons[1].1,
        &suite_kernel_tmp(Variant::PATCHED, false)?,
        &python_root()?.join("kernel-preamble-check"),
    )?;
    println!("the precompiled kernel preamble in patched's environment: {preamble:?}");
    // A test flaky on patched and not explained by pristine's results, or
    // failing on patched where pristine passed, runs alone, as often on
    // each variant: independent processes, not one shaped by earlier tests.
    let unexplained = judge::judged_alone(
        &suites[Variant::PRISTINE.name],
        &suites[Variant::PATCHED.name],
    );
    let mut repeats = BTreeMap::new();
    if !unexplained.is_empty() {
        let ids: Vec<&String> = unexplained.iter().collect();
        let on_pristine = repeat_tests(&pythons[0].1, tests_tree, &ids, FLAKY_REPEATS, HANG_AFTER)?;
        let on_patched = repeat_tests(&pythons[1].1, tests_tree, &ids, FLAKY_REPEATS, HANG_AFTER)?;
        for id in unexplained {
            let both = (on_patched[&id], on_pristine[&id]);
            repeats.insert(id, both);
        }
    }
    Ok((suites, repeats, preamble))
}
