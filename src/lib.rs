//! The regression suite's support code: every MLX variant the build script
//! built, the C++ probes linked against each, how to run a probe on every
//! variant (one process each, since each is its own libmlx), and the summary
//! table `cargo xtask test` prints. The tests are in `tests/` (see
//! `tests/README.md`).

use mlx_expectations::report::Row;
use mlx_patched::CommandVars;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

pub use mlx_bridge as mlx;
pub use mlx_expectations::{Bound, Cell};
pub use mlx_patched::Expect;

/// One installed MLX variant and the probe programs built against it.
#[derive(Debug)]
pub struct Variant {
    pub name: &'static str,
    /// The verdict the suite must confirm (the control under
    /// `MLX_FORK_UPSTREAM_FIXED` is expected `Fixed`).
    pub expect: Expect,
    pub prefix: &'static str,
    /// Runs MLX's own doctest suite, built from this variant's tree,
    /// against its installed library.
    pub mlx_tests: &'static str,
    /// The C++ probes (`mlx_patched::probes::CPP_PROBES`) built against
    /// this variant: (name, executable).
    pub probes: &'static [(&'static str, &'static str)],
}

impl Variant {
    /// The executable of the probe `name` (its file in `crates/probes/cpp/`).
    pub fn probe(&self, name: &str) -> &'static str {
        match self.probes.iter().find(|(n, _)| *n == name) {
            Some((_, exe)) => exe,
            None => panic!(
                "no probe `{name}` was built for {}: mlx_patched::probes::CPP_PROBES has {:?}",
                self.name,
                self.probes.iter().map(|(n, _)| n).collect::<Vec<_>>()
            ),
        }
    }
}

/// Every variant of `mlx_patched::VARIANTS`, in its order (control first).
pub const VARIANTS: &[Variant] = include!(concat!(env!("OUT_DIR"), "/variants.rs"));

impl Variant {
    /// Whether the report's leak must be absent from this variant.
    pub fn leak_free(&self) -> bool {
        self.expect == Expect::Fixed
    }
}

/// The variants whose verdict the leak checks confirm: the control (the
/// leak must show) and the fixes (it must not). Wrong fixes are checked
/// by `tests/rejects_wrong_fixes.rs`, which must see them fail.
pub fn control_and_fixes() -> Vec<&'static Variant> {
    VARIANTS
        .iter()
        .filter(|v| v.expect != Expect::Wrong)
        .collect()
}

/// The variants that carry a fix the suite must reject.
pub fn wrong_fixes() -> Vec<&'static Variant> {
    VARIANTS
        .iter()
        .filter(|v| v.expect == Expect::Wrong)
        .collect()
}

/// The build of `v`.
pub fn variant(v: mlx_patched::Variant) -> &'static Variant {
    VARIANTS
        .iter()
        .find(|b| b.name == v.name)
        .unwrap_or_else(|| panic!("no variant `{v}` was built"))
}

/// The variant this build's Rust API links against (`--features pristine`).
pub fn linked() -> &'static Variant {
    variant(
        mlx_patched::Variant::parse(mlx_bridge::MLX_VARIANT)
            .expect("the bridge links a variant of this table"),
    )
}

pub const MIB: i64 = 1024 * 1024;

pub use mlx_expectations::record::{parse_records, Record};

/// One probe run on one variant.
#[derive(Debug)]
pub struct ProbeRun {
    pub variant: &'static Variant,
    pub records: Vec<Record>,
}

impl ProbeRun {
    pub fn all(&self, kind: &str) -> Vec<&Record> {
        self.records.iter().filter(|r| r.kind == kind).collect()
    }

    pub fn one(&self, kind: &str) -> &Record {
        let found = self.all(kind);
        assert_eq!(
            found.len(),
            1,
            "{}: expected one `{kind}` record",
            self.variant.name
        );
        found[0]
    }

    /// Active-memory bytes each cycle left behind.
    pub fn retained(&self) -> Vec<i64> {
        let cycles: Vec<i64> = self
            .all("cycle")
            .iter()
            .map(|r| r.int("retained_bytes"))
            .collect();
        assert!(
            !cycles.is_empty(),
            "{}: the probe printed no cycle",
            self.variant.name
        );
        cycles
    }

    /// Digest of the outputs: every cycle must have computed the same bits.
    pub fn digest(&self) -> String {
        let digests: Vec<&str> = self.all("cycle").iter().map(|r| r.get("digest")).collect();
        assert!(
            digests.windows(2).all(|w| w[0] == w[1]),
            "{}: cycles computed different outputs: {digests:?}",
            self.variant.name
        );
        digests[0].to_string()
    }

    pub fn mean_retained(&self) -> i64 {
        let r = self.retained();
        r.iter().sum::<i64>() / r.len() as i64
    }
}

/// Runs `probe` of `variant` with `args` and parses its records.
pub fn run_probe(
    variant: &'static Variant,
    probe: fn(&Variant) -> &'static str,
    args: &[&str],
) -> ProbeRun {
    let out = Command::new(probe(variant))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", probe(variant)));
    finish(variant, probe(variant), args, out)
}

/// Runs `probe` with `args` on the control and every fix, all at once
/// (separate processes, separate libraries), in `VARIANTS` order.
pub fn run_on_all(probe: fn(&Variant) -> &'static str, args: &[&str]) -> Vec<ProbeRun> {
    let children: Vec<_> = control_and_fixes()
        .into_iter()
        .map(|v| {
            let child = Command::new(probe(v))
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn();
            (v, child.unwrap_or_else(|e| panic!("run {}: {e}", probe(v))))
        })
        .collect();
    children
        .into_iter()
        .map(|(v, child)| {
            finish(
                v,
                probe(v),
                args,
                child.wait_with_output().expect("wait for the probe"),
            )
        })
        .collect()
}

fn finish(
    variant: &'static Variant,
    exe: &str,
    args: &[&str],
    out: std::process::Output,
) -> ProbeRun {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{} probe {exe} {args:?} failed ({}):\n{stdout}{}",
        variant.name,
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    ProbeRun {
        variant,
        records: parse_records(&stdout),
    }
}

/// How a child process ended, in words: `crashed (SIGSEGV)`, `exit status 1`.
pub fn signal_or_code(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (_, Some(9)) => "killed (SIGKILL)".into(),
        (_, Some(6)) => "aborted (SIGABRT)".into(),
        (_, Some(11)) => "crashed (SIGSEGV)".into(),
        (_, Some(7)) => "crashed (SIGBUS)".into(),
        (_, Some(s)) => format!("killed by signal {s}"),
        (Some(c), None) => format!("exit status {c}"),
        (None, None) => status.to_string(),
    }
}

/// Whether a probe run is the failure a wrong fix must cause, and how:
/// a crash (the process died of SIGSEGV, SIGBUS, SIGABRT, SIGILL or SIGFPE),
/// or exit status 1 after the probe named a failed check (`FAILED ...`).
/// Anything else is a broken check, not a rejection: the loader's 127 for a
/// library it cannot find, a probe killed from outside, an exit that names
/// nothing.
pub fn rejection(status: std::process::ExitStatus, stdout: &str) -> Result<String, String> {
    use std::os::unix::process::ExitStatusExt;
    const CRASHES: [i32; 5] = [11, 7, 6, 4, 8];
    let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAILED")).collect();
    let passed = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    match (status.signal(), status.code()) {
        (Some(s), _) if CRASHES.contains(&s) => Ok(format!(
            "{} after {passed} passing checks",
            signal_or_code(status)
        )),
        (None, Some(1)) if !failed.is_empty() => Ok(format!(
            "failed {} after {passed} passing checks",
            failed.join("; ")
        )),
        _ => Err(format!(
            "{}, {passed} checks passed, none named as failed: that is not a rejection",
            signal_or_code(status)
        )),
    }
}

/// Checks that the dynamic loader resolves every library `exe` needs
/// (glibc's loader lists them and exits when `LD_TRACE_LOADED_OBJECTS` is set).
pub fn assert_loads(exe: &str) {
    if !cfg!(target_os = "linux") {
        return;
    }
    let out = Command::new(exe)
        .var(mlx_patched::other_vars::LD_TRACE_LOADED_OBJECTS, "1")
        .output()
        .unwrap_or_else(|e| panic!("run {exe}: {e}"));
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && listed.contains("libmlx") && !listed.contains("not found"),
        "{exe} does not load ({}):\n{listed}",
        out.status
    );
}

/// One run of MLX's own doctest suite on a variant.
#[derive(Debug)]
pub struct SuiteRun {
    /// Test case name -> passed, from doctest's JUnit report.
    pub cases: BTreeMap<String, bool>,
    /// Whether the last run's report was complete (false: the binary
    /// crashed or aborted outside a test case).
    pub finished: bool,
    /// Test cases that crashed the binary (counted as failed; the rest ran
    /// again without them).
    pub crashed: Vec<String>,
    pub status: std::process::ExitStatus,
    pub stderr: String,
}

impl SuiteRun {
    pub fn failures(&self) -> Vec<&String> {
        self.cases
            .iter()
            .filter(|(_, &ok)| !ok)
            .map(|(n, _)| n)
            .collect()
    }

    /// Why the run's exit does not agree with its report, if it does not.
    /// A run ends cleanly with exit status 0 and no failing case, or with
    /// doctest's status for failed cases (1) and the failures named.
    /// Anything else, a signal above all, is a crash the report cannot
    /// show: doctest closes its JUnit report from its fatal-signal handler
    /// too, and a crash after the last case (a static destructor) comes
    /// after the report.
    pub fn exit_problem(&self) -> Option<String> {
        let failing = self.failures().len();
        match self.status.code() {
            Some(0) if failing == 0 => None,
            Some(1) if failing > 0 => None,
            _ => Some(format!(
                "the suite ended with {} with {failing} failing case(s) in its report",
                signal_or_code(self.status)
            )),
        }
    }
}

fn unescape(s: &str) -> String {
    s.replace("&apos;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Runs MLX's suite of `variant` (less `mlx_patched::MLX_TESTS_EXCLUDED`,
/// empty today) in a child process, which may crash without taking the
/// test along.
pub fn run_mlx_suite(variant: &Variant) -> SuiteRun {
    // A test case that crashes the binary (doctest reports the signal as
    // its error) ends the run; it counts as failed and the rest runs again
    // without it, so a memory-corruption bug's test on the control does
    // not hide every test after it.
    let mut crashed: Vec<String> = Vec::new();
    let mut cases = BTreeMap::new();
    // A kernel cache of the variant's own: variants of one version share
    // kernel names, and the series changes what some kernels compute.
    let kernels = Path::new(variant.prefix)
        .parent()
        .unwrap_or(Path::new(variant.prefix))
        .join("suite-kernels");
    std::fs::create_dir_all(&kernels)
        .unwrap_or_else(|e| panic!("create {}: {e}", kernels.display()));
    loop {
        let out = Command::new(variant.mlx_tests)
            .var(mlx_patched::other_vars::TMPDIR, &kernels)
            .args([
                "--reporters=junit",
                "--no-colors",
                &mlx_patched::mlx_tests_filter_also(&crashed),
            ])
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", variant.mlx_tests));
        let xml = String::from_utf8_lossy(&out.stdout);
        let mut crash = None;
        for chunk in xml.split("<testcase ").skip(1) {
            let Some(name) = chunk
                .split(" name=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
            else {
                continue;
            };
            let name = unescape(name);
            let body = chunk.split("</testcase>").next().unwrap_or("");
            let failed = body.contains("<failure") || body.contains("<error");
            if body.contains("<error") && body.contains(" signal") {
                crash = Some(name.clone());
            }
            let passed = cases.get(&name).copied().unwrap_or(true) && !failed;
            cases.insert(name, passed);
        }
        let died = out.status.code().is_none();
        match crash {
            Some(name) if died && !crashed.contains(&name) && crashed.len() < 8 => {
                eprintln!(
                    "{}: test case `{name}` crashed the suite; running the rest without it",
                    variant.name
                );
                crashed.push(name);
            }
            _ => {
                return SuiteRun {
                    cases,
                    finished: xml.contains("</testsuites>"),
                    crashed,
                    status: out.status,
                    stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                }
            }
        }
    }
}

/// Checks every cycle of every run against the bound its variant's verdict
/// gives (the verdicts and the report's bounds live in `mlx_patched`'s
/// expectations).
pub fn assert_within(scenario: &str, runs: &[ProbeRun], bound: impl Fn(Expect) -> Bound) {
    for run in runs {
        let retained = run.retained();
        let b = bound(run.variant.expect);
        assert!(
            b.admits_all(&retained),
            "{scenario}: {} ({:?}) must retain {b} every cycle, retained {retained:?}",
            run.variant.name,
            run.variant.expect
        );
    }
}

/// A cell of the report's ablation, run at the report's sizes.
pub fn assert_cell(cell: Cell, runs: &[ProbeRun]) {
    assert_within(&cell.name(), runs, |verdict| cell.bound(verdict));
}

/// Whether every run computed the same output bits.
pub fn bit_identical(runs: &[ProbeRun]) -> bool {
    runs.windows(2).all(|w| w[0].digest() == w[1].digest())
}

/// Appends a row to the summary table `cargo xtask test` prints at the end:
/// the scenario, bytes retained per cycle on each variant, and whether all
/// variants computed the same bits.
pub fn report(scenario: &str, runs: &[ProbeRun]) {
    let cells: Vec<(String, f64)> = runs
        .iter()
        .map(|r| (r.variant.name.to_string(), r.mean_retained() as f64))
        .collect();
    report_row(scenario, cells, bit_identical(runs));
}

/// A row from figures computed by the test: bytes per cycle by variant.
pub fn report_row(scenario: &str, cells: Vec<(String, f64)>, bit_identical: bool) {
    report_rows(&[Row::retained(scenario, cells, bit_identical)]);
}

/// Appends a free-form line (a measurement that is not a leak row).
pub fn report_note(note: &str) {
    report_rows(&[Row::note(note)]);
}

/// Records, beside the table, what each program of the fuzz slice came to
/// on `variant` (its bits, or its error's class): `cargo xtask test`
/// compares patched's with pristine's (`mlx_fuzz::oracle::differ_runs`).
pub fn report_results(
    variant: &str,
    results: &std::collections::BTreeMap<u64, mlx_fuzz::oracle::RunResult>,
) {
    let Some(path) = mlx_patched::Env::process().report_file() else {
        return;
    };
    let dir = path.parent().expect("the report file is in a directory");
    let file = mlx_expectations::report::fuzz_slice(dir, variant);
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).expect("create the report directory");
    }
    std::fs::write(
        &file,
        serde_json::to_string(results).expect("results serialize"),
    )
    .expect("write the slice's results");
}

/// Appends to the table of the `cargo xtask test` run in progress
/// (`MLX_FORK_REPORT_FILE`); a plain `cargo test` writes nothing, so the
/// table never mixes runs or outlives the tree it measured.
pub fn report_rows(rows: &[Row]) {
    let Some(path) = mlx_patched::Env::process().report_file() else {
        return;
    };
    mlx_expectations::report::append(&path, rows).expect("write the report");
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn exited(code: i32) -> std::process::ExitStatus {
        std::process::ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn only_a_crash_or_a_named_failed_check_rejects_a_fix() {
        let segv = std::process::ExitStatus::from_raw(11);
        assert_eq!(
            rejection(segv, "").unwrap(),
            "crashed (SIGSEGV) after 0 passing checks"
        );
        assert!(rejection(exited(1), "ok split in 2\nFAILED split in 3\n")
            .unwrap()
            .contains("FAILED split in 3"));
        // The loader's exit for a library it cannot find: a broken build.
        assert!(rejection(exited(127), "").is_err());
        assert!(rejection(exited(1), "ok split in 2\n").is_err());
        assert!(rejection(exited(0), "ok split in 2\n").is_err());
        // Killed from outside (the OOM killer, a timeout) is no crash of the fix.
        assert!(rejection(std::process::ExitStatus::from_raw(9), "").is_err());
    }
}
