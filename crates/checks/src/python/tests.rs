use super::judge::Repeats;
use super::suite::{mlx_suite, repeat_tests, Tests};
use super::*;
use std::collections::BTreeMap;
use std::path::Path;

/// The runner on a small suite of its own: a pass, a failure, a test
/// that fails only its first time, and one that kills the interpreter.
#[test]
fn the_suite_runner_streams_results_retries_failures_and_names_a_crash() {
    let dir = std::env::temp_dir().join(format!("xtask-suite-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("python/tests")).unwrap();
    let tests = dir.join("python/tests");
    let marker = dir.join("ran-once");
    std::fs::write(
        tests.join("test_fake.py"),
        format!(
            "import os, unittest\n\
             class T(unittest.TestCase):\n\
             \x20   def test_a_pass(self): pass\n\
             \x20   def test_b_fail(self): self.assertEqual(1, 2)\n\
             \x20   def test_c_flaky(self):\n\
             \x20       first = not os.path.exists({m:?})\n\
             \x20       open({m:?}, 'w').close()\n\
             \x20       self.assertFalse(first)\n\
             \x20   def test_d_raises(self): raise RuntimeError('upstream said no')\n",
            m = marker.display().to_string()
        ),
    )
    .unwrap();
    let python = mlx_patched::Env::process().python();
    let python = Path::new(&python);
    let log = dir.join("log");
    let results = mlx_suite(python, &dir, Tests::Except(&[]), &log, &dir).unwrap();
    let outcome = |id: &str| results.get(id).map(|(o, _)| o.as_str());
    assert_eq!(outcome("test_fake.T.test_a_pass"), Some("passed"));
    assert_eq!(outcome("test_fake.T.test_b_fail"), Some("failed"));
    assert_eq!(outcome("test_fake.T.test_c_flaky"), Some("flaky"));
    assert_eq!(outcome("test_fake.T.test_d_raises"), Some("error"));
    // The control's form: the named tests only, a name that does not load
    // as its error, and nothing at all for no names.
    let only: Vec<String> = ["test_fake.T.test_b_fail", "test_fake.T.test_y_gone"]
        .map(String::from)
        .to_vec();
    let some = mlx_suite(python, &dir, Tests::Only(&only), &log, &dir).unwrap();
    assert_eq!(some.len(), 2, "{some:?}");
    assert_eq!(some["test_fake.T.test_b_fail"].0, "failed");
    assert_eq!(some["test_fake.T.test_y_gone"].0, "error");
    assert!(mlx_suite(python, &dir, Tests::Only(&[]), &log, &dir)
        .unwrap()
        .is_empty());
    // The form that sets tests apart: every test but the named, and a name
    // that matches no test as its error.
    let but = mlx_suite(
        python,
        &dir,
        Tests::Except(&["test_fake.T.test_b_fail", "test_fake.T.test_z_gone"]),
        &log,
        &dir,
    )
    .unwrap();
    assert!(!but.contains_key("test_fake.T.test_b_fail"), "{but:?}");
    assert_eq!(but["test_fake.T.test_a_pass"].0, "passed");
    assert_eq!(but["test_fake.T.test_z_gone"].0, "error");
    // Repeated alone: the failing test fails at once, the flaky one no more.
    let ids = [
        &"test_fake.T.test_b_fail".to_string(),
        &"test_fake.T.test_c_flaky".to_string(),
    ];
    let hang_after = std::time::Duration::from_secs(2);
    let repeated = repeat_tests(python, &dir, &ids, 5, hang_after).unwrap();
    let count = |id: &str| (repeated[id].failures, repeated[id].runs, repeated[id].hung);
    assert_eq!(count("test_fake.T.test_b_fail"), (5, 5, 0));
    assert_eq!(count("test_fake.T.test_c_flaky"), (0, 5, 0));
    // A test that raises alone fails, as one whose assertion fails does.
    let raises = "test_fake.T.test_d_raises".to_string();
    let repeated = repeat_tests(python, &dir, &[&raises], 3, hang_after).unwrap();
    assert_eq!(repeated[&raises].failures, 3);
    // A test that cannot be loaded alone gives no count to compare.
    let missing = "test_fake.T.test_z_missing".to_string();
    assert!(repeat_tests(python, &dir, &[&missing], 2, hang_after).is_err());
    // A run that never ends is killed and counts as a failure; the
    // other runs go on, each in a process of its own.
    let stuck = dir.join("stuck-once");
    std::fs::write(
        tests.join("test_hang.py"),
        format!(
            "import os, threading, unittest\n\
             class H(unittest.TestCase):\n\
             \x20   def test_hangs_on_its_third_run(self):\n\
             \x20       os.makedirs({m:?}, exist_ok=True)\n\
             \x20       n = 0\n\
             \x20       while True:\n\
             \x20           try:\n\
             \x20               os.close(os.open(os.path.join({m:?}, str(n)), os.O_CREAT | os.O_EXCL))\n\
             \x20               break\n\
             \x20           except FileExistsError:\n\
             \x20               n += 1\n\
             \x20       if n == 2: threading.Event().wait()\n",
            m = stuck.display().to_string()
        ),
    )
    .unwrap();
    let hangs = "test_hang.H.test_hangs_on_its_third_run".to_string();
    let repeated = repeat_tests(python, &dir, &[&hangs, ids[0]], 5, hang_after).unwrap();
    assert_eq!(
        repeated[&hangs],
        Repeats {
            runs: 5,
            failures: 1,
            hung: 1
        }
    );
    assert_eq!(repeated["test_fake.T.test_b_fail"].failures, 5);
    std::fs::remove_file(tests.join("test_hang.py")).unwrap();
    // A run whose process dies, before its result or after it, is a
    // failure.
    std::fs::write(
        tests.join("test_dies.py"),
        "import atexit, os, unittest\n\
         class D(unittest.TestCase):\n\
         \x20   def test_dies(self): os._exit(3)\n\
         \x20   def test_dies_after_passing(self): atexit.register(os._exit, 3)\n",
    )
    .unwrap();
    for dies in [
        "test_dies.D.test_dies",
        "test_dies.D.test_dies_after_passing",
    ] {
        let dies = dies.to_string();
        let repeated = repeat_tests(python, &dir, &[&dies], 2, hang_after).unwrap();
        assert_eq!(
            (repeated[&dies].failures, repeated[&dies].hung),
            (2, 0),
            "{dies}"
        );
    }
    std::fs::remove_file(tests.join("test_dies.py")).unwrap();

    std::fs::write(tests.join("test_fake.py"), "import os, unittest\nclass T(unittest.TestCase):\n    def test_a_pass(self): pass\n    def test_b_crash(self): os._exit(3)\n").unwrap();
    let err = mlx_suite(python, &dir, Tests::Except(&[]), &log, &dir)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("while running test_fake.T.test_b_crash"),
        "{err}"
    );
}

/// The control runs what the judge compares: every test that did not pass
/// on patched, and the series' tests, once each.
#[test]
fn the_control_runs_the_tests_patched_did_not_pass_and_the_series_own() {
    let patched: judge::SuiteResults = [
        ("a", "passed"),
        ("b", "failed"),
        ("c", "flaky"),
        ("d", "skipped"),
        ("e", "passed"),
    ]
    .into_iter()
    .map(|(id, o)| (id.to_string(), (o.to_string(), String::new())))
    .collect();
    let series = [
        ("0046-x".to_string(), "e".to_string()),
        ("0045-y".to_string(), "b".to_string()),
    ];
    assert_eq!(
        judge::control_subset(&patched, &series),
        ["b", "c", "d", "e"]
    );
    assert!(judge::control_subset(&BTreeMap::new(), &[]).is_empty());
}
