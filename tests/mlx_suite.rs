//! MLX's own C++ test suite (doctest), built from each variant's tree and
//! run against its installed library. The pristine tree carries the series'
//! new tests but not its library change, so the new tests show the bug
//! there; nothing that passes on pristine may fail on a fix. Nothing is
//! excluded (`mlx_patched::MLX_TESTS_EXCLUDED` is empty): GGUF is built in.

use mlx_fork::{control_and_fixes, run_mlx_suite, run_mlx_suite_with, Expect};
use mlx_patched::{patch, Env};

/// Test cases the patch series adds to MLX's suite.
fn new_cases() -> Vec<String> {
    let mut names = Vec::new();
    let dir = Env::process()
        .series_dir()
        .unwrap_or_else(patch::series_dir);
    for file in patch::series(&dir).unwrap() {
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            if let Some(rest) = line.strip_prefix("+TEST_CASE(\"") {
                names.push(rest.split("\")").next().unwrap().to_string());
            }
        }
    }
    names
}

#[test]
fn mlx_suite_fixed_variants_keep_every_control_pass_and_new_tests_show_the_bug() {
    let new = new_cases();
    let variants = control_and_fixes();
    // The series' tests show its bugs on the unpatched tree. That holds
    // when upstream fixed the leak itself (MLX_FORK_UPSTREAM_FIXED, where a
    // rebase keeps only the fixes upstream lacks) as much as on the pin;
    // only a series without tests leaves every variant to simply pass.
    let pristine = variants.iter().find(|v| v.name == "pristine");
    if pristine.is_some_and(|v| v.expect == Expect::Leaks) {
        assert!(!new.is_empty(), "the series adds no test to MLX's suite");
    }
    let control = pristine.filter(|_| !new.is_empty()).map(|control| {
        let pristine = run_mlx_suite(control);
        assert!(
            pristine.finished,
            "{} suite did not finish ({}):\n{}",
            control.name, pristine.status, pristine.stderr
        );
        let pristine_failures = pristine.failures();
        println!(
            "{}: {} test cases, failing: {pristine_failures:?}",
            control.name,
            pristine.cases.len()
        );
        assert!(
            !pristine_failures.is_empty(),
            "no new test fails on {}: they do not show the bug",
            control.name
        );
        assert!(
            pristine_failures.iter().all(|n| new.contains(n)),
            "{} fails an upstream test: {pristine_failures:?}",
            control.name
        );
        for name in &new {
            assert!(
                pristine.cases.contains_key(name),
                "new test `{name}` must run on {} too",
                control.name
            );
        }
        (control, pristine)
    });

    for variant in variants
        .iter()
        .filter(|v| control.as_ref().is_none_or(|(c, _)| c.name != v.name))
    {
        let fixed = run_mlx_suite(variant);
        assert!(
            fixed.finished,
            "{} suite did not finish ({}):\n{}",
            variant.name, fixed.status, fixed.stderr
        );
        if let Some(problem) = fixed.exit_problem() {
            panic!("{}: {problem}:\n{}", variant.name, fixed.stderr);
        }
        println!(
            "{}: {} test cases; new: {new:?}",
            variant.name,
            fixed.cases.len()
        );
        if let Some((control, pristine)) = &control {
            let regressions: Vec<&String> = pristine
                .cases
                .iter()
                .filter(|(n, &ok)| ok && fixed.cases.get(*n) != Some(&true))
                .map(|(n, _)| n)
                .collect();
            assert!(
                regressions.is_empty(),
                "pass on {} but not on {}: {regressions:?}",
                control.name,
                variant.name
            );
        }
        let failures = fixed.failures();
        assert!(
            failures.is_empty(),
            "fail on {}: {failures:?}",
            variant.name
        );
        for name in &new {
            assert_eq!(
                fixed.cases.get(name),
                Some(&true),
                "new test `{name}` must run and pass on {}",
                variant.name
            );
        }
    }
}

/// A shared library that aborts the process when it unloads, after `main`
/// returned: a stand-in for a crash in a static destructor.
fn abort_at_exit() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let lib = dir.join("abort_at_exit.so");
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/abort_at_exit.c"
        ))
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed to build abort_at_exit.so");
    lib
}

#[test]
fn a_fixed_suite_that_crashes_after_its_last_case_fails_the_check() {
    // One quick case that passes everywhere, then SIGABRT at exit: the
    // report is complete and clean, so only the exit status can tell.
    let variant = control_and_fixes()
        .into_iter()
        .find(|v| v.name != "pristine")
        .expect("a fixed variant");
    let lib = abort_at_exit();
    let preload = if cfg!(target_os = "macos") {
        "DYLD_INSERT_LIBRARIES"
    } else {
        "LD_PRELOAD"
    };
    let run = run_mlx_suite_with(
        variant,
        &[(preload, lib.to_str().unwrap())],
        &["--test-case=test arange"],
    );
    assert_eq!(run.cases.get("test arange"), Some(&true), "{run:?}");
    assert!(run.finished, "the report was not closed: {run:?}");
    let problem = run.exit_problem();
    assert!(
        problem.as_deref().is_some_and(|p| p.contains("SIGABRT")),
        "a crash after the last case passed the check: {run:?}"
    );
}
