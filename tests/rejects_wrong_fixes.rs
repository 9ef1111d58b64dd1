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

use mlx_fork::{
    assert_loads, rejection, report_note, report_row, run_mlx_suite, run_probe, signal_or_code,
    variant, wrong_fixes, Cell, Expect, Variant, VARIANTS,
};
use mlx_patched::Env;
use std::process::Command;

/// Whether this run has variants to reject. On an upstream that fixed the
/// leak (a base such as 0.32.4, or a rebase's target under
/// `MLX_FORK_UPSTREAM_FIXED`) none is built, since the rejected fixes are
/// written against the leaking upstream.
fn variants_to_reject() -> Vec<&'static Variant> {
    let wrong = wrong_fixes();
    if mlx_patched::Expectations::from_env(&Env::process()).upstream_fixed() {
        assert!(
            wrong.is_empty(),
            "no rejected fix is built against a fixed upstream"
        );
        println!("upstream fixed the leak itself: no rejected fix to check");
    } else {
        assert!(
            !wrong.is_empty(),
            "the variant table has no rejected fix: the suite would not show that it rejects one"
        );
    }
    wrong
}

#[test]
fn report_scenario_still_leaks_on_wrong_fixes() {
    let wrong = variants_to_reject();
    let args = [
        "--cycles", "3", "--blocks", "24", "--dim", "512", "--batch", "8",
    ];
    let mut cells = Vec::new();
    let mut digests = Vec::new();
    for v in VARIANTS {
        let run = run_probe(v, |v| v.probe(mlx_patched::probes::LEAK_SCENARIO), &args);
        digests.push(run.digest());
        let retained = run.retained();
        cells.push((v.name.to_string(), run.mean_retained() as f64));
        if v.expect == Expect::Wrong {
            let bound = Cell::REPORT.bound(Expect::Wrong);
            assert!(bound.admits_all(&retained), "{}: a wrong fix must still leak {bound} every cycle, as the control does, retained {retained:?}", v.name);
        }
    }
    if !wrong.is_empty() {
        report_row(
            "rejected fix: the report's scenario, 3 cycles",
            cells,
            digests.windows(2).all(|w| w[0] == w[1]),
        );
    }
}

#[test]
fn held_output_breaks_on_wrong_fixes() {
    let wrong = variants_to_reject();
    if wrong.is_empty() {
        return;
    }
    // The probe itself works: on the control every held output evaluates right.
    let control = Command::new(variant(mlx_patched::Variant::PRISTINE).probe(mlx_patched::probes::HELD_OUTPUT))
        .output()
        .expect("run the held-output probe");
    let listed = String::from_utf8_lossy(&control.stdout);
    assert!(
        control.status.success() && listed.lines().any(|l| l.starts_with("ok ")),
        "the held-output probe fails on the control ({}):\n{listed}",
        control.status
    );
    for v in wrong {
        // A probe that cannot load is a broken build, not a rejected fix.
        assert_loads(v.probe(mlx_patched::probes::HELD_OUTPUT));
        let out = Command::new(v.probe(mlx_patched::probes::HELD_OUTPUT))
            .output()
            .expect("run the held-output probe");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let verdict = rejection(out.status, &stdout).unwrap_or_else(|e| {
            panic!(
                "{}: the held-output probe did not reject the fix: {e}\n{stdout}",
                v.name
            )
        });
        println!("{}: held-output probe {verdict}", v.name);
        report_note(&format!(
            "{}: held output of an unevaluated split: {verdict}",
            v.name
        ));
    }
}

#[test]
fn mlx_suite_regresses_on_wrong_fixes() {
    let wrong = variants_to_reject();
    if wrong.is_empty() {
        return;
    }
    let control = variant(mlx_patched::Variant::PRISTINE);
    let pristine = run_mlx_suite(control);
    assert!(pristine.finished, "the control's suite must run to the end");
    for v in wrong {
        // The binary must load and list its cases: a suite that cannot even
        // start is a broken check, not a rejected fix.
        let list = Command::new(v.mlx_tests)
            .arg("--list-test-cases")
            .output()
            .expect("run MLX's tests");
        assert!(
            list.status.success() && String::from_utf8_lossy(&list.stdout).contains("test "),
            "{}: MLX's tests do not start: {}",
            v.name,
            String::from_utf8_lossy(&list.stderr)
        );
        let run = run_mlx_suite(v);
        let regressions: Vec<&String> = pristine
            .cases
            .iter()
            .filter(|(n, &ok)| ok && run.cases.get(*n) == Some(&false))
            .map(|(n, _)| n)
            .collect();
        let verdict = if run.finished {
            format!(
                "finished, {} regressions against the control: {regressions:?}",
                regressions.len()
            )
        } else {
            format!("{} before finishing", signal_or_code(run.status))
        };
        println!("{}: MLX's suite {verdict}", v.name);
        // An unfinished run rejects the fix only if it crashed: a kill from
        // outside (SIGKILL: the OOM killer, a timeout) or an exit status
        // says nothing about the fix.
        let crashed = {
            use std::os::unix::process::ExitStatusExt;
            matches!(run.status.signal(), Some(4 | 6 | 7 | 8 | 11))
        };
        assert!(
            !regressions.is_empty() || (!run.finished && crashed),
            "{}: MLX's suite shows nothing wrong with a fix the suite must reject ({verdict})",
            v.name
        );
        report_note(&format!("{}: MLX's own suite {verdict}", v.name));
    }
}
