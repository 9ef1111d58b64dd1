//! MLX's own C++ test suite (doctest), built from each variant's tree. The
//! pristine tree carries the series' new tests but not its library change,
//! so the new tests show the bug there; nothing that passes on pristine may
//! fail on patched. The GGUF cases are excluded by name: GGUF is built off.

use mlx_fork::{Variant, VARIANTS};
use mlx_patched::{patch, MLX_TESTS_EXCLUDED};
use std::collections::BTreeMap;
use std::process::Command;

fn unescape(s: &str) -> String {
    s.replace("&apos;", "'").replace("&quot;", "\"").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

/// Test case name -> passed, from doctest's JUnit report.
fn run_suite(variant: &Variant) -> BTreeMap<String, bool> {
    let out = Command::new(variant.mlx_tests)
        .args(["--reporters=junit", "--no-colors", &format!("--test-case-exclude={}", MLX_TESTS_EXCLUDED.join(","))])
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", variant.mlx_tests));
    let xml = String::from_utf8_lossy(&out.stdout);
    assert!(xml.contains("</testsuites>"), "{} suite did not finish (crash?):\n{}", variant.name, String::from_utf8_lossy(&out.stderr));
    let mut cases = BTreeMap::new();
    for chunk in xml.split("<testcase ").skip(1) {
        let name = chunk.split(" name=\"").nth(1).and_then(|r| r.split('"').next()).expect("testcase name");
        let body = chunk.split("</testcase>").next().unwrap();
        let failed = body.contains("<failure") || body.contains("<error");
        let passed = cases.get(&unescape(name)).copied().unwrap_or(true) && !failed;
        cases.insert(unescape(name), passed);
    }
    cases
}

/// Test cases the patch series adds to MLX's suite.
fn new_cases() -> Vec<String> {
    let mut names = Vec::new();
    let dir = std::env::var_os("MLX_PATCHED_SERIES_DIR").map(Into::into).unwrap_or_else(patch::series_dir);
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
    // No control when upstream itself is fixed (MLX_FORK_UPSTREAM_FIXED):
    // then every variant must simply pass MLX's suite.
    let control = VARIANTS.iter().find(|v| !v.leak_free).map(|control| {
        assert!(!new.is_empty(), "the series adds no test to MLX's suite");
        let pristine = run_suite(control);
        let pristine_failures: Vec<&String> = pristine.iter().filter(|(_, &ok)| !ok).map(|(n, _)| n).collect();
        println!("{}: {} test cases, failing: {pristine_failures:?}", control.name, pristine.len());
        assert!(!pristine_failures.is_empty(), "no new test fails on {}: they do not show the bug", control.name);
        assert!(pristine_failures.iter().all(|n| new.contains(n)), "{} fails an upstream test: {pristine_failures:?}", control.name);
        for name in &new {
            assert!(pristine.contains_key(name), "new test `{name}` must run on {} too", control.name);
        }
        (control, pristine)
    });

    for variant in VARIANTS.iter().filter(|v| v.leak_free) {
        let fixed = run_suite(variant);
        println!("{}: {} test cases; new: {new:?}", variant.name, fixed.len());
        if let Some((control, pristine)) = &control {
            let regressions: Vec<&String> = pristine.iter().filter(|(n, &ok)| ok && fixed.get(*n) != Some(&true)).map(|(n, _)| n).collect();
            assert!(regressions.is_empty(), "pass on {} but not on {}: {regressions:?}", control.name, variant.name);
        }
        let failures: Vec<&String> = fixed.iter().filter(|(_, &ok)| !ok).map(|(n, _)| n).collect();
        assert!(failures.is_empty(), "fail on {}: {failures:?}", variant.name);
        for name in &new {
            assert_eq!(fixed.get(name), Some(&true), "new test `{name}` must run and pass on {}", variant.name);
        }
    }
}
