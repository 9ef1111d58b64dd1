use super::judge::{judge, render};
use super::*;
use mlx_harness::tally::Tally;
use mlx_patched::Expect;

fn state(what: &str, version: &str, verdict: Expect, mib: i64) -> State {
    State {
        want: Expected {
            what: what.into(),
            version: version.into(),
            libmlx: "f".repeat(64),
            verdict,
        },
        versions: vec![Some(version.into()); 2],
        loaded: Ok(("/venv/mlx/lib/libmlx.so".into(), "f".repeat(64))),
        mib: vec![mib; 10],
    }
}

fn good() -> Evidence {
    let ran = Ran {
        success: true,
        status: "exit status: 0".into(),
        ..Ran::default()
    };
    Evidence {
        states: vec![
            state("the fork alone", "0.32.2+fork.1", Expect::Fixed, 0),
            state("upstream alone", "0.32.2", Expect::Leaks, 24),
        ],
        uninstalls: vec![("the fork alone".into(), vec![], vec!["mlx/include".into()])],
        skipped: None,
        mypy: Some(Mypy {
            version: "0.32.2+fork.1".into(),
            report: (true, "Success: no issues found in 1 source file".into()),
            ill_typed: (false, "error: Incompatible types in assignment (expression has type \"array\", variable has type \"str\")".into()),
        }),
        packed_twice: vec![("mlx.whl".into(), "a".repeat(64), "a".repeat(64))],
        tags: vec![
            Tags {
                name: "mlx-0.32.2-cp311-cp311-manylinux_2_35_x86_64.whl".into(),
                frontend: true,
                ran: ran.clone(),
                found: "manylinux_2_35_x86_64".into(),
                outside: vec!["libmlx.so".into()],
                size: 1 << 20,
            },
        ],
    }
}

fn failures(e: &Evidence) -> Vec<String> {
    let mut t = Tally::new();
    judge(e, &mut t);
    t.failures
}

#[test]
fn the_paths_as_measured_pass() {
    let mut t = Tally::new();
    judge(&good(), &mut t);
    assert_eq!(t.failures, Vec::<String>::new());
    assert_eq!(t.passed, 2 * 3 + 1 + 2 + 1 + 1);
}

#[test]
fn a_state_must_be_its_build_and_leak_as_its_verdict_says() {
    let mut e = good();
    e.states[0].versions[1] = Some("0.32.2".into());
    e.states[0].loaded = Err(mlx_harness::error::anyhow!("no libmlx loaded"));
    e.states[1].mib = vec![0; 10];
    let f = failures(&e);
    assert_eq!(f.len(), 3, "{f:?}");
    assert!(f[1].contains("none (no libmlx loaded)"), "{f:?}");
}

#[test]
fn a_file_left_after_uninstall_fails_and_an_empty_folder_does_not() {
    let mut e = good();
    assert!(failures(&e).is_empty());
    e.uninstalls[0].1.push("mlx/core.so".into());
    assert_eq!(failures(&e).len(), 1);
}

#[test]
fn mypy_must_read_the_stubs_and_the_wheels_their_tags() {
    let mut e = good();
    e.mypy.as_mut().unwrap().ill_typed =
        (false, "error: Module has no attribute \"sum\"".into());
    e.packed_twice[0].2 = "b".repeat(64);
    e.tags[0].outside.push("libgfortran.so.5".into());
    assert_eq!(failures(&e).len(), 3);
    e.mypy = None;
    assert!(failures(&e).contains(&"mypy did not run against the stubs".to_string()));
}

#[test]
fn a_skipped_path_is_a_row_and_the_rows_keep_their_order() {
    let mut e = good();
    e.skipped = Some("no index".into());
    let rows: Vec<String> = render(&e).iter().map(|r| r.to_string()).collect();
    assert_eq!(rows.len(), 2 + 1 + 1 + 1 + 1, "{rows:#?}");
    assert!(rows[0].contains("Python install paths: the fork alone"));
    assert!(rows[2].contains("skipped: no index"));
    assert!(rows[3].contains("mypy on report.py"));
}
