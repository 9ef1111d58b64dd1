use super::*;
use mlx_fuzz::Kind;

const MIB: i64 = 1 << 20;

fn repeats(failures: u64) -> Repeats {
    Repeats {
        runs: u64::from(FLAKY_REPEATS),
        failures,
        hung: 0,
    }
}

fn suite(results: &[(&str, &str)]) -> SuiteResults {
    results
        .iter()
        .map(|(id, o)| (id.to_string(), (o.to_string(), format!("{o} because"))))
        .collect()
}

/// Evidence as the fork shows it: pristine leaks 24 MiB a cycle in the
/// report's cell and shows its finding, patched retains nothing.
fn good() -> Evidence {
    let run = |variant: Variant, retained: i64| AblationRun {
        variant,
        retained: vec![retained; 10],
        digests: vec!["d1".into()],
    };
    Evidence {
        show_the_bug: vec![("0099-x".into(), "d".into())],
        report: vec![
            (Variant::PRISTINE, vec![24; 10]),
            (Variant::PATCHED, vec![0; 10]),
        ],
        install: crate::pip_installs::judge::Evidence {
            skipped: Some("install paths".into()),
            mypy: Some(crate::pip_installs::judge::Mypy {
                version: "1".into(),
                report: (true, String::new()),
                ill_typed: (false, "Incompatible types in assignment \"array\"".into()),
            }),
            ..Default::default()
        },
        ablation: vec![Ablation {
            cell: Cell::REPORT,
            runs: vec![run(Variant::PRISTINE, 24 * MIB), run(Variant::PATCHED, 0)],
            cpp_digest: Some("d1".into()),
        }],
        second_shape: vec![SecondShape {
            variant: Variant::PATCHED,
            shapes: 2,
            live_one: MIB,
            live_all: 2 * MIB,
            cache_all: 0,
            traces: vec![2, 2],
            retained: 0,
        }],
        findings: [
            (Variant::PRISTINE, true, Some(1), "leaked_bytes 64"),
            (Variant::PATCHED, false, Some(0), "leaked_bytes 0"),
        ]
        .into_iter()
        .map(|(variant, must_show, code, said)| FindingRun {
            script: "f.py".into(),
            variant,
            kind: Kind::Leak,
            must_show,
            status: format!("exit status: {}", code.unwrap()),
            code,
            signal: None,
            said: said.into(),
        })
        .collect(),
        suites: [
            (
                Variant::PRISTINE.name,
                suite(&[
                    ("a", "passed"),
                    ("b", "failed"),
                    ("c", "flaky"),
                    ("d", "error"),
                ]),
            ),
            (
                Variant::PATCHED.name,
                suite(&[
                    ("a", "passed"),
                    ("b", "failed"),
                    ("c", "flaky"),
                    ("d", "passed"),
                ]),
            ),
        ]
        .into_iter()
        .collect(),
        repeats: BTreeMap::new(),
        fixed_layout: vec![
            LayoutRuns {
                variant: Variant::PRISTINE,
                leaked: [vec![112, 432], vec![112, 432]],
                layouts: 400,
                digest: "d".into(),
            },
            LayoutRuns {
                variant: Variant::PATCHED,
                leaked: [vec![], vec![]],
                layouts: 400,
                digest: "d".into(),
            },
        ],
        preamble: mlx_harness::kernel_preamble::Use {
            mlx_parsed_header: false,
            parsed_with: false,
            parsed_without: true,
            same_bytes: true,
        },
    }
}

/// The precompiled preamble must be read by MLX's compile and by g++ with
/// it, parsed without it, and give the same bytes: each departure fails
/// one claim.
#[test]
fn the_precompiled_preamble_must_be_read_and_give_the_same_bytes() {
    let ok = judge(&good(), &Expectations::new(false)).failures.len();
    for change in [
        |u: &mut mlx_harness::kernel_preamble::Use| u.mlx_parsed_header = true,
        |u: &mut mlx_harness::kernel_preamble::Use| u.parsed_with = true,
        |u: &mut mlx_harness::kernel_preamble::Use| u.parsed_without = false,
        |u: &mut mlx_harness::kernel_preamble::Use| u.same_bytes = false,
    ] {
        let mut bad = good();
        change(&mut bad.preamble);
        let failed = judge(&bad, &Expectations::new(false)).failures;
        assert_eq!(failed.len(), ok + 1, "{:?}: {failed:?}", bad.preamble);
    }
}

#[test]
fn the_fixed_layout_must_leak_alike_on_the_control_and_never_on_the_fix() {
    let e = good();
    let ok = judge(&e, &Expectations::new(false)).failures.len();
    for (i, leaked) in [
        // The control leaking elsewhere the second time.
        (0, [vec![112, 432], vec![112]]),
        // The control not leaking at all.
        (0, [vec![], vec![]]),
        // The fix leaking once.
        (1, [vec![], vec![48]]),
    ] {
        let mut bad = good();
        bad.fixed_layout[i].leaked = leaked.clone();
        let failed = judge(&bad, &Expectations::new(false)).failures;
        assert_eq!(failed.len(), ok + 1, "{leaked:?}: {failed:?}");
        assert!(failed.iter().any(|f| f.contains("fixed layout")));
    }
    let mut other_bits = good();
    other_bits.fixed_layout[1].digest = "e".into();
    assert_eq!(
        judge(&other_bits, &Expectations::new(false)).failures.len(),
        ok + 1
    );
}

fn failures(e: &Evidence) -> Vec<String> {
    judge(e, &Expectations::new(false)).failures
}

#[test]
fn the_fork_as_measured_passes() {
    let e = good();
    let t = judge(&e, &Expectations::new(false));
    assert_eq!(t.failures, Vec::<String>::new());
    // report ×2, mypy ×2, preamble ×2, ablation ×2 + agreement + C++,
    // shape, finding ×2, fixed layout ×2 + agreement, a test showing its
    // bug, suite, flaky
    assert_eq!(t.passed, 19);
}

#[test]
fn a_test_named_to_show_a_bug_must_fail_on_the_control_and_pass_on_the_fix() {
    for (on_pristine, on_patched) in [
        ("passed", "passed"),
        ("flaky", "passed"),
        ("error", "failed"),
        ("error", "flaky"),
    ] {
        let mut e = good();
        e.suites
            .get_mut(Variant::PRISTINE.name)
            .unwrap()
            .insert("d".into(), (on_pristine.into(), String::new()));
        e.suites
            .get_mut(Variant::PATCHED.name)
            .unwrap()
            .insert("d".into(), (on_patched.into(), String::new()));
        let f = failures(&e);
        assert!(
            f.iter().any(|f| f.starts_with("0099-x's Python test d")),
            "{on_pristine}/{on_patched}: {f:?}"
        );
    }
    // A test that did not run at all shows nothing.
    let mut e = good();
    e.suites
        .get_mut(Variant::PRISTINE.name)
        .unwrap()
        .remove("d");
    assert!(failures(&e).iter().any(|f| f.contains("None on pristine")));
}

#[test]
fn every_patch_that_adds_python_tests_names_those_that_show_its_bug() {
    let dir = mlx_harness::paths::workspace_root().join("patches");
    let mut with_tests = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "patch") {
            continue;
        }
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        let added = new_python_tests(&std::fs::read_to_string(&path).unwrap());
        let listed = SHOW_THE_BUG.iter().find(|(s, _)| *s == stem);
        if added.is_empty() {
            assert!(
                listed.is_none(),
                "{stem} adds no Python test, yet SHOW_THE_BUG names some"
            );
            continue;
        }
        with_tests.push(stem.clone());
        let (_, ids) = listed.unwrap_or_else(|| {
            panic!(
                "{stem} adds Python tests {added:?}: name in SHOW_THE_BUG those that show its bug"
            )
        });
        assert!(!ids.is_empty(), "{stem}: no Python test shows its bug");
        for id in *ids {
            let method = id.rsplit('.').next().unwrap();
            assert!(
                added.iter().any(|a| a == method),
                "{stem}: `{id}` is not one of its new tests {added:?}"
            );
        }
    }
    for (stem, _) in SHOW_THE_BUG {
        assert!(
            with_tests.iter().any(|s| s == stem),
            "SHOW_THE_BUG names {stem}, which adds no Python test"
        );
    }
    // Only the patches in a series count: on a base with the fixes
    // upstream, none of them is there.
    let one = [dir.join(format!("{}.patch", SHOW_THE_BUG[0].0))];
    assert_eq!(shown_in(&one).len(), SHOW_THE_BUG[0].1.len());
    assert!(shown_in(&[dir.join("0001-x.patch")]).is_empty());
}

#[test]
fn a_leak_on_patched_or_none_on_pristine_fails() {
    let mut e = good();
    e.report[1].1[9] = 24;
    e.ablation[0].runs[0].retained = vec![0; 10];
    let f = failures(&e);
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(f[0].starts_with("report.py on patched"), "{f:?}");
    assert!(
        f[1].starts_with("Python split / weights evaluated / compiled on pristine"),
        "{f:?}"
    );
    // Nine cycles are not the report's ten.
    let mut e = good();
    e.report[1].1.pop();
    assert_eq!(failures(&e).len(), 1);
    // Once the leak is upstream's fix too, pristine must not leak.
    assert!(!judge(&good(), &Expectations::new(true)).failures.is_empty());
}

#[test]
fn outputs_must_agree_across_variants_and_with_cpp() {
    let mut e = good();
    e.ablation[0].runs[1].digests = vec!["d2".into()];
    assert_eq!(failures(&e).len(), 1);
    let mut e = good();
    e.ablation[0].runs[1].digests.clear();
    assert!(failures(&e)[0].contains("outputs differ"));
    let mut e = good();
    e.ablation[0].cpp_digest = None;
    assert!(failures(&e)[0].starts_with("Python and C++ outputs differ"));
}

#[test]
fn a_finding_must_show_where_unfixed_and_run_clean_where_fixed() {
    let mut e = good();
    e.findings[0].code = Some(0);
    e.findings[0].said = "leaked_bytes 0".into();
    e.findings[1].code = Some(1);
    let f = failures(&e);
    assert_eq!(f.len(), 2, "{f:?}");
    assert!(f[0].ends_with("expected it to show its leak"), "{f:?}");
    assert!(f[1].ends_with("expected it to run clean"), "{f:?}");
}

#[test]
fn a_test_that_fails_on_patched_alone_fails_the_check() {
    let mut e = good();
    e.suites
        .get_mut(Variant::PATCHED.name)
        .unwrap()
        .insert("a".into(), ("error".into(), "boom".into()));
    assert!(failures(&e)[0].starts_with("MLX Python tests worse on patched"));
    let mut e = good();
    e.suites.remove(Variant::PRISTINE.name);
    assert_eq!(
        failures(&e),
        ["MLX's Python suite did not run on both variants"]
    );
}

#[test]
fn a_flaky_test_on_patched_alone_is_excused_only_by_like_repeats() {
    let mut e = good();
    e.suites
        .get_mut(Variant::PATCHED.name)
        .unwrap()
        .insert("a".into(), ("flaky".into(), "once".into()));
    assert_eq!(
        judged_alone(
            &e.suites[Variant::PRISTINE.name],
            &e.suites[Variant::PATCHED.name]
        ),
        ["a"]
    );
    // Not repeated: not excused.
    assert!(failures(&e)[0].contains("flaky or failing on patched and not alike"));
    e.repeats.insert("a".into(), (repeats(12), repeats(9)));
    assert!(failures(&e).is_empty());
    e.repeats.insert("a".into(), (repeats(30), repeats(0)));
    assert_eq!(failures(&e).len(), 1);
    // The repeats are rows of the table.
    assert!(render(&e).iter().any(|r| r
        .to_string()
        .contains("alone it failed 30 of 1000 runs on patched")));
}

/// A test that fails on patched, its retry in the same process too,
/// where pristine passed, is judged over independent processes: a like
/// rate on pristine excuses it (upstream's timing-dependent test), a
/// test that fails every run alone is a regression, and one that was
/// not repeated is not excused.
#[test]
fn a_lost_pass_is_judged_by_its_rate_alone_on_each_variant() {
    let mut e = good();
    e.suites
        .get_mut(Variant::PRISTINE.name)
        .unwrap()
        .insert("t".into(), ("passed".into(), String::new()));
    e.suites
        .get_mut(Variant::PATCHED.name)
        .unwrap()
        .insert("t".into(), ("error".into(), "raised early".into()));
    assert_eq!(
        judged_alone(
            &e.suites[Variant::PRISTINE.name],
            &e.suites[Variant::PATCHED.name]
        ),
        ["t"]
    );
    assert!(failures(&e)
        .iter()
        .any(|f| f.contains("worse on patched") && f.contains("\"t\"")));
    e.repeats.insert("t".into(), (repeats(21), repeats(28)));
    assert!(failures(&e).is_empty(), "{:?}", failures(&e));
    e.repeats.insert("t".into(), (repeats(1000), repeats(0)));
    assert!(failures(&e)
        .iter()
        .any(|f| f.contains("flaky or failing on patched")));
}

#[test]
fn a_flaky_test_is_excused_only_by_a_like_rate_on_pristine() {
    let judge = |p: u64, q: u64| flaky_regression(&repeats(p), &repeats(q));
    assert!(
        !judge(3, 0),
        "a rare failure on patched alone is no evidence"
    );
    assert!(!judge(0, 0), "failing alone on neither");
    assert!(!judge(4, 2), "as measured: 4 and 2 of 1000");
    assert!(!judge(12, 9));
    assert!(!judge(5, 40));
    assert!(judge(12, 0), "twelve on patched, none on pristine");
    assert!(judge(30, 3), "ten times pristine's rate");
    assert!(judge(200, 10), "far more often on patched");
    // Rates, not counts: pristine's 5 of 100 runs is patched's 50 of 1000.
    let fewer = Repeats {
        runs: 100,
        failures: 5,
        hung: 0,
    };
    assert!(!flaky_regression(&repeats(50), &fewer));
    assert!(flaky_regression(&repeats(50), &repeats(5)));
    // The tail itself: P(X >= 2) for X ~ Binomial(3, 0.5) is 1/2.
    assert!((binomial_tail(3, 2, 0.5) - 0.5).abs() < 1e-12);
    assert!((binomial_tail(10, 10, 0.5) - 1.0 / 1024.0).abs() < 1e-12);
}

#[test]
fn the_rows_follow_the_order_the_check_ran_in() {
    let rows: Vec<String> = render(&good()).iter().map(|r| r.to_string()).collect();
    assert_eq!(rows.len(), 2 + 2 + 1 + 1 + 2 + 2 + 1 + 1 + 2, "{rows:#?}");
    assert!(rows[0].contains("verbatim on pristine"));
    assert!(rows[2].contains("skipped: install paths"));
    assert!(rows[3].contains("mypy on report.py"));
    assert!(rows[4].contains("Python: split / weights evaluated / compiled"));
    assert!(rows[5].contains("2 compiled shape(s)"));
    assert!(rows[10].contains("fail on both (1): failed because"));
    assert!(rows[11].contains("precompiled preamble"));
    assert!(rows[12].contains("fixed heap layout (finding 013) on pristine: leaked at 2 of 400"));
}
