//! MLX's own C++ test suite (doctest), built from each variant's tree and
//! run against its installed library. The pristine tree carries the series'
//! new tests but not its library change, so the new tests show the bug
//! there; nothing that passes on pristine may fail on a fix. Nothing is
//! excluded (`mlx_patched::MLX_TESTS_EXCLUDED` is empty): GGUF is built in.

use mlx_expectations::outcomes::by_word;
use mlx_fork::{control_and_fixes, run_mlx_suite, Expect, SuiteRun};

/// Per patch (by stem), the new cases that must fail on the control, which
/// lacks the patch: each shows that patch's bug. The series' other new cases
/// guard against a wrong fix and pass on the control: 0001's release by
/// destruction (the path the control already handles) and its live sibling
/// that must survive the release of the others.
const SHOW_THE_BUG: &[(&str, &[&str])] = &[
    (
        "0001-release-sibling-groups-on-every-path",
        &[
            "test sibling group released by copy assignment",
            "test sibling group released by move assignment",
            "test sibling group released by descriptor overwrite",
            "test sibling group released through a consumer's inputs",
            "test compile with multi-output primitive releases captures",
        ],
    ),
    (
        "0003-divmod-vmap-one-axis-per-output",
        &["test vmap divmod"],
    ),
    (
        "0004-compile-order-equivalent-multi-output-primitives",
        &["test compile merges equivalent multi-output primitives in order"],
    ),
    (
        "0005-lu-factor-size-in-elements",
        &["test lu factor counts elements not bytes"],
    ),
    (
        "0006-eig-rejects-non-finite-matrix",
        &["test eig of a matrix with infinite or NaN entries"],
    ),
    (
        "0007-compile-outputs-apart-from-returned-arrays",
        &["test compile returning a captured array"],
    ),
    (
        "0008-release-sibling-groups-under-a-lock",
        &["test sibling group released on two threads at once"],
    ),
    (
        "0010-cpu-task-count-survives-task-errors",
        &["test cpu task count survives task errors"],
    ),
    (
        "0011-import-runs-on-the-importing-threads-stream",
        &["test import function on another thread"],
    ),
    (
        "0012-export-keeps-stop-gradient",
        &["test imported function keeps stop_gradient"],
    ),
    (
        "0013-vmap-maps-a-broadcast-by-its-shape-inputs",
        &["test shapeless compile of vmap of a broadcast"],
    ),
    (
        "0014-compile-reads-a-lazily-loaded-capture-once",
        &["test compile shares a lazily loaded capture between shapes"],
    ),
    (
        "0015-slice-of-one-strided-element-keeps-its-stop",
        &[
            "test vjp of a one-element strided slice",
            "test vmap of a one-element strided slice",
        ],
    ),
    (
        "0016-scatter-vmap-puts-the-batch-axis-in-place",
        &["test vmap scatter updates with a source mapped past axis 0"],
    ),
    (
        "0017-view-to-another-item-size-keeps-its-last-axis",
        &[
            "test view to a smaller type of an array with a size-1 last axis",
            "test vmap view changing the item size over the last axis",
        ],
    ),
    (
        "0018-pad-vjp-pairs-sizes-with-axes-by-position",
        &["test pad vjp pairs pad sizes with axes by position"],
    ),
    (
        "0019-conv-input-gradient-uses-the-low-padding",
        &["test conv input vjp with unequal low and high padding"],
    ),
    (
        "0020-irfft-vmap-keeps-an-odd-length",
        &["test fft vmap of irfft with an odd output length"],
    ),
    (
        "0021-complex-vjps-conjugate-the-derivative",
        &["test complex unary grads against central differences"],
    ),
    (
        "0022-as-strided-and-slice-contiguous-only-without-holes",
        &[
            "test as_strided view that repeats and skips is not contiguous",
            "test slice of a view with holes is not contiguous",
        ],
    ),
    (
        "0023-reshape-recomputes-contiguity",
        &["test reshape without a copy recomputes contiguity"],
    ),
    (
        "0024-argmin-argmax-pick-the-first-nan",
        &["test argmin and argmax pick the first NaN"],
    ),
    (
        "0025-complex-is-true-when-either-part-is-nonzero",
        &["test complex64 is true when either part is nonzero"],
    ),
    (
        "0026-from-fp8-decodes-the-nan-codes",
        &["test from_fp8 decodes every E4M3 code"],
    ),
    (
        "0027-dynamic-slice-reads-strided-start-indices",
        &["test dynamic slice with non-contiguous start indices"],
    ),
    (
        "0028-logcumsumexp-of-integers-is-floating-point",
        &["test logcumsumexp of integers is floating point"],
    ),
    (
        "0029-complex-nan-sorts-last-and-wins-min-max",
        &["test complex NaN sorts last and wins minimum and maximum"],
    ),
    (
        "0030-bfloat16-sum-and-prod-accumulate-in-float32",
        &["test bfloat16 sum and prod accumulate in float32"],
    ),
    (
        "0031-split-outputs-get-their-real-span",
        &["test split of a reversed array"],
    ),
    (
        "0032-integer-division-by-zero-does-not-trap",
        &[
            "test integer division and remainder by zero",
            "test integer division of the lowest value by -1",
        ],
    ),
    (
        "0033-empty-sorts-and-scans-return-early",
        &["test sorts and scans of empty arrays"],
    ),
    (
        "0034-pad-pairs-sizes-with-axes-by-position",
        &["test pad with an axes subset or negative axes"],
    ),
    (
        "0035-floor-divide-of-signed-integers-rounds-down",
        &["test floor_divide of signed integers rounds down"],
    ),
    (
        "0036-npy-rejects-negative-dimensions",
        &["test load npy rejects negative and overflowing shapes"],
    ),
    (
        "0037-gguf-rejects-dimensions-that-do-not-fit",
        &["test gguf rejects dimensions that do not fit a shape"],
    ),
    (
        "0038-save-evaluates-before-opening-the-file",
        &["test save over the file a lazily loaded input reads"],
    ),
    (
        "0039-file-reader-advances-after-a-short-read",
        &["test load of a npy file with missing data throws"],
    ),
    (
        "0040-compile-keeps-returned-scalars-apart",
        &["test compile returning a scalar constant equal to another"],
    ),
    (
        "0041-eval-makes-a-default-stream-only-when-needed",
        &["test evaluating on an explicit stream makes no default stream"],
    ),
    (
        "0042-failed-distributed-backend-not-registered",
        &["test strict distributed init throws after a failed lenient init"],
    ),
];

/// Test cases each patch of the series adds to MLX's suite, by stem.
fn new_cases_by_patch() -> Vec<(String, Vec<String>)> {
    mlx_patched::run_series()
        .unwrap()
        .iter()
        .map(|file| {
            let names = std::fs::read_to_string(file)
                .unwrap()
                .lines()
                .filter_map(|l| l.strip_prefix("+TEST_CASE(\""))
                .map(|rest| rest.split("\")").next().unwrap().to_string())
                .collect();
            let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
            (stem, names)
        })
        .collect()
}

/// Test cases the patch series adds to MLX's suite.
fn new_cases() -> Vec<String> {
    new_cases_by_patch()
        .into_iter()
        .flat_map(|(_, names)| names)
        .collect()
}

#[test]
fn every_patch_with_new_cases_names_those_that_show_its_bug() {
    for (stem, names) in new_cases_by_patch() {
        let listed = SHOW_THE_BUG.iter().find(|(s, _)| *s == stem);
        if names.is_empty() {
            assert!(
                listed.is_none(),
                "{stem} adds no case, yet SHOW_THE_BUG names some"
            );
            continue;
        }
        let (_, shown) = listed.unwrap_or_else(|| {
            panic!("{stem} adds cases {names:?}: name in SHOW_THE_BUG those that show its bug")
        });
        assert!(!shown.is_empty(), "{stem}: no case shows its bug");
        for case in *shown {
            assert!(
                names.iter().any(|n| n == case),
                "{stem}: `{case}` is not one of its new cases {names:?}"
            );
        }
    }
}

#[test]
fn mlx_suite_fixed_variants_keep_every_control_pass_and_new_tests_show_the_bug() {
    let new = new_cases();
    let variants = control_and_fixes();
    // The series' tests show its bugs on the unpatched tree. That holds
    // when upstream fixed the leak itself (MLX_FORK_UPSTREAM_FIXED, where a
    // rebase keeps only the fixes upstream lacks) as much as on the pin;
    // only a series without tests leaves every variant to simply pass.
    let pristine = variants
        .iter()
        .find(|v| v.name == mlx_patched::Variant::PRISTINE.name);
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
        // Each patch's bug shows on its own: every case named for it fails.
        for (stem, names) in new_cases_by_patch() {
            let shown = SHOW_THE_BUG
                .iter()
                .find(|(s, _)| *s == stem)
                .map_or(&[][..], |(_, c)| *c);
            for case in shown.iter().filter(|c| names.iter().any(|n| n == *c)) {
                assert_eq!(
                    pristine.cases.get(*case),
                    Some(&false),
                    "{stem}'s `{case}` must fail on {}: it no longer shows the bug",
                    control.name
                );
            }
        }
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
            let word = |ok: &bool| if *ok { "passed" } else { "failed" };
            let regressions = mlx_expectations::outcomes::regressions(
                &by_word(pristine.cases.iter().map(|(n, ok)| (n, word(ok)))),
                &by_word(fixed.cases.iter().map(|(n, ok)| (n, word(ok)))),
            );
            assert!(
                regressions.is_empty(),
                "worse on {} than on {}: {regressions:?}",
                variant.name,
                control.name
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

#[test]
fn a_fixed_suite_that_crashes_after_its_last_case_fails_the_check() {
    // One quick case that passes everywhere, then SIGABRT at exit: the
    // report is complete and clean, so only the exit status can tell.
    let variant = control_and_fixes()
        .into_iter()
        .find(|v| v.name != mlx_patched::Variant::PRISTINE.name)
        .expect("a fixed variant");
    let lib = mlx_patched::probes::abort_at_exit_library(std::path::Path::new(env!(
        "CARGO_TARGET_TMPDIR"
    )))
    .unwrap();
    let out = std::process::Command::new(variant.mlx_tests)
        .args([
            "--reporters=junit",
            "--no-colors",
            "--test-case=test arange",
        ])
        .env(mlx_patched::probes::PRELOAD, &lib)
        .output()
        .unwrap();
    let xml = String::from_utf8_lossy(&out.stdout);
    let case = xml
        .split("<testcase ")
        .nth(1)
        .expect("the report names the case");
    let run = SuiteRun {
        cases: [(
            "test arange".to_string(),
            !case.contains("<failure") && !case.contains("<error"),
        )]
        .into_iter()
        .collect(),
        finished: xml.contains("</testsuites>"),
        crashed: Vec::new(),
        status: out.status,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(case.contains("name=\"test arange\""), "{xml}");
    assert_eq!(run.cases.get("test arange"), Some(&true), "{run:?}");
    assert!(run.finished, "the report was not closed: {run:?}");
    let problem = run.exit_problem();
    assert!(
        problem.as_deref().is_some_and(|p| p.contains("SIGABRT")),
        "a crash after the last case passed the check: {run:?}"
    );
}
