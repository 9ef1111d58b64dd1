//! `cargo xtask test`: the whole regression suite. Every claim is a
//! `#[test]`; this builds the variants, then runs every test in its own
//! process ([`runner`]) in three builds of the workspace, and the slow
//! checks last, and adds up their typed results.

pub mod runner;

use mlx_expectations::report;
use mlx_harness::config::{options, variants_to_build};
use mlx_harness::error::{anyhow, Result};
use mlx_harness::paths::{report_dir, MEASURED_FOR};
use mlx_harness::process::cargo;
use mlx_harness::slow_check::read_tally;
use mlx_patched::vars;
use runner::Binary;
use std::process::Command;

/// Test targets of the suite whose expectations depend on the variant the
/// Rust API links: run again against the control.
const LINKED_VARIANT_TESTS: &[&str] = &["rust_api_leak", "semantics", "fuzz"];

/// Test targets whose claims rest on threads or processes racing (a race
/// the control must show, or MLX's suite with its two-thread cases): they
/// run one at a time, with the machine to themselves, after every other
/// test ran beside another. The two race tests are named after the probes
/// they drive.
const TIMING_TARGETS: &[&str] = &[
    mlx_patched::probes::KERNEL_CACHE_RACE,
    mlx_patched::probes::RELEASE_RACE,
    "fuzz",
    "leak_matrix",
    "mlx_suite",
    "rejects_wrong_fixes",
];

/// The test target of the slow checks (`tests/slow_checks.rs`), one test
/// per entry of the claim registry, run in its order after every other
/// test: the differential needs both variants' fuzz slices, and the last
/// (`upstream_pr`) quotes the run's figures only when all before it passed.
const SLOW_CHECK_TARGET: &str = "slow_checks";

/// The run's tally: each test counts once, a slow check by its claims.
#[derive(Default)]
struct Totals {
    passed: u32,
    failed: Vec<String>,
}

impl Totals {
    /// Runs a slow check, its output streamed, and counts it.
    fn run_check(&mut self, bin: &Binary, test: &str, report: &std::path::Path) -> Result<()> {
        println!("\n== {test} ({})", rerun(bin, test));
        let outcome = runner::run_test(bin, test, true)?;
        self.count(bin, test, outcome, report);
        Ok(())
    }

    /// Counts one test's outcome, and prints it.
    fn count(
        &mut self,
        bin: &Binary,
        test: &str,
        outcome: runner::Outcome,
        report: &std::path::Path,
    ) {
        let id = format!("{} {}::{test}", bin.package, bin.target);
        let tally = is_check(bin).then(|| read_tally(report, test)).flatten();
        match (&tally, outcome.passed) {
            (Some(t), _) => {
                self.passed += t.passed;
                self.failed.extend(t.failures.iter().cloned());
            }
            (None, true) => self.passed += 1,
            (None, false) => {}
        }
        if outcome.passed {
            println!("PASS {:>8.2}s  {id}", outcome.took.as_secs_f64());
        } else {
            println!(
                "FAIL {:>8.2}s  {id} ({})\n{}\n  rerun: {}",
                outcome.took.as_secs_f64(),
                outcome.status,
                outcome.output.trim_end(),
                rerun(bin, test)
            );
            // A failed test counts once, however many claims it named.
            if tally.as_ref().is_none_or(|t| t.failures.is_empty()) {
                self.failed.push(format!("{id} ({})", outcome.status));
            }
        }
    }

    /// Runs every test of `bins` but the slow checks: those of
    /// [`TIMING_TARGETS`] one at a time after the rest, which run as many
    /// at a time as the machine has cores.
    fn run_tests(&mut self, bins: &[Binary], report: &std::path::Path) -> Result<()> {
        let (mut side_by_side, mut alone) = (Vec::new(), Vec::new());
        for bin in bins.iter().filter(|b| !is_check(b)) {
            let to = if bin.kind == "test" && TIMING_TARGETS.contains(&bin.target.as_str()) {
                &mut alone
            } else {
                &mut side_by_side
            };
            to.extend(runner::tests_of(bin)?.into_iter().map(|t| (bin.clone(), t)));
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut lost = Vec::new();
        runner::run_side_by_side(&side_by_side, cores, |bin, test, outcome| match outcome {
            Ok(o) => self.count(bin, test, o, report),
            Err(e) => lost.push(e),
        });
        if let Some(e) = lost.pop() {
            return Err(e);
        }
        for (bin, test) in &alone {
            let outcome = runner::run_test(bin, test, false)?;
            self.count(bin, test, outcome, report);
        }
        Ok(())
    }
}

/// The command that reruns one test alone; a slow check runs alone only
/// with the slow checks on.
fn rerun(bin: &Binary, test: &str) -> String {
    match is_check(bin) {
        true => format!("{}=1 {}", vars::MLX_FORK_SLOW_CHECKS.name, bin.rerun(test)),
        false => bin.rerun(test),
    }
}

fn is_check(b: &Binary) -> bool {
    b.kind == "test" && b.target == SLOW_CHECK_TARGET
}

fn cargo_test() -> Command {
    let mut cmd = cargo();
    cmd.arg("test");
    cmd
}

/// `cargo xtask test`: the suite on this run's base.
#[derive(clap::Args, Debug, Default)]
pub struct TestArgs {
    /// Keep the run as the base's record (docs/bases/), for a base CI does
    /// not run; only a green run is kept.
    #[arg(long)]
    pub record: bool,
}

pub fn run(args: TestArgs) -> Result<()> {
    mlx_harness::deps::install()?;
    let started = std::time::Instant::now();
    let mut opts = options()?;
    opts.tests = true;
    // The record's inputs are taken before the run, so that a tree changed
    // during it is not recorded as tested.
    let record = if args.record {
        mlx_checks::base_record::can_record(&opts)?;
        Some(mlx_checks::base_record::fingerprint(&opts)?)
    } else {
        None
    };
    mlx_patched::build_all(&variants_to_build(), &opts)?;
    eprintln!(
        "all variants built in {}",
        mlx_patched::progress::elapsed(started.elapsed())
    );

    // The report of this run only: tests append to it while they run.
    let report = report_dir()?;
    let _ = std::fs::remove_dir_all(&report);
    std::fs::create_dir_all(&report)?;
    let rows = report.join(report::ROWS);
    // Every test process inherits them: where the table goes, and the slow
    // checks on.
    std::env::set_var(vars::MLX_FORK_REPORT_FILE.name, &rows);
    std::env::set_var(vars::MLX_FORK_SLOW_CHECKS.name, "1");

    let mut totals = Totals::default();
    // The workspace on patched. The drop-in mlx-sys is built on its own: it
    // compiles mlx-c, which may not support a rebase's target yet, and that
    // must not stop every other test.
    let mut builds: Vec<(&str, Command)> = Vec::new();
    let mut workspace = cargo_test();
    workspace.args(["--workspace", "--exclude", "mlx-sys"]);
    builds.push(("the workspace", workspace));
    if opts.base.mlxc.is_some() {
        let mut sys = cargo_test();
        sys.args(["--package", "mlx-sys"]);
        builds.push(("mlx-sys", sys));
    } else {
        // Its build script refuses this base; the mlx-rs check shows it.
        println!(
            "mlx-sys: not built on MLX {} (no mlx-c compiles against it)",
            opts.base.version
        );
    }
    let mut control = cargo_test();
    control.args([
        "--package",
        "mlx-fork",
        "--features",
        mlx_patched::CONTROL_FEATURE,
    ]);
    for t in LINKED_VARIANT_TESTS {
        control.args(["--test", t]);
    }
    builds.push(("the suite linked to the control", control));

    // Each configuration's tests run before the next is built: the
    // control's build puts its fuzz worker (`src/bin/mlx-fuzz-worker.rs`,
    // linked to the control) where patched's was.
    let mut checks = Vec::new();
    for (what, mut cmd) in builds {
        match runner::build(&mut cmd) {
            Ok(bins) => {
                totals.run_tests(&bins, &report)?;
                checks.extend(bins.into_iter().filter(is_check));
            }
            Err(e) => {
                // A build that failed runs no test: one failure.
                println!("FAILED: {what}: {e:#}");
                totals.failed.push(format!("{what}: {e:#}"));
            }
        }
    }

    // The slow checks, in the registry's order; the figures belong to this
    // tree and series only once everything before the last passed.
    let (last, before) = crate::claims::SLOW_CHECKS
        .split_last()
        .expect("the registry has slow checks");
    for check in before {
        run_check(&mut totals, &checks, check.name, &report)?;
    }
    let upstream = mlx_patched::upstream(&opts)?;
    let series = mlx_patched::patch::fix_series(&opts.series()?)?;
    let measured_for = report.join(MEASURED_FOR);
    if totals.failed.is_empty() {
        let fingerprint = mlx_patched::patch::fingerprint(&upstream.tree_id, &series)?;
        std::fs::write(&measured_for, fingerprint)?;
    }
    run_check(&mut totals, &checks, last.name, &report)?;

    let table = match report::read(&rows) {
        Ok(table) => report::render(&table),
        Err(e) => format!("(no table: {e:#})"),
    };
    println!("\n{table}");
    for f in &totals.failed {
        println!("FAILED: {f}");
    }
    let summary = format!(
        "xtask test: {} passed, {} failed ({})",
        totals.passed,
        totals.failed.len(),
        mlx_patched::progress::elapsed(started.elapsed())
    );
    println!("\n{summary}");
    if let Some(fingerprint) = record {
        if !totals.failed.is_empty() {
            return Err(anyhow!(
                "{} checks failed: nothing recorded",
                totals.failed.len()
            ));
        }
        let recorded = mlx_checks::base_record::Recorded {
            base: opts.base.version.to_string(),
            fingerprint,
            passed: totals.passed,
            failed: Vec::new(),
        };
        let md = mlx_checks::base_record::report_md(&recorded, &table, &summary);
        mlx_checks::base_record::write(&recorded, opts.base, &md)?;
    }
    match totals.failed.len() {
        0 => Ok(()),
        n => Err(anyhow!("{n} checks failed")),
    }
}

/// Runs the slow check `name`; a check whose test was not built is a
/// failure.
fn run_check(
    totals: &mut Totals,
    checks: &[Binary],
    name: &str,
    report: &std::path::Path,
) -> Result<()> {
    match checks.iter().find(|b| b.target == SLOW_CHECK_TARGET) {
        Some(bin) if runner::tests_of(bin)?.iter().any(|t| t == name) => {
            totals.run_check(bin, name, report)?;
        }
        _ => totals.failed.push(format!(
            "{name}: no test of that name in tests/{SLOW_CHECK_TARGET}.rs was built"
        )),
    }
    Ok(())
}
