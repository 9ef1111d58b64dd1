//! The mlx-audio check's rules: what it measured ([`Evidence`], plain
//! data), the claims it makes ([`judge`]) and its rows ([`render`]), pure
//! and tested here on made-up evidence.

use mlx_harness::peer_suite::{self, pytest_exit_problem, regression, Suite, RERUNS};
use mlx_harness::process::Ran;
use mlx_harness::tally::Tally;
use mlx_expectations::outcomes::{failing_on_both, regressions};
use mlx_expectations::report::Row;
use mlx_expectations::{ServerCell, ServerLeak};
use std::collections::BTreeMap;
use std::process::ExitStatus;

/// The release mlx-audio's pinned version requires, exactly
/// (`Requires-Dist: mlx==0.32.4`); the check reads it back from the
/// installed metadata and fails if it changed.
pub const MLX_PIN: &str = mlx_patched::pin::Base::V0_32_4.version;

/// The tests of mlx-audio's suite that are not run, each with its reason.
pub const EXCLUDED: &str = "tests/python/mlx_audio_excluded.txt";

/// The server cell's name in rows and messages.
pub const SPEECH_CELL: &str = "mlx-audio MossFormer2_SE: enhance";

/// The weights of MossFormer2_SE at its real size must be at least this:
/// 210.8 MiB measured, so a model built smaller by mistake is caught.
pub const REAL_SIZE_BYTES: i64 = 200 << 20;

/// Everything the mlx-audio check ran.
pub struct Evidence {
    /// The base's release.
    pub base: String,
    /// The fork's wheels' version on this base.
    pub fork_version: String,
    /// What `pip install mlx-audio==<pinned>` would install over the fork's
    /// wheels, from pip's dry-run report: name -> version.
    pub would_install: BTreeMap<String, String>,
    /// On the base mlx-audio pins: the rest.
    pub served: Option<Served>,
}

/// What only the base mlx-audio pins can show.
pub struct Served {
    /// The user's install, carried out.
    pub user: Installed,
    /// The pinned environments: the fork's wheels, then the official ones.
    pub envs: Vec<Installed>,
    /// MossFormer2_SE's server loop, per environment and library set.
    pub speech: Vec<SpeechRuns>,
    /// mlx-audio's suite on the official wheel (the control), then the fork.
    pub suites: Vec<(String, SuiteOutcome)>,
    /// Each test worse on the fork, run alone [`RERUNS`] times on each:
    /// (id, failures on the fork, failures on the official wheel).
    pub reruns: Vec<(String, u32, u32)>,
}

/// One environment after its install.
pub struct Installed {
    /// `fork`, `official`, `user`.
    pub label: String,
    /// The version its `mlx` and `mlx-cpu` must have.
    pub want: String,
    /// Distribution name -> version.
    pub installed: BTreeMap<String, String>,
    /// mlx-audio's own requirement on mlx, from its installed metadata.
    pub mlx_requirement: String,
    pub pip_check: Ran,
    /// Whether the libmlx loaded is the one its library wheel installed.
    pub libmlx: mlx_harness::error::Result<()>,
}

/// One library set's server processes.
pub struct SpeechRuns {
    /// `fork`, `official`, `fork with official BLAS`, …
    pub label: String,
    pub weights: i64,
    /// Bytes retained after each cycle, per process.
    pub runs: Vec<Vec<i64>>,
    /// Every digest every process printed, in order.
    pub digests: Vec<String>,
}

pub struct SuiteOutcome {
    pub results: Suite,
    pub deselected: (usize, usize),
    pub status: ExitStatus,
}

/// The labels of the library sets the speech cell runs, and which set's
/// bits each must reproduce (the swapped BLAS sets attribute any difference
/// between the fork's and the official wheel's bits).
pub const FORK: &str = "fork";
pub const OFFICIAL: &str = "official";
pub const FORK_ON_OFFICIAL_BLAS: &str = "fork's libmlx, official wheel's BLAS and LAPACK";
pub const OFFICIAL_ON_FORK_BLAS: &str = "official libmlx, fork's OpenBLAS";
pub const SAME_BITS: &[(&str, &str)] = &[
    (FORK_ON_OFFICIAL_BLAS, OFFICIAL),
    (OFFICIAL_ON_FORK_BLAS, FORK),
];

pub fn judge(e: &Evidence) -> Tally {
    let mut t = Tally::new();
    let replaces = ["mlx", "mlx-cpu"]
        .iter()
        .any(|n| e.would_install.contains_key(*n));
    let Some(s) = &e.served else {
        // Another base: mlx-audio's exact pin cannot take the fork's wheels,
        // and pip would replace them with upstream's.
        t.claim(replaces, || {
            format!(
                "over the fork's {} wheels, pip would install {:?}: expected it to replace the fork's mlx to meet mlx-audio's mlx=={MLX_PIN}",
                e.fork_version, e.would_install
            )
        });
        return t;
    };
    t.claim(!replaces, || {
        format!(
            "`pip install mlx-audio` over the fork's {} wheels would install {:?}, replacing the fork",
            e.fork_version, e.would_install
        )
    });
    for i in std::iter::once(&s.user).chain(&s.envs) {
        judge_installed(&mut t, i);
    }
    let cell = |label: &str| s.speech.iter().find(|r| r.label == label);
    for r in &s.speech {
        let verdict = ServerCell::judge(ServerLeak::Never, r.weights, &r.runs);
        t.claim(verdict.is_ok(), || {
            format!("{SPEECH_CELL} on {}: {}", r.label, verdict.unwrap_err())
        });
        t.claim(r.weights >= REAL_SIZE_BYTES, || {
            format!(
                "{SPEECH_CELL} on {}: {} bytes of weights, not the model's real size",
                r.label, r.weights
            )
        });
        t.claim(
            !r.digests.is_empty() && r.digests.windows(2).all(|w| w[0] == w[1]),
            || {
                format!(
                    "{SPEECH_CELL} on {}: the same weights and clip gave different bits: {:?}",
                    r.label, r.digests
                )
            },
        );
    }
    for (swapped, like) in SAME_BITS {
        let (a, b) = (cell(swapped), cell(like));
        t.claim(
            matches!((a, b), (Some(a), Some(b)) if !a.digests.is_empty() && a.digests.first() == b.digests.first()),
            || {
                format!(
                    "{SPEECH_CELL}: {swapped} gave {:?}, {like} gave {:?}",
                    a.map(|r| &r.digests),
                    b.map(|r| &r.digests)
                )
            },
        );
    }
    judge_suites(&mut t, s);
    t
}

fn judge_installed(t: &mut Tally, i: &Installed) {
    let ok = ["mlx", "mlx-cpu"]
        .iter()
        .all(|n| i.installed.get(*n) == Some(&i.want));
    t.claim(ok && i.installed.contains_key("mlx-audio"), || {
        format!(
            "{}: mlx {:?}, mlx-cpu {:?}, mlx-audio {:?}; expected mlx and mlx-cpu {}",
            i.label,
            i.installed.get("mlx"),
            i.installed.get("mlx-cpu"),
            i.installed.get("mlx-audio"),
            i.want
        )
    });
    t.claim(i.mlx_requirement == format!("mlx=={MLX_PIN}"), || {
        format!(
            "{}: mlx-audio requires `{}`, the check is written for mlx=={MLX_PIN}",
            i.label, i.mlx_requirement
        )
    });
    t.claim(i.pip_check.success, || {
        format!(
            "{}: pip check: {} {}",
            i.label,
            i.pip_check.status,
            i.pip_check.stdout.trim()
        )
    });
    t.claim(i.libmlx.is_ok(), || {
        format!("{}: {:#}", i.label, i.libmlx.as_ref().unwrap_err())
    });
}

fn judge_suites(t: &mut Tally, s: &Served) {
    let of = |label: &str| s.suites.iter().find(|(l, _)| l == label).map(|(_, o)| o);
    let (Some(control), Some(fork)) = (of(OFFICIAL), of(FORK)) else {
        t.claim(false, || {
            "mlx-audio's suite did not run on both the official wheel and the fork".into()
        });
        return;
    };
    let problem = pytest_exit_problem(fork.status, peer_suite::failed(&fork.results));
    t.claim(problem.is_none(), || {
        format!(
            "mlx-audio's suite on the fork: {}",
            problem.unwrap_or_default()
        )
    });
    let lost: Vec<String> = regressions(
        &peer_suite::words(&control.results),
        &peer_suite::words(&fork.results),
    )
    .iter()
    .map(|r| r.test().to_string())
    .filter(|id| {
        !s.reruns
            .iter()
            .any(|(r, p, q)| r == id && !regression(*p, *q))
    })
    .collect();
    t.claim(lost.is_empty(), || {
        format!("mlx-audio tests worse on the fork than on the official wheel, not excused by {RERUNS} runs alone on each: {lost:?}")
    });
}

pub fn render(e: &Evidence) -> Vec<Row> {
    let mut rows = Vec::new();
    let Some(s) = &e.served else {
        rows.push(Row::note(format!(
            "mlx-audio pins mlx=={MLX_PIN}: over the fork's {} wheels (the {} base) pip would install {:?}; the {MLX_PIN} base serves it",
            e.fork_version, e.base, e.would_install
        )));
        return rows;
    };
    for (label, o) in &s.suites {
        rows.push(Row::note(suite_line(label, o)));
    }
    for (id, p, q) in &s.reruns {
        rows.push(Row::note(format!(
            "mlx-audio's {id}: alone, failed {p} of {RERUNS} runs on the fork and {q} of {RERUNS} on the official wheel"
        )));
    }
    // Notes, not a retained row: the summary table's columns are the
    // variants, and these are wheel sets.
    for r in &s.speech {
        let cycles: Vec<i64> = r.runs.iter().flatten().copied().collect();
        rows.push(Row::note(format!(
            "{SPEECH_CELL} ({:.1} MiB of weights) on {}: {} retained in {} cycles of {} processes, largest {}; digest {}",
            r.weights as f64 / 1048576.0,
            r.label,
            mlx_expectations::report::bytes(cycles.iter().sum::<i64>() as f64),
            cycles.len(),
            r.runs.len(),
            mlx_expectations::report::bytes(cycles.iter().copied().max().unwrap_or(0) as f64),
            r.digests.first().map_or("none", String::as_str)
        )));
    }
    rows
}

pub fn suite_line(label: &str, o: &SuiteOutcome) -> String {
    let count = |w: &str| o.results.values().filter(|(x, _)| x == w).count();
    format!(
        "mlx-audio's suite on {label}: {} passed, {} failed, {} skipped; excluded ({EXCLUDED}): {} tests and {} whole modules",
        count("passed"),
        count("failed"),
        count("skipped"),
        o.deselected.0,
        o.deselected.1
    )
}

/// Each test that fails on both, with the fork's detail.
pub fn failing_on_both_lines(s: &Served) -> Vec<String> {
    let of = |label: &str| s.suites.iter().find(|(l, _)| l == label).map(|(_, o)| o);
    let (Some(control), Some(fork)) = (of(OFFICIAL), of(FORK)) else {
        return Vec::new();
    };
    failing_on_both(
        &peer_suite::words(&control.results),
        &peer_suite::words(&fork.results),
    )
    .into_iter()
    .map(|id| {
        let detail = fork.results.get(&id).map(|(_, d)| d.as_str()).unwrap_or("");
        format!("{id}: {detail}")
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    const WEIGHTS: i64 = 221_049_640;

    fn ran(success: bool) -> Ran {
        Ran {
            success,
            status: if success {
                "exit status: 0"
            } else {
                "exit status: 1"
            }
            .into(),
            stdout: String::new(),
            stderr: String::new(),
        }
    }

    fn installed(label: &str, want: &str) -> Installed {
        Installed {
            label: label.into(),
            want: want.into(),
            installed: [("mlx", want), ("mlx-cpu", want), ("mlx-audio", "0.6.2")]
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            mlx_requirement: format!("mlx=={MLX_PIN}"),
            pip_check: ran(true),
            libmlx: Ok(()),
        }
    }

    fn speech(label: &str, digest: &str) -> SpeechRuns {
        SpeechRuns {
            label: label.into(),
            weights: WEIGHTS,
            runs: vec![vec![0, 0, 0]; 2],
            digests: vec![digest.into(); 6],
        }
    }

    fn suite(results: &[(&str, &str)], status: i32) -> SuiteOutcome {
        SuiteOutcome {
            results: results
                .iter()
                .map(|(id, o)| (id.to_string(), (o.to_string(), String::new())))
                .collect(),
            deselected: (3, 2),
            status: ExitStatus::from_raw(status << 8),
        }
    }

    const FORK_VERSION: &str = "0.32.4+fork.abc";

    /// The fork as measured on its pinned base.
    fn good() -> Evidence {
        Evidence {
            base: MLX_PIN.into(),
            fork_version: FORK_VERSION.into(),
            would_install: [("mlx-audio".to_string(), "0.6.2".to_string())].into(),
            served: Some(Served {
                user: installed("user", FORK_VERSION),
                envs: vec![installed(FORK, FORK_VERSION), installed(OFFICIAL, MLX_PIN)],
                speech: vec![
                    speech(FORK, "f"),
                    speech(OFFICIAL, "o"),
                    speech(FORK_ON_OFFICIAL_BLAS, "o"),
                    speech(OFFICIAL_ON_FORK_BLAS, "f"),
                ],
                suites: vec![
                    (
                        OFFICIAL.into(),
                        suite(&[("a", "passed"), ("b", "failed")], 1),
                    ),
                    (FORK.into(), suite(&[("a", "passed"), ("b", "failed")], 1)),
                ],
                reruns: Vec::new(),
            }),
        }
    }

    #[test]
    fn the_fork_as_measured_passes() {
        let t = judge(&good());
        assert!(t.failures.is_empty(), "{:?}", t.failures);
        // Not replaced; 3 installs × 4; 4 library sets × 3; 2 swaps;
        // the fork's exit; regressions.
        assert_eq!(t.passed, 1 + 12 + 12 + 2 + 2);
    }

    #[test]
    fn another_base_must_be_one_pip_would_replace() {
        let mut e = good();
        e.served = None;
        e.fork_version = "0.32.2+fork.abc".into();
        assert_eq!(judge(&e).failures.len(), 1);
        e.would_install.insert("mlx".into(), MLX_PIN.into());
        let t = judge(&e);
        assert!(t.failures.is_empty() && t.passed == 1, "{:?}", t.failures);
    }

    #[test]
    fn a_leak_a_small_model_or_unstable_bits_fail() {
        for spoil in [
            |r: &mut SpeechRuns| r.runs[1][2] = 4096,
            |r: &mut SpeechRuns| r.weights = 12 << 20,
            |r: &mut SpeechRuns| r.digests[3] = "x".into(),
            |r: &mut SpeechRuns| r.runs.clear(),
        ] {
            let mut e = good();
            spoil(&mut e.served.as_mut().unwrap().speech[0]);
            assert_eq!(judge(&e).failures.len(), 1);
        }
    }

    #[test]
    fn swapped_blas_must_reproduce_the_other_wheel_s_bits() {
        let mut e = good();
        e.served.as_mut().unwrap().speech[2] = speech(FORK_ON_OFFICIAL_BLAS, "f");
        let t = judge(&e);
        assert_eq!(t.failures.len(), 1, "{:?}", t.failures);
        assert!(t.failures[0].contains(FORK_ON_OFFICIAL_BLAS));
        let mut e = good();
        e.served.as_mut().unwrap().speech.pop();
        assert_eq!(judge(&e).failures.len(), 1);
    }

    #[test]
    fn an_install_that_lost_the_fork_fails() {
        let spoils: [fn(&mut Installed); 4] = [
            |i| {
                i.installed.insert("mlx-cpu".into(), MLX_PIN.into());
            },
            |i| i.pip_check = ran(false),
            |i| i.libmlx = Err(mlx_harness::error::anyhow!("loaded the official libmlx")),
            |i| i.mlx_requirement = "mlx>=0.32.4".into(),
        ];
        for spoil in spoils {
            let mut e = good();
            spoil(&mut e.served.as_mut().unwrap().user);
            assert_eq!(judge(&e).failures.len(), 1);
        }
        let mut e = good();
        e.would_install.insert("mlx".into(), MLX_PIN.into());
        assert_eq!(judge(&e).failures.len(), 1);
    }

    #[test]
    fn a_test_lost_on_the_fork_fails_unless_flaky_on_both() {
        let mut e = good();
        let s = e.served.as_mut().unwrap();
        s.suites[1].1 = suite(&[("a", "failed"), ("b", "failed")], 1);
        assert_eq!(judge(&e).failures.len(), 1);
        let s = e.served.as_mut().unwrap();
        s.reruns = vec![("a".into(), 4, 5)];
        assert!(judge(&e).failures.is_empty());
        // A crash after the last test: the exit disagrees with the results.
        let mut e = good();
        e.served.as_mut().unwrap().suites[1].1 = suite(&[("a", "passed"), ("b", "failed")], 134);
        assert_eq!(judge(&e).failures.len(), 1);
        // No control run: nothing to compare with.
        let mut e = good();
        e.served.as_mut().unwrap().suites.remove(0);
        assert_eq!(judge(&e).failures.len(), 1);
    }

    #[test]
    fn the_rows_name_each_suite_and_the_cell() {
        let rows: Vec<String> = render(&good()).iter().map(|r| r.to_string()).collect();
        assert_eq!(rows.len(), 2 + 4, "{rows:#?}");
        assert!(
            rows[0].contains("on official: 1 passed, 1 failed"),
            "{}",
            rows[0]
        );
        let mut e = good();
        e.served = None;
        assert_eq!(render(&e).len(), 1);
    }
}
