use super::cargo_test_exit_problem;

const RAN_TWO: &str = "\
 Running unittests src/lib.rs (target/debug/deps/mlx_rs-1)
 Running tests/ops.rs (target/debug/deps/ops-2)
";

#[test]
fn a_clean_run_and_a_run_with_named_failures_agree_with_their_exit() {
    let ok = "test result: ok. 10 passed; 0 failed\n\ntest result: ok. 3 passed; 0 failed\n";
    assert_eq!(cargo_test_exit_problem(ok, RAN_TWO, true), None);
    let failed =
        "test result: FAILED. 9 passed; 1 failed\n\ntest result: ok. 3 passed; 0 failed\n";
    let stderr = format!(
        "{RAN_TWO}error: test failed, to rerun pass `--lib`\n\nCaused by:\n  process didn't exit successfully: `target/debug/deps/mlx_rs-1` (exit status: 101)\n"
    );
    assert_eq!(cargo_test_exit_problem(failed, &stderr, false), None);
}

#[test]
fn a_binary_that_crashes_after_its_last_test_is_a_problem() {
    let ok = "test result: ok. 10 passed; 0 failed\n\ntest result: ok. 3 passed; 0 failed\n";
    let stderr = format!(
        "{RAN_TWO}error: test failed, to rerun pass `--test ops`\n\nCaused by:\n  process didn't exit successfully: `target/debug/deps/ops-2` (signal: 6, SIGABRT: process abort signal)\n"
    );
    let problem = cargo_test_exit_problem(ok, &stderr, false).unwrap();
    assert!(problem.contains("SIGABRT"), "{problem}");
}

#[test]
fn a_binary_that_dies_mid_run_or_a_run_of_nothing_is_a_problem() {
    let one = "test result: ok. 10 passed; 0 failed\n";
    let stderr = format!(
        "{RAN_TWO}  process didn't exit successfully: `target/debug/deps/ops-2` (signal: 11, SIGSEGV: invalid memory reference)\n"
    );
    assert!(cargo_test_exit_problem(one, &stderr, false).is_some());
    assert!(cargo_test_exit_problem("", "", true).is_some());
}
