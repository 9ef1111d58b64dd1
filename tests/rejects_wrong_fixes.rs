//! The suite must tell a wrong fix from a right one, on every run. Every
//! variant expected `Wrong` (the fix the leak report suggests, built on the
//! control) passes here only when the checks that guard the real fix fail
//! on it:
//!
//! * the report's scenario still leaks the weights every cycle;
//! * an output of an unevaluated multi-output op, held while its siblings
//!   and their consumers go, no longer evaluates right (a crash counts: the
//!   probe is a child process, so the test survives it);
//! * MLX's own suite regresses against the control: it crashes, or a case
//!   that passes on the control fails.
//!
//! Replacing the series with such a fix, or deleting the series, makes the
//! fixed-variant checks fail the same way; these tests show, on every run,
//! that the checks can.

use mlx_fork::{report_note, report_row, run_mlx_suite, run_probe, variant, wrong_fixes, Expect, Variant, MIB, VARIANTS};
use mlx_patched::Env;
use std::process::Command;

/// Whether this run has variants to reject. Under `MLX_FORK_UPSTREAM_FIXED`
/// (a rebase onto an upstream that fixed the leak) none is built, since
/// the rejected fixes are written against the leaking upstream.
fn variants_to_reject() -> Vec<&'static Variant> {
    let wrong = wrong_fixes();
    if Env::process().upstream_fixed() {
        assert!(wrong.is_empty(), "no rejected fix is built against a fixed upstream");
        println!("upstream is fixed (MLX_FORK_UPSTREAM_FIXED): no rejected fix to check");
    } else {
        assert!(!wrong.is_empty(), "the variant table has no rejected fix: the suite would not show that it rejects one");
    }
    wrong
}

fn signal_or_code(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (_, Some(9)) => "killed (SIGKILL)".into(),
        (_, Some(6)) => "aborted (SIGABRT)".into(),
        (_, Some(11)) => "crashed (SIGSEGV)".into(),
        (_, Some(s)) => format!("killed by signal {s}"),
        (Some(c), None) => format!("exit status {c}"),
        (None, None) => status.to_string(),
    }
}

#[test]
fn report_scenario_still_leaks_on_wrong_fixes() {
    let wrong = variants_to_reject();
    let args = ["--cycles", "3", "--blocks", "24", "--dim", "512", "--batch", "8"];
    let mut cells = Vec::new();
    let mut digests = Vec::new();
    for v in VARIANTS {
        let run = run_probe(v, |v| v.leak_scenario, &args);
        digests.push(run.digest());
        let retained = run.retained();
        cells.push(format!("{}={}", v.name, run.mean_retained()));
        if v.expect == Expect::Wrong {
            assert!(retained.iter().all(|&b| b >= 24 * MIB), "{}: a wrong fix must still leak the 24 MiB weight set every cycle, retained {retained:?}", v.name);
        }
    }
    if !wrong.is_empty() {
        report_row("rejected fix: the report's scenario, 3 cycles", &cells, digests.windows(2).all(|w| w[0] == w[1]));
    }
}

#[test]
fn held_output_breaks_on_wrong_fixes() {
    for v in variants_to_reject() {
        let out = Command::new(v.held_output).output().expect("run the held-output probe");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let ok = stdout.lines().filter(|l| l.starts_with("ok ")).count();
        let failed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAILED")).collect();
        println!("{}: held-output probe {}; {ok} checks passed before, failed: {failed:?}", v.name, signal_or_code(out.status));
        assert!(!out.status.success(), "{}: the held-output probe passed on a fix the suite must reject:\n{stdout}", v.name);
        report_note(&format!("{}: held output of an unevaluated split: {} after {ok} passing checks", v.name, signal_or_code(out.status)));
    }
}

#[test]
fn mlx_suite_regresses_on_wrong_fixes() {
    let wrong = variants_to_reject();
    if wrong.is_empty() {
        return;
    }
    let control = variant("pristine");
    let pristine = run_mlx_suite(control);
    assert!(pristine.finished, "the control's suite must run to the end");
    for v in wrong {
        // The binary must load and list its cases: a suite that cannot even
        // start is a broken check, not a rejected fix.
        let list = Command::new(v.mlx_tests).arg("--list-test-cases").output().expect("run MLX's tests");
        assert!(list.status.success() && String::from_utf8_lossy(&list.stdout).contains("test "), "{}: MLX's tests do not start: {}", v.name, String::from_utf8_lossy(&list.stderr));
        let run = run_mlx_suite(v);
        let regressions: Vec<&String> = pristine.cases.iter().filter(|(n, &ok)| ok && run.cases.get(*n) == Some(&false)).map(|(n, _)| n).collect();
        let verdict = if run.finished { format!("finished, {} regressions against the control: {regressions:?}", regressions.len()) } else { format!("{} before finishing", signal_or_code(run.status)) };
        println!("{}: MLX's suite {verdict}", v.name);
        assert!(!run.finished || !regressions.is_empty(), "{}: MLX's suite shows nothing wrong with a fix the suite must reject", v.name);
        report_note(&format!("{}: MLX's own suite {verdict}", v.name));
    }
}
