//! MLX's own C++ test suite (doctest), built from each variant's tree. The
//! pristine tree carries the series' new tests but not its library change,
//! so the new tests show the bug there; nothing that passes on pristine may
//! fail on patched. The GGUF cases are excluded by name: GGUF is built off.

use mlx_fork::{Variant, PATCHED, PRISTINE};
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
    for file in patch::series(&patch::series_dir()).unwrap() {
        for line in std::fs::read_to_string(&file).unwrap().lines() {
            if let Some(rest) = line.strip_prefix("+TEST_CASE(\"") {
                names.push(rest.split("\")").next().unwrap().to_string());
            }
        }
    }
    names
}

#[test]
fn mlx_suite_patched_keeps_every_pristine_pass_and_new_tests_show_the_bug() {
    let pristine = run_suite(&PRISTINE);
    let patched = run_suite(&PATCHED);
    let new = new_cases();
    assert!(!new.is_empty(), "the series adds no test to MLX's suite");
    println!("{} test cases on pristine, {} on patched; new: {new:?}", pristine.len(), patched.len());

    let regressions: Vec<&String> = pristine.iter().filter(|(n, &ok)| ok && patched.get(*n) != Some(&true)).map(|(n, _)| n).collect();
    assert!(regressions.is_empty(), "pass on pristine but not on patched: {regressions:?}");
    let patched_failures: Vec<&String> = patched.iter().filter(|(_, &ok)| !ok).map(|(n, _)| n).collect();
    assert!(patched_failures.is_empty(), "fail on patched: {patched_failures:?}");
    for name in &new {
        assert_eq!(patched.get(name), Some(&true), "new test `{name}` must run and pass on patched");
        assert!(pristine.contains_key(name), "new test `{name}` must run on pristine too");
    }
    let pristine_failures: Vec<&String> = pristine.iter().filter(|(_, &ok)| !ok).map(|(n, _)| n).collect();
    println!("fail on pristine: {pristine_failures:?}");
    assert!(!pristine_failures.is_empty(), "no new test fails on pristine: they do not show the bug");
    assert!(pristine_failures.iter().all(|n| new.contains(n)), "pristine fails an upstream test: {pristine_failures:?}");
}
