//! The mlx-lm check's rules: what it measured ([`Evidence`], plain data),
//! the claims it must make ([`judge`]) and its rows ([`render`]), both
//! pure and tested here on made-up evidence.

use mlx_expectations::outcomes::{by_word, failing_on_both, regressions, Outcome};
use mlx_expectations::report::Row;
use mlx_expectations::ServerCell;
use mlx_harness::peer_suite::{pytest_exit_problem, regression, Suite, RERUNS};
use mlx_harness::process::Ran;
use mlx_harness::tally::Tally;
use mlx_patched::{Expectations, Variant};
use std::collections::BTreeMap;
use std::process::ExitStatus;

/// The tests of mlx-lm's suite that are not run, each with its reason.
pub const EXCLUDED: &str = "tests/python/mlx_lm_excluded.txt";

/// Everything the mlx-lm check ran.
pub struct Evidence {
    /// mlx-lm's suite on the control, then on the fix.
    pub suites: Vec<SuiteRun>,
    /// Each test worse on patched in the suite, run alone [`RERUNS`] times
    /// on each: (id, failures on patched, failures on pristine).
    pub reruns: Vec<(String, u32, u32)>,
    pub aborted: Aborted,
    /// Each model-server cell, on each variant.
    pub server: Vec<(ServerCell, Vec<ServerRuns>)>,
    pub user: UserPath,
    pub numerics: Vec<Logits>,
}

pub struct SuiteRun {
    pub variant: Variant,
    pub results: Suite,
    /// Excluded (tests, whole modules).
    pub deselected: (usize, usize),
    pub status: ExitStatus,
}

/// One test that passed on patched, run again with a library that aborts
/// as it unloads.
pub struct Aborted {
    pub test: String,
    /// It still reported a pass.
    pub passed_alone: bool,
    pub status: ExitStatus,
}

/// One model-server cell's processes on one variant.
pub struct ServerRuns {
    pub variant: Variant,
    /// The weights' bytes.
    pub weights: i64,
    /// Bytes retained after each cycle, per process.
    pub runs: Vec<Vec<i64>>,
    /// The first process's output digests.
    pub digests: Vec<String>,
}

/// The install the README gives, tried as written.
pub struct UserPath {
    /// The pinned mlx-lm version.
    pub version: String,
    /// What the user runs: `pip <args>`.
    pub args: Vec<String>,
    /// Importing mlx and mlx_lm afterwards: the distributions' names, then
    /// the libmlx loaded.
    pub imported: Ran,
    /// Distribution name -> version, afterwards.
    pub installed: BTreeMap<String, String>,
    /// The fork's wheels' version.
    pub fork_version: String,
    /// Whether the libmlx loaded is the fork's (why not, if not).
    pub libmlx: mlx_harness::error::Result<()>,
    /// What `pip install mlx-lm[cpu]` would add over the fork.
    pub cpu_extra_adds: Vec<String>,
}

/// mlx-lm's logits, eager and compiled, on one variant.
pub struct Logits {
    pub arch: &'static str,
    pub variant: Variant,
    pub max_abs_diff: String,
    pub eager: String,
    pub compiled: String,
}

pub fn judge(e: &Evidence, expectations: &Expectations) -> Tally {
    let mut t = Tally::new();
    // The fixed variant's run must end as its results say.
    for s in e.suites.iter().filter(|s| s.variant != Variant::PRISTINE) {
        let failed = s
            .results
            .values()
            .filter(|(o, _)| o == "failed" || o == "error")
            .count();
        let problem = pytest_exit_problem(s.status, failed);
        t.claim(problem.is_none(), || {
            format!(
                "mlx-lm's suite on {}: {}",
                s.variant.name,
                problem.unwrap_or_default()
            )
        });
    }
    let (before, after) = words(e);
    // Each test worse on patched must be excused by its runs alone.
    let lost: Vec<String> = regressions(&before, &after)
        .iter()
        .map(|r| r.test().to_string())
        .filter(|id| {
            !e.reruns
                .iter()
                .any(|(r, p, q)| r == id && !regression(*p, *q))
        })
        .collect();
    t.claim(lost.is_empty(), || {
        format!("mlx-lm tests that came out worse on patched than on pristine in the suite and, run alone {RERUNS} times on each, are not flaky on pristine alike: {lost:?}")
    });
    let a = &e.aborted;
    let seen = pytest_exit_problem(a.status, 0);
    t.claim(a.passed_alone && seen.is_some(), || {
        format!(
            "mlx-lm's {} with a library that aborts at unload: passed {}, the exit check saw {seen:?}",
            a.test, a.passed_alone
        )
    });
    for (cell, on) in &e.server {
        for r in on {
            let verdict = ServerCell::judge(
                cell.expect(expectations.verdict(&r.variant)),
                r.weights,
                &r.runs,
            );
            t.claim(verdict.is_ok(), || {
                format!(
                    "{} on {}: {}",
                    cell.name(),
                    r.variant.name,
                    verdict.unwrap_err()
                )
            });
        }
        t.claim(same_bits(on), || {
            format!("{}: the variants computed different bits", cell.name())
        });
    }
    judge_user_path(&mut t, &e.user);
    for arch in e
        .numerics
        .iter()
        .map(|l| l.arch)
        .collect::<std::collections::BTreeSet<_>>()
    {
        let seen: Vec<(&str, &str)> = e
            .numerics
            .iter()
            .filter(|l| l.arch == arch)
            .map(|l| (l.eager.as_str(), l.compiled.as_str()))
            .collect();
        t.claim(seen.windows(2).all(|w| w[0] == w[1]), || {
            format!("mlx-lm {arch}: logits differ between the variants: {seen:?}")
        });
    }
    t
}

fn judge_user_path(t: &mut Tally, u: &UserPath) {
    let args = u.args.join(" ");
    let names = u.imported.stdout.lines().next().unwrap_or("");
    t.claim(
        u.imported.success
            && ["mlx", "mlx-cpu"]
                .iter()
                .all(|n| u.installed.get(*n) == Some(&u.fork_version)),
        || {
            format!(
                "after `pip {args}` over the fork: {} ({names}; {:?})",
                u.imported.status, u.installed
            )
        },
    );
    t.claim(u.libmlx.is_ok(), || {
        format!("after `pip {args}`: {:#}", u.libmlx.as_ref().unwrap_err())
    });
    t.claim(
        !u.cpu_extra_adds
            .iter()
            .any(|n| n == "mlx" || n == "mlx-cpu"),
        || cpu_extra_line(u),
    );
}

pub fn render(e: &Evidence) -> Vec<Row> {
    let mut rows: Vec<Row> = e.suites.iter().map(|s| Row::note(suite_line(s))).collect();
    for (id, p, q) in &e.reruns {
        rows.push(Row::note(format!("mlx-lm's {id}: alone, failed {p} of {RERUNS} runs on patched and {q} of {RERUNS} on pristine")));
    }
    for (cell, on) in &e.server {
        let cols = on
            .iter()
            .map(|r| {
                let all: Vec<i64> = r.runs.iter().flatten().copied().collect();
                let mean = all.iter().sum::<i64>() / all.len().max(1) as i64;
                (r.variant.name.to_string(), mean as f64)
            })
            .collect();
        rows.push(Row::retained(cell.name(), cols, same_bits(on)));
    }
    rows.push(Row::note(cpu_extra_line(&e.user)));
    for l in &e.numerics {
        rows.push(Row::note(format!(
            "mlx-lm {} logits on {}: compiled against eager, largest difference {}",
            l.arch, l.variant.name, l.max_abs_diff
        )));
    }
    rows
}

/// Each test that fails on both variants, with patched's detail.
pub fn failing_on_both_lines(e: &Evidence) -> Vec<String> {
    let (before, after) = words(e);
    let patched = e.suites.iter().find(|s| s.variant == Variant::PATCHED);
    failing_on_both(&before, &after)
        .into_iter()
        .map(|id| {
            let detail = patched
                .and_then(|s| s.results.get(&id))
                .map(|(_, d)| d.as_str())
                .unwrap_or_default();
            format!("{id}: {detail}")
        })
        .collect()
}

pub fn suite_line(s: &SuiteRun) -> String {
    let count = |o: &str| s.results.values().filter(|(x, _)| x == o).count();
    format!(
        "mlx-lm's suite on {}: {} passed, {} failed, {} skipped; excluded ({EXCLUDED}): {} tests and {} whole modules",
        s.variant.name,
        count("passed"),
        count("failed"),
        count("skipped"),
        s.deselected.0,
        s.deselected.1
    )
}

fn cpu_extra_line(u: &UserPath) -> String {
    format!(
        "`pip install mlx-lm[cpu]=={}` over the fork would install: {:?}",
        u.version, u.cpu_extra_adds
    )
}

/// (the control's outcomes, patched's). A missing suite is empty.
fn words(e: &Evidence) -> (BTreeMap<String, Outcome>, BTreeMap<String, Outcome>) {
    let of = |v: Variant| {
        e.suites
            .iter()
            .find(|s| s.variant == v)
            .map(|s| by_word(s.results.iter().map(|(n, (o, _))| (n, o.as_str()))))
            .unwrap_or_default()
    };
    (of(Variant::PRISTINE), of(Variant::PATCHED))
}

/// Every variant printed digests, and they agree.
fn same_bits(on: &[ServerRuns]) -> bool {
    on.iter().all(|r| !r.digests.is_empty()) && on.windows(2).all(|w| w[0].digests == w[1].digests)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlx_expectations::SERVER_CELLS;
    use std::os::unix::process::ExitStatusExt;

    const MIB: i64 = 1 << 20;

    fn code(c: i32) -> ExitStatus {
        ExitStatus::from_raw(c << 8)
    }

    fn suite(variant: Variant, results: &[(&str, &str)], status: i32) -> SuiteRun {
        SuiteRun {
            variant,
            results: results
                .iter()
                .map(|(id, o)| (id.to_string(), (o.to_string(), format!("{o} because"))))
                .collect(),
            deselected: (2, 1),
            status: code(status),
        }
    }

    /// Runs that meet a cell's expectation on a variant: every cycle the
    /// whole weights on a leaking one, nothing on a fixed one.
    fn server_runs(cell: &ServerCell, variant: Variant) -> ServerRuns {
        let weights = 64 * MIB;
        let leak = match cell.expect(Expectations::new(false).verdict(&variant)) {
            mlx_expectations::ServerLeak::Never | mlx_expectations::ServerLeak::AtMost { .. } => 0,
            _ => weights,
        };
        ServerRuns {
            variant,
            weights,
            runs: vec![vec![leak; cell.cycles as usize]; cell.processes() as usize],
            digests: vec!["d".into()],
        }
    }

    fn good() -> Evidence {
        let ran = |stdout: &str| Ran {
            success: true,
            status: "exit status: 0".into(),
            stdout: stdout.into(),
            stderr: String::new(),
        };
        Evidence {
            suites: vec![
                suite(Variant::PRISTINE, &[("a", "passed"), ("b", "failed")], 1),
                suite(Variant::PATCHED, &[("a", "passed"), ("b", "failed")], 1),
            ],
            reruns: vec![],
            aborted: Aborted {
                test: "a".into(),
                passed_alone: true,
                status: ExitStatus::from_raw(6),
            },
            server: SERVER_CELLS
                .iter()
                .map(|c| {
                    (
                        *c,
                        vec![
                            server_runs(c, Variant::PRISTINE),
                            server_runs(c, Variant::PATCHED),
                        ],
                    )
                })
                .collect(),
            user: UserPath {
                version: "0.32.2".into(),
                args: vec!["install".into(), "mlx-lm==0.32.2".into()],
                imported: ran("mlx mlx-cpu mlx-lm\n/venv/libmlx.so\n"),
                installed: [("mlx", "1+fork"), ("mlx-cpu", "1+fork")]
                    .iter()
                    .map(|(n, v)| (n.to_string(), v.to_string()))
                    .collect(),
                fork_version: "1+fork".into(),
                libmlx: Ok(()),
                cpu_extra_adds: vec!["mlx-lm".into()],
            },
            numerics: [Variant::PRISTINE, Variant::PATCHED]
                .into_iter()
                .map(|variant| Logits {
                    arch: "llama",
                    variant,
                    max_abs_diff: "0".into(),
                    eager: "e".into(),
                    compiled: "c".into(),
                })
                .collect(),
        }
    }

    fn failures(e: &Evidence) -> Vec<String> {
        judge(e, &Expectations::new(false)).failures
    }

    #[test]
    fn the_fork_as_measured_passes() {
        let t = judge(&good(), &Expectations::new(false));
        assert_eq!(t.failures, Vec::<String>::new());
        // exit, regressions, abort seen, cells × 3, user path × 3, numerics
        assert_eq!(t.passed as usize, 3 + 3 * SERVER_CELLS.len() + 3 + 1);
    }

    #[test]
    fn a_test_worse_on_patched_is_lost_unless_its_reruns_excuse_it() {
        let mut e = good();
        e.suites[1] = suite(Variant::PATCHED, &[("a", "failed"), ("b", "failed")], 1);
        assert_eq!(
            mlx_harness::peer_suite::candidates(&e.suites[0].results, &e.suites[1].results),
            ["a"]
        );
        assert!(
            failures(&e)[0].contains("[\"a\"]"),
            "not rerun: not excused"
        );
        e.reruns = vec![("a".into(), 6, 4)];
        assert!(failures(&e).is_empty(), "flaky on both alike");
        e.reruns = vec![("a".into(), 3, 0)];
        assert_eq!(failures(&e).len(), 1);
    }

    #[test]
    fn an_exit_that_disagrees_with_the_results_fails_on_the_fix_alone() {
        let mut e = good();
        e.suites[0].status = ExitStatus::from_raw(11);
        assert!(failures(&e).is_empty(), "the control's exit is not judged");
        e.suites[1].status = ExitStatus::from_raw(11);
        assert!(failures(&e)[0].starts_with("mlx-lm's suite on patched: pytest ended with"));
        let mut e = good();
        e.aborted.status = code(0);
        assert!(failures(&e)[0].contains("aborts at unload"));
    }

    #[test]
    fn a_server_leak_on_the_fix_or_different_bits_fail() {
        let mut e = good();
        let (_, on) = &mut e.server[0];
        on[1].runs[0][0] = 64 * MIB;
        on[1].digests = vec!["other".into()];
        let f = failures(&e);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[1].ends_with("the variants computed different bits"));
    }

    #[test]
    fn the_user_path_must_keep_the_fork_and_its_libmlx() {
        let mut e = good();
        e.user.installed.insert("mlx".into(), "0.32.2".into());
        e.user.libmlx = Err(mlx_harness::error::anyhow!("loaded upstream's"));
        e.user.cpu_extra_adds.push("mlx-cpu".into());
        assert_eq!(failures(&e).len(), 3);
    }

    #[test]
    fn logits_must_match_across_variants() {
        let mut e = good();
        e.numerics[1].compiled = "c2".into();
        assert!(failures(&e)[0].contains("logits differ"));
    }

    #[test]
    fn the_rows_follow_the_order_the_check_ran_in() {
        let mut e = good();
        e.reruns = vec![("a".into(), 0, 0)];
        let rows: Vec<String> = render(&e).iter().map(|r| r.to_string()).collect();
        assert_eq!(rows.len(), 2 + 1 + SERVER_CELLS.len() + 1 + 2, "{rows:#?}");
        assert!(rows[0].contains("mlx-lm's suite on pristine: 1 passed, 1 failed"));
        assert!(rows[2].contains("alone, failed 0 of"));
        assert!(rows[rows.len() - 3].contains("mlx-lm[cpu]"));
    }
}
