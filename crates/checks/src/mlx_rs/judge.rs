//! The mlx-rs check's rules: what it measured ([`Evidence`], plain data),
//! the claims it must make ([`judge`]) and its rows ([`render`]), both
//! pure and tested here on made-up evidence.

use mlx_harness::process::Ran;
use mlx_harness::tally::Tally;
use mlx_expectations::outcomes::{by_word, failing_on_both, regressions, Outcome};
use mlx_expectations::report::Row;
use mlx_expectations::{Cell, RACE};
use mlx_patched::{Expectations, Variant};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One run of the proof program: its `cycle` lines.
pub struct Run {
    /// Bytes retained after each cycle.
    pub retained: Vec<i64>,
    /// The output digest of each cycle.
    pub digests: Vec<String>,
}

/// mlx-rs 0.33.0's own tests on one variant.
#[derive(Default)]
pub struct SuiteOutcome {
    /// Test name -> `ok`, `FAILED` or `ignored`.
    pub results: BTreeMap<String, String>,
    /// Why each failure failed.
    pub reasons: BTreeMap<String, String>,
    /// Why the run's exit disagrees with its results, if it does.
    pub exit_problem: Option<String>,
}

/// The report's cell over 10 cycles, the others over 3 (all at the
/// report's sizes).
pub const CELLS: &[(Cell, &str)] = &[
    (Cell::REPORT, "10"),
    (Cell::SLICES, "3"),
    (Cell::NOT_EVALUATED, "3"),
];

pub fn count(results: &BTreeMap<String, String>, outcome: &str) -> usize {
    results.values().filter(|o| *o == outcome).count()
}

/// Everything the mlx-rs check ran.
pub struct Evidence {
    /// `tests/mlx-rs` on each variant.
    pub proofs: Vec<Proof>,
    /// The C++ probe's digests for the report's cell, on patched.
    pub cpp_digests: Vec<String>,
    pub dependent: Dependent,
    /// mlx-rs's own tests on patched, and on the control when patched
    /// failed one.
    pub patched: SuiteOutcome,
    pub pristine: Option<SuiteOutcome>,
    /// One test that passed on patched, run again with a library that
    /// aborts as it unloads.
    pub aborted: (String, SuiteOutcome),
}

/// The proof program on one variant.
pub struct Proof {
    pub variant: Variant,
    pub cells: Vec<(Cell, Run)>,
    /// Trials that leaked, in each process of the release race.
    pub race_leaked: Vec<i64>,
    pub shims: Ran,
}

/// `tests/mlx-sys-dependent`, built offline with only the `[patch]` line.
pub struct Dependent {
    pub exe: PathBuf,
    /// Its binary run directly (no rpath, no `LD_LIBRARY_PATH`).
    pub direct: Ran,
    /// `readelf -d` of the binary (Linux).
    pub dynamic_section: Option<Ran>,
    /// `cargo run` and `cargo test`.
    pub cargo_runs: Vec<(&'static str, Ran)>,
    /// A second, no-op build.
    pub again: Ran,
}

pub fn judge(e: &Evidence, expectations: &Expectations) -> Tally {
    let mut t = Tally::new();
    for p in &e.proofs {
        let v = p.variant.name;
        for (c, run) in &p.cells {
            let bound = c.bound(expectations.verdict(&p.variant));
            t.claim(bound.admits_all(&run.retained), || {
                format!(
                    "mlx-rs {v} {}: retained {:?}, expected {bound} every cycle",
                    c.name(),
                    run.retained
                )
            });
        }
        // The control must leak in at least one process, a fix in no trial
        // of any.
        let shows = RACE.shows_on(v);
        let leaked = &p.race_leaked;
        t.claim(
            !leaked.is_empty()
                && if shows {
                    leaked.iter().any(|&k| k > 0)
                } else {
                    leaked.iter().all(|&k| k == 0)
                },
            || {
                format!(
                    "mlx-rs {v}: the release race leaked in {leaked:?} of {} trials per process (expected {})",
                    RACE.mlx_rs_trials,
                    if shows { "some in at least one process" } else { "none" }
                )
            },
        );
        t.claim(
            p.shims.success
                && p.shims
                    .stdout
                    .lines()
                    .filter(|l| l.ends_with(" ok"))
                    .count()
                    == 3,
            || {
                format!(
                    "mlx-rs {v}: shims failed: {}{}",
                    p.shims.stdout, p.shims.stderr
                )
            },
        );
    }
    // Bit-identical outputs across cycles and variants, every cell.
    for (c, _) in CELLS {
        t.claim(outputs_agree(e, *c), || {
            format!(
                "mlx-rs {}: outputs differ across cycles or variants: {:?}",
                c.name(),
                digests(e, *c)
            )
        });
    }
    // And with the C++ probe, for the report's cell.
    let rust = e
        .proofs
        .iter()
        .find(|p| p.variant == Variant::PATCHED)
        .and_then(|p| p.cells.iter().find(|(c, _)| *c == Cell::REPORT))
        .map(|(_, r)| r.digests.clone())
        .unwrap_or_default();
    let cpp = &e.cpp_digests;
    t.claim(!cpp.is_empty() && rust.first() == cpp.first(), || {
        format!("mlx-rs and the C++ probe computed different bits: {rust:?} vs {cpp:?}")
    });
    judge_dependent(&mut t, &e.dependent);
    // The fixed variant's run must end as its results say: a crash after
    // the last test is a failure no result line shows.
    t.claim(e.patched.exit_problem.is_none(), || {
        format!(
            "mlx-rs's tests on patched: {} (see target/mlx-rs/suite-patched.log)",
            e.patched.exit_problem.as_deref().unwrap_or_default()
        )
    });
    // And the exit check sees such a crash.
    let (one, aborted) = &e.aborted;
    let still_passed = aborted.results.get(one).map(String::as_str) == Some("ok");
    t.claim(aborted.exit_problem.is_some() && still_passed, || {
        format!(
            "mlx-rs's `{one}` with a library that aborts at unload: the exit check saw {:?} ({:?})",
            aborted.exit_problem,
            aborted.results.get(one)
        )
    });
    let (before, after) = words(e);
    let worse = regressions(&before, &after);
    t.claim(worse.is_empty(), || {
        format!("mlx-rs tests worse on patched than on pristine: {worse:?}")
    });
    t
}

fn judge_dependent(t: &mut Tally, d: &Dependent) {
    let exe = d.exe.display();
    t.claim(
        d.direct.success && d.direct.stdout.contains("twice(1.5) = 3\n"),
        || {
            format!(
                "{exe} run directly: {} {}{}",
                d.direct.status, d.direct.stdout, d.direct.stderr
            )
        },
    );
    if let Some(elf) = &d.dynamic_section {
        t.claim(elf.success && !elf.stdout.contains("libmlx"), || {
            format!("{exe} needs a shared libmlx: {}", elf.stdout)
        });
    }
    for (what, ran) in &d.cargo_runs {
        t.claim(ran.success, || {
            format!(
                "cargo {what} in tests/mlx-sys-dependent: {}\n{}{}",
                ran.status, ran.stdout, ran.stderr
            )
        });
    }
    t.claim(
        d.again.success && !d.again.stderr.contains("warning"),
        || {
            format!(
                "a no-op build of tests/mlx-sys-dependent warned: {}",
                d.again.stderr
            )
        },
    );
}

pub fn render(e: &Evidence) -> Vec<Row> {
    let mut rows = Vec::new();
    for (c, _) in CELLS {
        let cols = e
            .proofs
            .iter()
            .filter_map(|p| {
                let (_, r) = p.cells.iter().find(|(x, _)| x == c)?;
                let mean = r.retained.iter().sum::<i64>() / r.retained.len().max(1) as i64;
                Some((p.variant.name.to_string(), mean as f64))
            })
            .collect();
        rows.push(Row::retained(
            format!("mlx-rs 0.33: {}", c.name()),
            cols,
            outputs_agree(e, *c),
        ));
    }
    rows.push(Row::note(format!(
        "mlx-sys dependent, run directly: {}",
        e.dependent.direct.stdout.trim().replace('\n', "; ")
    )));
    let (patched, pristine) = (&e.patched.results, e.pristine.as_ref().map(|s| &s.results));
    let (before, after) = words(e);
    rows.push(Row::note(format!(
        "mlx-rs 0.33.0's own tests: patched {} passed / {} failed / {} ignored; the control {}; {} fail on both",
        count(patched, "ok"),
        count(patched, "FAILED"),
        count(patched, "ignored"),
        match pristine {
            Some(r) if !r.is_empty() => format!(
                "{} / {} / {}",
                count(r, "ok"),
                count(r, "FAILED"),
                count(r, "ignored")
            ),
            _ => "not run (nothing to excuse)".to_string(),
        },
        failing_on_both(&before, &after).len()
    )));
    rows
}

/// Each test that fails on both variants, with patched's reason.
pub fn failing_on_both_lines(e: &Evidence) -> Vec<String> {
    let (before, after) = words(e);
    failing_on_both(&before, &after)
        .iter()
        .map(|name| {
            let why = e
                .patched
                .reasons
                .get(name)
                .map(String::as_str)
                .unwrap_or("(see target/mlx-rs/suite-patched.log)");
            format!("{name}: {why}")
        })
        .collect()
}

/// The suites' outcomes as words: (the control's, patched's). The control
/// runs only when patched failed a test; without it, nothing is excused.
fn words(e: &Evidence) -> (BTreeMap<String, Outcome>, BTreeMap<String, Outcome>) {
    let words = |r: &BTreeMap<String, String>| by_word(r.iter().map(|(n, o)| (n, o.as_str())));
    let none = BTreeMap::new();
    (
        words(e.pristine.as_ref().map_or(&none, |s| &s.results)),
        words(&e.patched.results),
    )
}

fn digests(e: &Evidence, cell: Cell) -> Vec<&String> {
    e.proofs
        .iter()
        .filter_map(|p| p.cells.iter().find(|(c, _)| *c == cell))
        .flat_map(|(_, r)| &r.digests)
        .collect()
}

/// Every variant printed digests for the cell, and all of them agree.
fn outputs_agree(e: &Evidence, cell: Cell) -> bool {
    let every_variant = e.proofs.iter().all(|p| {
        p.cells
            .iter()
            .any(|(c, r)| *c == cell && !r.digests.is_empty())
    });
    every_variant && digests(e, cell).windows(2).all(|w| w[0] == w[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: i64 = 1 << 20;

    fn ran(success: bool, stdout: &str) -> Ran {
        Ran {
            success,
            status: if success {
                "exit status: 0"
            } else {
                "exit status: 1"
            }
            .into(),
            stdout: stdout.into(),
            stderr: String::new(),
        }
    }

    fn suite(results: &[(&str, &str)], exit_problem: Option<&str>) -> SuiteOutcome {
        SuiteOutcome {
            results: results
                .iter()
                .map(|(n, o)| (n.to_string(), o.to_string()))
                .collect(),
            reasons: BTreeMap::new(),
            exit_problem: exit_problem.map(String::from),
        }
    }

    fn proof(variant: Variant, report: i64, race: Vec<i64>) -> Proof {
        let run = |retained: i64| Run {
            retained: vec![retained; 3],
            digests: vec!["d".into(); 3],
        };
        Proof {
            variant,
            cells: CELLS
                .iter()
                .map(|(c, _)| {
                    (
                        *c,
                        run(if *c == Cell::REPORT {
                            report
                        } else {
                            c.bound(Expectations::new(false).verdict(&variant)).lo
                        }),
                    )
                })
                .collect(),
            race_leaked: race,
            shims: ran(true, "a ok\nb ok\nc ok\n"),
        }
    }

    /// As the fork measures: pristine leaks and races, patched does neither.
    fn good() -> Evidence {
        Evidence {
            proofs: vec![
                proof(Variant::PRISTINE, 24 * MIB, vec![0, 3, 0]),
                proof(Variant::PATCHED, 0, vec![0, 0, 0]),
            ],
            cpp_digests: vec!["d".into()],
            dependent: Dependent {
                exe: "dep".into(),
                direct: ran(true, "twice(1.5) = 3\n"),
                dynamic_section: Some(ran(true, "NEEDED libc.so.6")),
                cargo_runs: vec![("run", ran(true, "")), ("test", ran(true, ""))],
                again: ran(true, ""),
            },
            patched: suite(&[("a", "ok"), ("b", "ok")], None),
            pristine: None,
            aborted: (
                "a".into(),
                suite(
                    &[("a", "ok")],
                    Some("1 test binaries exited unsuccessfully"),
                ),
            ),
        }
    }

    fn failures(e: &Evidence) -> Vec<String> {
        judge(e, &Expectations::new(false)).failures
    }

    #[test]
    fn the_fork_as_measured_passes() {
        let t = judge(&good(), &Expectations::new(false));
        assert_eq!(t.failures, Vec::<String>::new());
        // 2 × (3 cells + race + shims), 3 agreements, C++, 5 dependent,
        // exit, abort seen, regressions.
        assert_eq!(t.passed, 10 + 3 + 1 + 5 + 3);
    }

    #[test]
    fn a_leak_or_a_race_on_patched_fails_and_so_does_a_silent_control() {
        let mut e = good();
        e.proofs[1].cells[0].1.retained = vec![24 * MIB; 3];
        e.proofs[1].race_leaked = vec![0, 1, 0];
        let f = failures(&e);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(
            f[1].contains("the release race leaked in [0, 1, 0]"),
            "{f:?}"
        );
        let mut e = good();
        e.proofs[0].race_leaked = vec![0, 0, 0];
        assert!(failures(&e)[0].contains("expected some in at least one process"));
        let mut e = good();
        e.proofs[1].race_leaked.clear();
        assert_eq!(failures(&e).len(), 1, "no trial is no evidence");
    }

    #[test]
    fn outputs_must_agree_and_be_there() {
        let mut e = good();
        e.proofs[1].cells[1].1.digests[2] = "other".into();
        assert!(failures(&e)[0].contains("outputs differ"));
        let mut e = good();
        for (_, r) in &mut e.proofs[1].cells {
            r.digests.clear();
        }
        // Every cell, and the C++ comparison, which reads patched's.
        assert_eq!(failures(&e).len(), 4);
        let mut e = good();
        e.cpp_digests.clear();
        assert!(failures(&e)[0].starts_with("mlx-rs and the C++ probe"));
    }

    #[test]
    fn a_crash_after_the_last_test_fails_and_must_be_seen() {
        let mut e = good();
        e.patched.exit_problem = Some("SIGABRT after the last test".into());
        assert!(failures(&e)[0].contains("SIGABRT"));
        let mut e = good();
        e.aborted.1.exit_problem = None;
        assert!(failures(&e)[0].contains("aborts at unload"));
    }

    #[test]
    fn a_failure_on_patched_alone_fails_and_one_on_both_is_excused() {
        let mut e = good();
        e.patched = suite(&[("a", "ok"), ("b", "FAILED")], None);
        assert!(
            failures(&e)[0].contains("worse on patched"),
            "no control ran: nothing is excused"
        );
        e.pristine = Some(suite(&[("a", "ok"), ("b", "FAILED")], None));
        assert!(failures(&e).is_empty());
        assert_eq!(
            failing_on_both_lines(&e),
            ["b: (see target/mlx-rs/suite-patched.log)"]
        );
        assert!(render(&e)
            .last()
            .unwrap()
            .to_string()
            .contains("the control 1 / 1 / 0; 1 fail on both"));
    }

    #[test]
    fn the_dependent_must_run_link_statically_and_build_quietly() {
        let mut e = good();
        e.dependent.direct = ran(false, "");
        e.dependent.dynamic_section = Some(ran(true, "NEEDED libmlx.so"));
        e.dependent.cargo_runs[1].1 = ran(false, "");
        e.dependent.again.stderr = "warning: unused".into();
        let f = failures(&e);
        assert_eq!(f.len(), 4, "{f:?}");
    }
}
